"""Chunked prefill: stall-free batching (Sarathi-Serve, vLLM's chunked prefill).

Each step has a token budget (``max_num_batched_tokens``, default 2048: vLLM
v1's default for its API server on an A100 or a smaller GPU; it gives 8192 on
larger ones, ``vllm/engine/arg_utils.py``, ``EngineArgs._set_default_args``).
Running decodes are scheduled first, one token each, so a long prompt never
stalls them; what is left of the budget goes to prefill chunks, first to
requests whose prefill is under way, then to new ones from the queue, while
``max_num_seqs`` and KV memory allow. One request's chunk is at most
``long_prefill_token_threshold`` tokens (vLLM v1's name; 0, the default: no
cap but the budget). ``chunk_size``, Sarathi-Serve's name, is accepted as an
alias for that cap, and without an explicit budget it is also the budget
(Sarathi-Serve's "token budget" is its chunk size), so scenarios written for
the earlier default keep their meaning.

vLLM v1's scheduler (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``)
walks its running requests in admission order, whether they decode or
prefill; this one puts every decode before any chunk (Sarathi-Serve's rule).
The two differ only when a partial prefill admitted earlier than some
decoding request meets a budget too small for both.

New requests come from the queue in ``queue_order``
(:mod:`simbatch.policies.queue_order`), except in a step that preempted a
running request: as vLLM v1's ``Scheduler.schedule`` ("if not
preempted_reqs"), such a step admits nobody, so memory freed by a preemption
is not handed straight to a newcomer that would soon be preempted in turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from simbatch.core.params import require
from simbatch.core.plan import StepPlan
from simbatch.core.sequence import RUNNING, Sequence
from simbatch.core.stop import NONE, PREEMPTED
from simbatch.policies.base import steady
from simbatch.policies.iteration import IterationParams, IterationPolicy

DEFAULT_BUDGET = 2048  # vLLM v1's API-server max_num_batched_tokens on A100-class GPUs
MIXED = steady("mixed", NONE, False)  # the running decodes plus schedule_chunks's chunks


@dataclass(frozen=True)
class ChunkedPrefillParams(IterationParams):
    """vLLM v1's knob names (module docstring); ``chunk_size`` is an alias of
    ``long_prefill_token_threshold`` that also sets the budget when it is not given."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    long_prefill_token_threshold: int = 0
    chunk_size: int | None = None
    watermark: float = 0.01

    def __post_init__(self):
        require(self.max_num_seqs >= 1, "max_num_seqs", "must be >= 1")
        require(self.long_prefill_token_threshold >= 0, "long_prefill_token_threshold", "must be >= 0 (0: no cap)")
        if self.chunk_size is not None:
            require(self.chunk_size >= 1, "chunk_size", "must be >= 1")
            require(not self.long_prefill_token_threshold, "chunk_size",
                    "is an alias of long_prefill_token_threshold: give one of them")
        require(0 <= self.watermark < 1, "watermark", "must be in [0, 1)")
        if self.max_num_batched_tokens is None:
            object.__setattr__(self, "max_num_batched_tokens", self.chunk_size or DEFAULT_BUDGET)
        require(self.max_num_batched_tokens >= 1, "max_num_batched_tokens", "must be >= 1")
        self.check_shared()

    @property
    def budget(self) -> int:
        """Tokens one step may compute."""
        return int(self.max_num_batched_tokens)

    @property
    def chunk_cap(self) -> int:
        """Most tokens one request's chunk may take (the budget when nothing caps it)."""
        return self.long_prefill_token_threshold or self.chunk_size or self.budget


