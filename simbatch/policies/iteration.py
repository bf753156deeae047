"""Iteration-level scheduling: what continuous batching and chunked prefill share.

Both keep a ``running`` list (admission order) and rebuild the batch at every
step. KV memory is taken as tokens are computed; when a running request needs a
block and none is free, the newest running request is preempted by recompute
(its blocks freed, its computed tokens discarded, back to the *front* of the
queue) — nano-vllm's and vLLM's idiom.
"""

from __future__ import annotations

from simbatch.plan import StepPlan
from simbatch.policies.base import Policy
from simbatch.sequence import FINISHED, RUNNING, Sequence


class IterationPolicy(Policy):
    """Base for policies that re-form the batch at every step."""

    steady_kind = "running"

    def __init__(self, params, kv, note=lambda m: None):
        super().__init__(params, kv, note)
        self.running: list[Sequence] = []

    def max_request_tokens(self) -> int | None:
        return None

    def steady_decode(self) -> bool:
        # Everyone decoding and nobody admissible: schedule() would plan all
        # running requests, one token each, in admission order, until a finish
        # frees seats or blocks (or, with an empty queue, until an arrival).
        if not self.running or (self.waiting and not self.head_blocked()):
            return False  # cheap checks first: under load the queue usually decides
        return self.all_decoding()

    def all_decoding(self) -> bool:
        """Every running request has finished its prefill."""
        return all(s.is_decoding for s in self.running)

    def head_blocked(self) -> bool:
        """The queue's head cannot be admitted, and only a finish can change that: seats are
        full, the step's tokens are spoken for, or its blocks exceed what is free (and free
        blocks only shrink while requests decode)."""
        if len(self.running) >= self.params.max_num_seqs:
            return True
        seq = self.waiting[0]
        n = self.admission_tokens(seq)
        if n <= 0:
            return True
        reserve = int(self.params.watermark * self.kv.num_blocks)
        return not self.kv.can_allocate(self.kv.blocks_needed(seq, n), reserve)

    def admission_tokens(self, seq: Sequence) -> int:
        """Tokens the head would compute if admitted next step (0 or less: no room in the step)."""
        raise NotImplementedError

    def on_step_done(self, plan: StepPlan, finished: list[Sequence], now: float) -> None:
        if finished:
            for s in finished:
                self.kv.free(s)
            if len(finished) < 4:  # the usual case: a scan in C per finish beats a rebuild
                for s in finished:
                    self.running.remove(s)
            else:
                self.running = [s for s in self.running if s.status != FINISHED]

    def may_grow(self, seq: Sequence, num_new: int, protected: frozenset[int] = frozenset()) -> bool:
        """Get ``seq`` the blocks for ``num_new`` tokens, preempting the newest runners if needed.

        Requests whose ids are in ``protected`` (already in this step's plan) are
        never chosen as victims. Returns False when ``seq`` itself had to go.
        """
        need = self.kv.blocks_needed(seq, num_new)
        while not self.kv.can_allocate(need):
            victim = self.newest_victim(protected)
            self.preempt(victim)
            if victim is seq:
                if not self.running and self.kv.num_used == 0:
                    # Alone on an empty cache and still short: it can never run
                    # (simulate() rejects such workloads up front; this stops a livelock).
                    raise RuntimeError(f"request {seq.id} needs more KV blocks than exist")
                return False
        self.kv.allocate(seq, need)
        return True

    def newest_victim(self, protected: frozenset[int]) -> Sequence:
        """Remove and return the most recently admitted running request not in ``protected``."""
        for i in range(len(self.running) - 1, -1, -1):
            if self.running[i].id not in protected:
                return self.running.pop(i)
        raise RuntimeError("no running request can be preempted")

    def preempt(self, seq: Sequence) -> None:
        """Recompute preemption: free ``seq``'s KV and put it at the head of the queue."""
        self.kv.free(seq)
        seq.reset_for_recompute()
        self.waiting.appendleft(seq)

    def may_admit(self, seq: Sequence, num_new: int, reserve: int = 0) -> bool:
        """Admit the head of the queue for ``num_new`` tokens if its blocks fit (keeping ``reserve`` spare)."""
        need = self.kv.blocks_needed(seq, num_new)
        if not self.kv.can_allocate(need, reserve):
            return False
        self.kv.allocate(seq, need)
        self.waiting.popleft()
        seq.status = RUNNING
        self.running.append(seq)
        return True
