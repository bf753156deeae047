"""A request's state while it is being served (vLLM's "computed tokens catch up" view).

There are no prefill and decode phases as such: a sequence has ``num_tokens``
(prompt plus tokens generated so far) and ``num_computed`` (how many of them
are in the KV cache). A step gives it some new tokens to compute; when
``num_computed`` reaches ``num_tokens`` the step also emits the next output
token. Chunked prefill, decode and recompute after preemption all fall out of
that one rule.

A sequence holds scheduling state only. When it emitted its tokens is the
event log's to record (its open token run included: :mod:`simbatch.core.eventlog`),
and while it decodes in lockstep, the clock its counters were last settled at
is its replica's decode group's (:mod:`simbatch.engine.fast.decode_group`).
"""

from __future__ import annotations

WAITING, RUNNING, FINISHED = 0, 1, 2


class Sequence:
    """Mutable serving state of one request."""

    __slots__ = (
        "id", "arrival_s", "prompt_tokens", "output_tokens", "priority",
        "num_tokens", "num_computed", "num_generated", "num_blocks",
        "num_preemptions", "status", "prefix", "num_cached_blocks", "num_prefix_hit",
    )

    def __init__(self, id: int, arrival_s: float, prompt_tokens: int, output_tokens: int,
                 priority: int = 0, prefix=None):
        self.id = id
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.priority = priority
        self.num_tokens = prompt_tokens  # grows by one per emitted token (until the last)
        self.num_computed = 0  # tokens whose KV is in the cache
        self.num_generated = 0  # output tokens emitted so far
        self.num_blocks = 0  # KV blocks held
        self.num_preemptions = 0
        self.status = WAITING
        # What identifies the prompt's content for prefix caching (simbatch.core.prefix_cache):
        # a tuple of chained hash-block ids, a session number, or None (nothing shared).
        self.prefix = prefix
        # Leading blocks of this request's table that are shared prefix-cache entries
        # (counted in num_blocks too; the rest of its blocks are private).
        self.num_cached_blocks = 0
        self.num_prefix_hit = 0  # tokens reused from the prefix cache at its first admission

    @property
    def num_remaining(self) -> int:
        """Tokens still to compute before the next token can be emitted."""
        return self.num_tokens - self.num_computed

    @property
    def is_decoding(self) -> bool:
        """True when the next step computes exactly the last generated token."""
        return self.num_generated > 0 and self.num_tokens - self.num_computed == 1

    @property
    def max_total_tokens(self) -> int:
        """Prompt plus full output: the most KV this request will ever hold."""
        return self.prompt_tokens + self.output_tokens

    def reset_for_recompute(self) -> None:
        """Preemption by recompute: drop everything computed; generated tokens are kept."""
        self.num_computed = 0
        self.num_preemptions += 1
        self.status = WAITING

    def __repr__(self) -> str:
        return (f"Sequence(id={self.id}, computed={self.num_computed}/{self.num_tokens}, "
                f"generated={self.num_generated}/{self.output_tokens})")
