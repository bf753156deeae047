"""Continuous (iteration-level) batching: Orca's idea with vLLM's scheduling rules.

At every step boundary finished requests leave and waiting ones join, limited by
``max_num_seqs`` running requests, ``max_num_batched_tokens`` per step and free
KV blocks. Prefill-first by default (vLLM before chunked prefill): if any
waiting request can be admitted, the step runs only their whole prompts and the
running decodes pause for it; otherwise the step decodes every running request.
``mix_prefill_decode: true`` runs the new prompts together with the decodes in
one step (Orca's selective batching) instead. ``max_paddings`` is vLLM v0.2's
padded prompt batch: the prompts of one prefill step are padded to the longest,
the padded total must fit ``max_num_batched_tokens`` and the padding
``max_paddings`` (vLLM v0.2.3 ``Scheduler._schedule``; v0.3 flattened the batch). The queue's order and priority
preemption are the ``queue_order`` knobs (:mod:`simbatch.policies.queue_order`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simbatch.core.params import require
from simbatch.core.plan import StepPlan
from simbatch.core.sequence import RUNNING, Sequence
from simbatch.policies.iteration import IterationParams, IterationPolicy

DEFAULT_MIN_BUDGET = 2048  # vLLM V0: "If max_model_len is too short, use 2048 as the default value"


@dataclass(frozen=True)
class ContinuousParams(IterationParams):
    """vLLM's knob names; ``watermark`` is the fraction of KV kept free when admitting."""

    max_num_seqs: int = 256
    # None: vLLM V0's default without chunked prefill, the model's context window and at least
    # 2,048 (v0.2.3 vllm/config.py SchedulerConfig.__init__: max(max_model_len, 2048)), set by
    # for_model when the scenario's model is known.
    max_num_batched_tokens: int | None = None
    watermark: float = 0.01
    mix_prefill_decode: bool = False
    # vLLM v0.2.x padded the prompts of a prefill step to the longest (2-D input tensors) and
    # capped the padding (--max-paddings, default 256); None: prompts are packed unpadded.
    max_paddings: int | None = None

    def __post_init__(self):
        require(self.max_num_seqs >= 1, "max_num_seqs", "must be >= 1")
        require(self.max_num_batched_tokens is None or self.max_num_batched_tokens >= 1, "max_num_batched_tokens",
                "must be >= 1")
        require(0 <= self.watermark < 1, "watermark", "must be in [0, 1)")
        require(self.max_paddings is None or self.max_paddings >= 0, "max_paddings", "must be >= 0")
        require(self.max_paddings is None or not self.mix_prefill_decode, "max_paddings",
                "pads prompt-only steps (vLLM v0.2); it cannot be combined with mix_prefill_decode")
        self.check_shared()

    def for_model(self, max_context: int) -> "ContinuousParams":
        """These parameters with the step budget resolved for a model whose context window is
        ``max_context`` tokens (an explicit budget stays)."""
        if self.max_num_batched_tokens is not None:
            return self
        return replace(self, max_num_batched_tokens=max(int(max_context), DEFAULT_MIN_BUDGET))


