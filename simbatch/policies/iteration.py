"""Iteration-level scheduling: what continuous batching and chunked prefill share.

Both keep a ``running`` list (admission order) and rebuild the batch at every
step. KV memory is taken as tokens are computed; when a running request needs a
block and none is free, the newest running request is preempted by recompute
(its blocks freed, its computed tokens discarded, back to the *front* of the
queue) — nano-vllm's and vLLM's idiom.

The queue's order is a separate object (:class:`~simbatch.policies.queue_order.QueueOrder`,
``queue_order``); admission always takes the front of the queue as that order left it.
With prefix caching a queued request is admitted onto its longest cached prefix
(``KVCache.match`` / ``claim``) and computes only the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simbatch.core.params import require
from simbatch.core.plan import StepPlan
from simbatch.core.sequence import FINISHED, RUNNING, Sequence
from simbatch.core.stop import BUDGET, EMPTY, KV, NONE, PADDING, SEATS
from simbatch.policies.base import Policy, SteadyRun, steady
from simbatch.policies.queue_order import QueueOrder, check_queue_params


@dataclass(frozen=True)
class IterationParams:
    """Knobs continuous batching and chunked prefill share: the queue order and priorities
    (:mod:`simbatch.policies.queue_order`) and the streams a step may use."""

    queue_order: str = "fcfs"
    max_wait_s: float | None = None
    preempt_lower_priority: bool = False
    length_buckets: list[int] = field(default_factory=list)
    lpm_max_queue: int = 128
    # 2: a step's decodes and prefill chunks on separate streams (StepPlan.micro_batches)
    streams: int = 1

    def check_shared(self) -> None:
        """``__post_init__`` checks of these knobs (subclasses call it)."""
        check_queue_params(self)
        require(self.streams in (1, 2), "streams", "must be 1 or 2")


class IterationPolicy(Policy):
    """Base for policies that re-form the batch at every step."""

    # Whether steady_run may describe mixed runs (decodes plus schedule_chunks's chunks):
    # chunked prefill's, off under an age bound or priority preemption (see __init__).
    mixes_chunks = False
    # Drafts a decode verifies per step (speculative decoding; set by the engine from the
    # scenario's ``speculative`` section, which also turns the fast path off). 0: none.
    spec_tokens = 0

    def __init__(self, params, kv, note=lambda m: None):
        super().__init__(params, kv, note)
        self.running: list[Sequence] = []
        self.num_preempted = 0  # preemptions so far (callers compare it around may_grow)
        self.order = QueueOrder(params, kv, note)
        if self.order.max_wait_s is not None or params.preempt_lower_priority:
            # The fast path's mixed steps plan chunks without the time or a priority
            # pass (see schedule_chunks); leave such steps to schedule().
            self.mixes_chunks = False

    def max_request_tokens(self) -> int | None:
        return None

    def decode_tokens(self, seq: Sequence) -> int:
        """Tokens a decode of ``seq`` computes: its last token, plus under speculative decoding
        the drafts to verify, never past its last output token (the engine knows max_tokens)."""
        return 1 + min(self.spec_tokens, seq.output_tokens - seq.num_generated - 1)

    def decode_need(self) -> int:
        """Tokens of a step's budget the running requests' decodes take: one each, plus their
        drafts under speculative decoding."""
        return sum(map(self.decode_tokens, self.running)) if self.spec_tokens else len(self.running)

    def add(self, seq: Sequence, now: float) -> None:
        self.waiting.append(seq)
        self.order.dirty = True

    def order_queue(self, now: float | None) -> None:
        """Sort the queue by ``queue_order`` (FCFS: leave it as it is)."""
        if not self.order.is_fcfs:
            self.waiting = self.order.sort(self.waiting, now)

    def steady_run(self) -> SteadyRun | None:
        # Everyone decoding and nobody admissible: schedule() would plan all running
        # requests, one token each, in admission order, until a finish frees seats or
        # blocks (or, with an empty queue, until an arrival). The admission's stop reason,
        # which the steady steps log, is the dry run's.
        if not self.running:
            return None
        if not self.waiting:
            self.stop_reason = EMPTY
        else:  # cheap checks first: under load the queue usually decides
            if self.order.is_fcfs:
                if not self.head_blocked():
                    return None
            # Other orders may put an arrival (or a request that just aged) at the head,
            # so only a block that holds whoever heads the queue keeps the run steady.
            elif self.params.preempt_lower_priority or not self.blocked_for_all():
                return None
        if not self.all_decoding():
            return None
        return steady("running", self.stop_reason, not self.waiting)

    def blocked_for_all(self) -> bool:
        """No queued request, whichever, can be admitted before a running one finishes (no
        seat, or no token of the step's budget); records which in :attr:`stop_reason`."""
        stop = self.queue_stop(self.prefill_room())
        if stop == NONE:
            return False
        self.stop_reason = stop
        return True

    def queue_stop(self, budget: int) -> int:
        """Why nobody can be admitted with ``budget`` tokens of the step left, whoever heads the
        queue: ``EMPTY``, ``SEATS`` or ``BUDGET``, in that order (:mod:`simbatch.core.stop`);
        ``NONE`` when the head itself must be asked (:meth:`head_admission`)."""
        if not self.waiting:
            return EMPTY
        if len(self.running) >= self.params.max_num_seqs:
            return SEATS
        return BUDGET if budget <= 0 else NONE

    def prefill_room(self) -> int:
        """Tokens of the step's budget left for admissions once every running request has
        its decode token (schedule() passes the same figure to :meth:`admit_queue`)."""
        raise NotImplementedError

    def all_decoding(self) -> bool:
        """Every running request has finished its prefill."""
        return all(s.is_decoding for s in self.running)

    def head_blocked(self) -> bool:
        """The queue's head cannot be admitted, and only a finish can change that: the dry run
        of the admission schedule() would make (seats, the step's tokens and free blocks
        only shrink while requests decode), which leaves its reason in :attr:`stop_reason`."""
        return self.head_admission(self.prefill_room()) is None

    def admission_tokens(self, seq: Sequence, hit: int, budget: int) -> int:
        """Tokens ``seq`` would compute in the step that admits it onto ``hit`` cached tokens,
        with ``budget`` tokens of the step left (0 or less: it does not fit)."""
        raise NotImplementedError

    def head_admission(self, budget: int) -> tuple[int, tuple[int, int]] | None:
        """Dry run of admitting the queue's head with ``budget`` tokens of the step left:
        ``(tokens, match)`` if a seat, the budget and KV blocks (above the watermark) allow
        it, else None, with the reason in :attr:`stop_reason` (checked in the order of
        :mod:`simbatch.core.stop`). Changes nothing else; :meth:`admit_queue` and the steady
        check both use it, so the rule is written once."""
        stop = self.queue_stop(budget)
        if stop != NONE:
            self.stop_reason = stop
            return None
        seq, kv = self.waiting[0], self.kv
        match = kv.match(seq)
        n = self.admission_tokens(seq, match[0], budget)
        if n <= 0:
            self.stop_reason = BUDGET
            return None
        if not kv.can_allocate(kv.admission_blocks(seq, n, match), self.admission_reserve()):
            self.stop_reason = KV
            return None
        return n, match

    def admission_reserve(self) -> int:
        """KV blocks an admission must leave free: the ``watermark`` share of the cache, which
        keeps room for running requests to grow (vLLM V0's BlockSpaceManager). A request under
        ``kv_cache.mode: max_length`` reserved its whole life at admission and never grows, so
        none is kept (Sarathi-Serve's OrcaBlockSpaceManager: watermark 0)."""
        kv = self.kv
        return 0 if kv.mode == "max_length" else int(self.params.watermark * kv.num_blocks)

    def admit_queue(self, budget: int, now: float | None) -> list[tuple[Sequence, int]]:
        """Admit from the head of the queue (in ``queue_order``) while :meth:`head_admission`
        allows; returns the ``(request, tokens)`` admitted, and leaves why it stopped in
        :attr:`stop_reason`."""
        taken: list[tuple[Sequence, int]] = []
        if not self.waiting or len(self.running) >= self.params.max_num_seqs:
            self.stop_reason = SEATS if self.waiting else EMPTY
            return taken
        self.order_queue(now)
        while (admission := self.head_admission(budget)) is not None:
            n, match = admission
            if taken and not self.joins_batch([k for _, k in taken], n):
                self.stop_reason = PADDING
                break
            seq = self.waiting[0]
            self.admit(seq, n, match)
            taken.append((seq, n))
            budget -= n
        return taken

    def joins_batch(self, admitted: list[int], n: int) -> bool:
        """Whether the queue's head, computing ``n`` tokens, may join a step that already admits
        requests computing ``admitted`` tokens (the head alone always may, if
        :meth:`head_admission` allows it). Default: yes."""
        return True

    def preempt_for_priority(self, now: float) -> None:
        """``preempt_lower_priority``: while the queue's head (the most important request)
        cannot be admitted, preempt the least important class's latest arrival
        (:meth:`priority_victim`), if that class is less important than the head's (vLLM's
        priority preemption)."""
        if not (self.params.preempt_lower_priority and self.waiting and self.running):
            return
        self.order_queue(now)
        head = self.waiting[0]
        while self.running and self.head_blocked():
            i = self.priority_victim(range(len(self.running)))
            if self.running[i].priority <= head.priority:
                return
            self.preempt(self.running.pop(i))
            self.order_queue(now)  # the victim is less important: it queues behind the head

    def on_step_done(self, plan: StepPlan, finished: list[Sequence], now: float) -> None:
        if finished:
            if self.kv.prefix_caching and len(finished) > 1:
                # Requests finishing in one step release their cached blocks in id order, so
                # the LRU order (hence what is evicted) does not depend on how the engine
                # found them (the fast path finds them in another order).
                finished = sorted(finished, key=lambda s: s.id)
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
        """Remove and return the running request to preempt when KV runs short: the most
        recently admitted one not in ``protected`` or, under ``queue_order: priority``, the
        latest arrival of the least important class (vLLM v1's priority scheduling:
        ``max(self.running, key=lambda r: (r.priority, r.arrival_time))``; a request re-admitted
        after a preemption is newest by admission but keeps its early arrival)."""
        running = self.running
        candidates = [i for i in range(len(running)) if running[i].id not in protected]
        if not candidates:
            raise RuntimeError("no running request can be preempted")
        if self.params.queue_order == "priority":
            return running.pop(self.priority_victim(candidates))
        return running.pop(candidates[-1])

    def priority_victim(self, indices) -> int:
        """The index, among ``indices`` into the running list, of the least important class's
        latest arrival (admission order breaks exact ties)."""
        running = self.running
        return max(indices, key=lambda i: (running[i].priority, running[i].arrival_s, i))

    def preempt(self, seq: Sequence) -> None:
        """Recompute preemption: free ``seq``'s KV and put it at the head of the queue
        (other orders than FCFS then sort it among the rest)."""
        self.kv.free(seq)
        seq.reset_for_recompute()
        self.num_preempted += 1
        self.waiting.appendleft(seq)
        self.order.dirty = True

    def admit(self, seq: Sequence, num_new: int, match: tuple[int, int]) -> None:
        """Make the queue's head ``seq`` a running request computing ``num_new`` tokens after its
        cached prefix (``match``, from ``KVCache.match``); :meth:`head_admission` said it fits."""
        kv = self.kv
        kv.claim(seq, match)
        kv.allocate(seq, kv.blocks_needed(seq, num_new))
        kv.commit(seq, seq.num_computed + num_new)
        self.waiting.popleft()
        seq.status = RUNNING
        self.running.append(seq)
