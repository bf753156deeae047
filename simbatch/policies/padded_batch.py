"""Run-to-completion batches with padding: what static and dynamic batching share.

A padded batch is one rectangular tensor: every row is padded to the batch's
longest prompt, and every row keeps computing until the batch's longest output
is done (a finished row becomes a padding slot). KV memory is reserved for the
whole rectangle up front (longest prompt + longest output per row), so a batch
is cut short where that reservation would not fit. Nothing joins a batch once it
has started; its memory is freed only when its last request finishes.
"""

from __future__ import annotations

from itertools import islice

from simbatch.core.plan import StepPlan
from simbatch.core.sequence import FINISHED, RUNNING, Sequence
from simbatch.core.stop import BATCH, EMPTY, KV, SEATS
from simbatch.policies.base import Policy, SteadyRun, steady


class PaddedBatch:
    """One formed batch and the plans it executes: one padded prefill, then padded decodes."""

    def __init__(self, seqs: list[Sequence]):
        self.seqs = seqs
        self.max_prompt = max(s.prompt_tokens for s in seqs)
        self.max_output = max(s.output_tokens for s in seqs)
        self.num_decodes_done = -1  # -1: prefill not run yet
        self.num_finished = 0
        self._rows: tuple[list[int], list[int], list[int]] | None = None  # ids, new, pad

    def next_plan(self) -> StepPlan:
        """The batch's next step (the engine has applied the previous one)."""
        self.num_decodes_done += 1
        n = len(self.seqs)
        if self.num_decodes_done == 0:
            return StepPlan(
                request_ids=[s.id for s in self.seqs],
                num_new_tokens=[s.prompt_tokens for s in self.seqs],
                num_context_tokens=[0] * n,
                num_pad_tokens=[self.max_prompt - s.prompt_tokens for s in self.seqs],
                num_decode_slots=0,
            )
        if self._rows is None:  # rebuilt only when a row has finished
            live = [s.status != FINISHED for s in self.seqs]
            self._rows = ([s.id if ok else -1 for s, ok in zip(self.seqs, live)],
                          [1 if ok else 0 for ok in live], [0 if ok else 1 for ok in live])
        ids, new, pad = self._rows
        # Every row attends to the padded length: longest prompt + tokens decoded so far.
        context = self.max_prompt + self.num_decodes_done - 1
        return StepPlan(request_ids=ids, num_new_tokens=new, num_context_tokens=[context] * n,
                        num_pad_tokens=pad, num_decode_slots=n)

    def decode_run(self) -> tuple[list[Sequence], list[int], range]:
        """The run of decode steps left to the batch, as :meth:`next_plan` would plan them (the
        engine's fast path prices and logs it without the plans): the live rows by tokens to go
        (fewest first), those counts, and each step's padded context."""
        live = sorted((s for s in self.seqs if s.status != FINISHED), key=lambda s: s.output_tokens - s.num_generated)
        remaining = [s.output_tokens - s.num_generated for s in live]
        start = self.max_prompt + self.num_decodes_done  # next_plan's context for the next decode step
        return live, remaining, range(start, start + (remaining[-1] if live else 0))

    def decoded(self, steps: int) -> None:
        """``steps`` of the batch's decode steps ran without :meth:`next_plan` (the fast path)."""
        self.num_decodes_done += steps

    def retire(self, num_finished: int) -> None:
        """``num_finished`` of the batch's requests emitted their last token this step."""
        if num_finished:
            self.num_finished += num_finished
            self._rows = None

    @property
    def is_done(self) -> bool:
        """Every request in the batch has emitted its last token."""
        return self.num_finished == len(self.seqs)


class BatchPolicy(Policy):
    """Base for policies that form a padded batch and run it to completion.

    Subclasses implement :meth:`select`, which picks the next batch's members
    from the waiting queue (or sets ``self.timer`` and returns an empty list).
    """

    def __init__(self, params, kv, note=lambda m: None):
        super().__init__(params, kv, note)
        self.batch: PaddedBatch | None = None
        self.timer: float | None = None

    def select(self, now: float) -> list[Sequence]:
        """Members of the next batch, oldest first; [] to wait (set ``self.timer``)."""
        raise NotImplementedError

    def schedule(self, now: float) -> StepPlan | None:
        if self.batch is None:
            self.timer = None
            members = self.select(now)
            if not members:
                return None
            fitted = self._fit_kv(members, now)
            # Why the batch took no more: memory cut it, the queue ran out, or its size was reached.
            self.stop_reason = KV if len(fitted) < len(members) else EMPTY if len(fitted) == len(self.waiting) else SEATS
            self.batch = self._start(fitted)
        else:
            self.stop_reason = BATCH  # a started batch admits no one
        return self.batch.next_plan()

    def wake_at(self) -> float | None:
        return self.timer

    def steady_run(self) -> SteadyRun | None:
        # A started batch decodes on, whatever arrives, until its rows finish; it admits no one.
        if self.batch is None or self.batch.num_decodes_done < 0:
            return None
        return steady("padded", BATCH, False)

    def on_step_done(self, plan: StepPlan, finished: list[Sequence], now: float) -> None:
        if self.batch is None:
            return
        self.batch.retire(len(finished))
        if self.batch.is_done:
            for s in self.batch.seqs:
                self.kv.free(s)
            self.batch = None

    def _fit_kv(self, members: list[Sequence], now: float) -> list[Sequence]:
        """The longest prefix of ``members`` whose padded KV reservation fits in free memory."""
        fit, max_p, max_o = 0, 0, 0
        for k, s in enumerate(members, start=1):
            max_p, max_o = max(max_p, s.prompt_tokens), max(max_o, s.output_tokens)
            if k * self.kv.blocks_for(max_p + max_o) > self.kv.num_free:
                break
            fit = k
        if fit < len(members):
            self.note(f"t={now:.3f}s: {self.kind} batch cut from {len(members)} to {fit} requests: "
                      f"padded KV reservation (longest prompt + longest output per slot) "
                      f"would exceed the {self.kv.num_free} free blocks")
        return members[:fit]

    def _start(self, members: list[Sequence]) -> PaddedBatch:
        """Take ``members`` off the queue, reserve their padded KV, and start the batch."""
        waiting, k = self.waiting, len(members)
        if all(a is b for a, b in zip(members, islice(waiting, k))):
            for _ in range(k):  # the usual case, the queue's head: O(batch), not O(queue)
                waiting.popleft()
        else:
            chosen = {s.id for s in members}
            self.waiting = type(waiting)(s for s in waiting if s.id not in chosen)
        batch = PaddedBatch(members)
        per_slot = self.kv.blocks_for(batch.max_prompt + batch.max_output)
        for s in members:
            self.kv.allocate(s, per_slot)
            s.status = RUNNING
        return batch