class ContinuousPolicy(IterationPolicy):
    """Iteration-level scheduling without chunking: a prompt is prefilled in one step."""

    kind = "continuous"
    Params = ContinuousParams
    knobs = {"slo": "max_num_seqs"}  # the SLO controller caps the running batch
    # steady_run (IterationPolicy's) asks head_admission, which admit_prefills uses too
    fast_path = True

    def __init__(self, params, kv, note=lambda m: None):
        # A policy built outside a scenario (no model named) takes its KV cache's window.
        super().__init__(params.for_model(kv.max_tokens or DEFAULT_MIN_BUDGET), kv, note)

    def max_request_tokens(self) -> int | None:
        # A whole prompt (plus generated tokens, after a recompute) must fit in one
        # step's budget; vLLM enforces this as max_model_len <= max_num_batched_tokens.
        return self.params.max_num_batched_tokens

    def schedule(self, now: float) -> StepPlan | None:
        self.preempt_for_priority(now)
        if self.params.mix_prefill_decode:
            # Under FCFS this leaves exactly these running (victims are the newest); under
            # priority order a request that preempted itself may leave later ones unplanned.
            decodes = self.grow_decodes()
            prefills = self.admit_prefills(self.prefill_room(), now)
        else:
            prefills = self.admit_prefills(self.prefill_room(), now)
            decodes = [] if prefills else self.grow_decodes()
        return self.plan(decodes, prefills)

    def plan(self, decodes: list[Sequence], prefills: list[Sequence]) -> StepPlan | None:
        """The step that decodes ``decodes`` (one token each) and prefills the rest of each of
        ``prefills``' prompts; None when both are empty."""
        if not prefills and not decodes:
            return None
        slots = decodes + prefills
        pads = None
        if self.params.max_paddings is not None and len(prefills) > 1:  # padded to the longest
            longest = max(s.num_remaining for s in prefills)
            pads = [0] * len(decodes) + [longest - s.num_remaining for s in prefills]
        return StepPlan(
            request_ids=[s.id for s in slots],
            num_new_tokens=([1] * len(decodes) if not self.spec_tokens else list(map(self.decode_tokens, decodes)))
            + [s.num_remaining for s in prefills],
            num_context_tokens=[s.num_computed for s in slots],
            num_pad_tokens=pads,
            num_decode_slots=len(decodes),
            num_streams=self.params.streams,
        )

    def joins_batch(self, admitted: list[int], n: int) -> bool:
        # vLLM v0.2.3 Scheduler._schedule: len(seq_lens) * max(seq_lens) within
        # max_num_batched_tokens, and that minus sum(seq_lens) within max_paddings.
        p = self.params
        if p.max_paddings is None:
            return True
        padded = (len(admitted) + 1) * max(n, max(admitted))
        return padded <= p.max_num_batched_tokens and padded - sum(admitted) - n <= p.max_paddings

    def all_decoding(self) -> bool:
        # A prompt (or a recompute) is prefilled whole in the step that admits it,
        # so between steps every running request is decoding.
        return True

    def next_plan_reads_running(self) -> bool:
        # Prefill-first: when the head can be admitted the step is its prompt
        # alone (admit_prefills uses the same seats, budget and KV checks). Under
        # other orders than FCFS the head is known only once schedule() sorts.
        return (self.params.mix_prefill_decode or not self.waiting or not self.order.is_fcfs
                or self.head_blocked())

    def prefill_room(self) -> int:
        # With mixing the decodes take their tokens of the budget first; prefill-first
        # admits before any decode is planned.
        budget = self.params.max_num_batched_tokens
        return budget - self.decode_need() if self.params.mix_prefill_decode else budget

    def admission_tokens(self, seq: Sequence, hit: int, budget: int) -> int:
        # The whole prompt (what the prefix cache does not hold), or nothing.
        remaining = seq.num_tokens - hit
        return remaining if remaining <= budget else 0

    def grow_decodes(self) -> list[Sequence]:
        """Every running request, oldest first, with a block for its next token.

        When blocks run short, :meth:`may_grow` preempts the newest runner (under
        ``queue_order: priority``, the newest of the least important class). A
        victim not yet reached is skipped; one already planned leaves the plan, as
        in vLLM v1's ``Scheduler.schedule`` ("if preempted_req in
        scheduled_running_reqs"); when the request itself is the victim, no later
        one is planned this step (vLLM breaks there too).
        """
        scheduled = []
        block_size = self.kv.block_size
        spec = self.spec_tokens
        n = 1
        for seq in list(self.running):
            if seq.status != RUNNING:
                continue  # preempted a moment ago
            if spec:  # its drafts need KV slots too (vLLM's lookahead slots)
                n = self.decode_tokens(seq)
            # Hot path: most decodes still have room in their last block.
            if seq.num_computed + n <= seq.num_blocks * block_size:
                scheduled.append(seq)
                continue
            before = self.num_preempted
            if not self.may_grow(seq, n):
                break
            if self.num_preempted != before:
                scheduled = [s for s in scheduled if s.status == RUNNING]
            scheduled.append(seq)
        return scheduled

    def admit_prefills(self, budget: int, now: float | None = None) -> list[Sequence]:
        """Admit whole prompts (after their cached prefix) from the queue head, in queue
        order, while seats, budget and KV (above the watermark) last."""
        return [seq for seq, _ in self.admit_queue(budget, now)]