class ChunkedPrefillPolicy(IterationPolicy):
    """Decodes first, then prefill chunks, never more than the step's token budget."""

    kind = "chunked_prefill"
    Params = ChunkedPrefillParams
    knobs = {"slo": "max_num_batched_tokens"}  # the SLO controller turns the step's token budget
    # The engine's fast path may run the decodes lazily and ask only for the
    # chunks (schedule_chunks), since decodes never depend on the chunks: steady_run's MIXED.
    mixes_chunks = True
    # steady_run and schedule_chunks share schedule()'s code (head_admission, take_running)
    fast_path = True

    def __init__(self, params, kv, note=lambda m: None):
        super().__init__(params, kv, note)
        # Running requests whose prefill is under way, in running order: kept as steps
        # complete (exact between steps), so that neither schedule() nor the fast path's
        # steady check and chunk planning rescan the running list for them.
        self.prefilling: list[Sequence] = []
        self.rescan = False  # a preemption reordered things: rebuild prefilling after the step
        self.preempted_now = False  # this step preempted someone: admit nobody (vLLM v1)

    def schedule(self, now: float) -> StepPlan | None:
        budget = self.params.budget
        self.preempt_for_priority(now)
        # Preempting for a more important waiting request is meant to admit it: only
        # preemptions for KV growth below hold the queue back.
        self.preempted_now = False
        if self.rescan:  # the priority pass preempted: the running list lost some requests
            self.rescan_prefilling()
        # The rest of the running list decodes (seq.is_decoding, inlined: this runs every step).
        decoding = [s for s in self.running if s.num_generated and s.num_tokens - s.num_computed == 1]
        decodes, budget = self.take_running(decoding, budget, decoding=True)
        # Mid-prefill chunks may preempt, but never a decode already in this plan.
        protected = frozenset(s.id for s, _ in decodes)
        chunks, budget = self.take_running(self.prefilling, budget, decoding=False, protected=protected)
        chunks += self.admit_chunks(budget, now)
        if not decodes and not chunks:
            return None
        slots = decodes + chunks
        return StepPlan(
            request_ids=[s.id for s, _ in slots],
            num_new_tokens=[n for _, n in slots],
            num_context_tokens=[s.num_computed for s, _ in slots],
            num_decode_slots=len(decodes),
            num_streams=self.params.streams,
        )

    def schedule_chunks(self, budget: int, protected) -> list[tuple[Sequence, int]]:
        """The chunk part of :meth:`schedule` when every running decode is already planned
        (its blocks taken, ``budget`` what they left; ``protected``: their ids). Policies
        with an age bound or priority preemption never get here (``mixes_chunks`` is off)."""
        self.preempted_now = False  # the decodes were planned without preempting anyone
        chunks, budget = self.take_running(self.prefilling, budget, False, protected)
        admitted = self.admit_chunks(budget)  # under load mostly none: no budget is left
        return chunks + admitted if admitted else chunks

    def all_decoding(self) -> bool:
        return not self.prefilling

    def admit(self, seq: Sequence, num_new: int, match: tuple[int, int]) -> None:
        super().admit(seq, num_new, match)
        self.prefilling.append(seq)

    def preempt(self, seq: Sequence) -> None:
        super().preempt(seq)
        self.rescan = self.preempted_now = True

    def on_step_done(self, plan, finished, now) -> None:
        if finished:  # the base retires finished requests and does nothing else (asked only then)
            super().on_step_done(plan, finished, now)
        if self.rescan:
            self.rescan_prefilling()
        else:
            # (not s.is_decoding, inlined: this runs every step)
            self.prefilling = [s for s in self.prefilling
                               if s.status == RUNNING and not (s.num_generated and s.num_tokens - s.num_computed == 1)]

    def rescan_prefilling(self) -> None:
        """Rebuild :attr:`prefilling` from the running list (after a preemption took some out)."""
        self.rescan = False
        self.prefilling = [s for s in self.running if not s.is_decoding]

    def steady_run(self):
        # ... and only while every decode fits in the step's token budget. A request mid-prefill
        # (all_decoding, the base's last check) is asked first: it settles the answer without
        # the queue head's dry run, and under load nearly every step has one.
        if not self.prefilling and len(self.running) <= self.params.budget:
            run = super().steady_run()
            if run is not None:
                return run
        return MIXED if self.mixes_chunks else None

    def admission_reserve(self) -> int:
        # vLLM v1 keeps the watermark only while some request is scheduled in the step
        # (KVCacheManager.allocate_slots: has_scheduled_reqs): on an idle cache a request may
        # take every block. Requests admitted earlier in this step are running by now.
        return super().admission_reserve() if self.running else 0

    def prefill_room(self) -> int:
        # What is left of the budget after every running decode's token (and drafts).
        return self.params.budget - self.decode_need()

    def admission_tokens(self, seq: Sequence, hit: int, budget: int) -> int:
        # A first chunk: what the prefix cache does not hold, within the cap and the budget.
        return min(seq.num_tokens - hit, self.params.chunk_cap, budget)

    def take_running(self, seqs: list[Sequence], budget: int, decoding: bool,
                     protected: frozenset[int] = frozenset()) -> tuple[list[tuple[Sequence, int]], int]:
        """Running requests ``seqs`` of one kind (decoding or mid-prefill), oldest first, within ``budget``."""
        taken = []
        block_size = self.kv.block_size
        cap = self.params.chunk_cap
        for seq in seqs:
            if budget <= 0:
                break
            if seq.status != RUNNING:
                continue  # preempted a moment ago
            if decoding:  # its last token, and under speculative decoding its drafts (within budget)
                n = 1 if not self.spec_tokens else min(self.decode_tokens(seq), budget)
            else:
                n = min(seq.num_tokens - seq.num_computed, cap, budget)  # seq.num_remaining, inlined
            # Only call into the allocator when the tokens overflow the blocks held.
            if seq.num_computed + n > seq.num_blocks * block_size:
                before = self.num_preempted
                if not self.may_grow(seq, n, protected):
                    break  # it was the victim itself: vLLM v1 plans no later one
                if self.num_preempted != before and any(s.status != RUNNING for s, _ in taken):
                    # a victim planned earlier in this pass (priority order) leaves the plan
                    # and gives its tokens back, as in vLLM v1 (see ContinuousPolicy.grow_decodes)
                    budget += sum(k for s, k in taken if s.status != RUNNING)
                    taken = [(s, k) for s, k in taken if s.status == RUNNING]
            if not decoding and self.kv.prefix_caching:  # only a prefix cache's commit does anything
                self.kv.commit(seq, seq.num_computed + n)  # share its full blocks
            taken.append((seq, n))
            budget -= n
        return taken, budget

    def admit_chunks(self, budget: int, now: float | None = None) -> list[tuple[Sequence, int]]:
        """First chunks of queued requests (after their cached prefix), in queue order,
        while budget, seats and KV last; none in a step that preempted (vLLM v1). Why it
        stopped is left in :attr:`stop_reason`."""
        if self.preempted_now:
            self.stop_reason = PREEMPTED
            return []
        if budget <= 0:  # nobody fits (the usual case under load): no need to order the queue
            self.stop_reason = self.queue_stop(budget)
            return []
        return self.admit_queue(budget, now)
