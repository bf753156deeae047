"""The step plan: the contract between batching policies and backends.

A policy decides *what* one engine step computes; a backend (the cost model, or
a real model in a later backend) decides *how long* it takes. The plan holds
only what a real engine would need to execute the step, nothing about the
simulator.

A plan is a list of slots, column-wise. Slot ``i`` belongs to request
``request_ids[i]`` (``-1`` for a padding-only slot, e.g. a finished request's
row in a static batch), computes ``num_new_tokens[i]`` new tokens whose results
are kept, attends to ``num_context_tokens[i]`` tokens already in its KV cache,
and computes ``num_pad_tokens[i]`` extra tokens that are thrown away (padding
to the batch's longest prompt). By convention the first ``num_decode_slots``
slots are decode slots (one new or padded token each); the rest are prefill
chunks. Under speculative decoding a decode slot computes ``n > 1`` tokens: its
last token and ``n - 1`` drafts to verify (:mod:`simbatch.scenario.speculative`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StepPlan:
    """What one engine step computes (see the module docstring for the layout)."""

    request_ids: list[int]
    num_new_tokens: list[int]
    num_context_tokens: list[int]
    num_pad_tokens: list[int] | None = None  # None: no padding in this step
    num_decode_slots: int = 0
    num_streams: int = 1  # 2: decodes and prefill chunks on separate streams (see micro_batches)

    def __post_init__(self) -> None:
        n = len(self.request_ids)
        if len(self.num_new_tokens) != n or len(self.num_context_tokens) != n:
            raise ValueError("StepPlan columns differ in length")
        if self.num_pad_tokens is not None and len(self.num_pad_tokens) != n:
            raise ValueError("StepPlan num_pad_tokens differs in length")
        if not 0 <= self.num_decode_slots <= n:
            raise ValueError("StepPlan num_decode_slots out of range")
        if self.num_streams not in (1, 2):
            raise ValueError("StepPlan num_streams must be 1 or 2")

    @property
    def num_slots(self) -> int:
        """Rows in the batch, padding slots included."""
        return len(self.request_ids)

    @property
    def num_seqs(self) -> int:
        """Live requests in the batch (padding-only slots excluded)."""
        return len(self.request_ids) - self.request_ids.count(-1)

    @property
    def num_padded_tokens(self) -> int:
        """Tokens computed and discarded."""
        return sum(self.num_pad_tokens) if self.num_pad_tokens is not None else 0

    @property
    def num_decode_tokens(self) -> int:
        """Kept tokens computed in decode slots."""
        return sum(self.num_new_tokens[: self.num_decode_slots])

    @property
    def num_prefill_tokens(self) -> int:
        """Kept tokens computed in prefill slots."""
        return sum(self.num_new_tokens[self.num_decode_slots :])

    @property
    def num_batched_tokens(self) -> int:
        """Every token the step computes, padding included."""
        return sum(self.num_new_tokens) + self.num_padded_tokens

    def query_lengths(self) -> list[int]:
        """Per slot, the tokens the kernels compute (kept + padded)."""
        if self.num_pad_tokens is None:
            return list(self.num_new_tokens)
        return [n + p for n, p in zip(self.num_new_tokens, self.num_pad_tokens)]

    def micro_batches(self) -> list["StepPlan"]:
        """The step as the micro-batches issued on separate streams.

        With ``num_streams == 2`` a step that holds both decodes and prefill
        chunks is split by phase: the memory-bound decodes on one stream, the
        compute-bound chunks on the other, so each hides the other's bottleneck
        (NanoFlow's nano-batching; the seeds' "continuous scheduling"). A step of
        one phase stays whole: splitting it would only read the weights twice.
        """
        d, n = self.num_decode_slots, self.num_slots
        if self.num_streams == 1 or not 0 < d < n:
            return [self]
        return [self.slice(0, d), self.slice(d, n)]

    def slice(self, start: int, stop: int) -> "StepPlan":
        """Slots ``start:stop`` as a one-stream plan of their own."""
        pad = self.num_pad_tokens
        return StepPlan(self.request_ids[start:stop], self.num_new_tokens[start:stop],
                        self.num_context_tokens[start:stop], None if pad is None else pad[start:stop],
                        max(0, min(self.num_decode_slots, stop) - start))
