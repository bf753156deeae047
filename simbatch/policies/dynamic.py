"""Dynamic batching with the rules of Triton Inference Server's dynamic batcher.

Triton's user guide (docs/user_guide/batcher.md, "Dynamic Batcher": "Preferred
Batch Sizes" and "Delayed Batching"). When the model is free the batcher looks
at its queue, in arrival order:
1. if a preferred size can be formed: send a batch of the largest such size at
   once (no preferred sizes configured: ``max_batch_size`` is the one), even
   when more are queued (preferred ``[4]``, max 8, 10 queued: 4 go);
2. else, or once the oldest request has waited ``max_queue_delay_us`` (Triton's
   default: 0, no delay), even when a preferred size could be formed: send as many
   as are queued, up to ``max_batch_size``;
3. else wait (for an arrival or the oldest request's delay to expire).
Each batch runs to completion, padded to its own longest prompt and output.
``bucket_by_length`` (not a Triton feature) fills the batch with the requests
whose prompt lengths are closest to the oldest one's, to cut padding; the oldest
is always served, so nothing starves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice

from simbatch.core.params import require
from simbatch.core.sequence import Sequence
from simbatch.policies.padded_batch import BatchPolicy


@dataclass(frozen=True)
class DynamicParams:
    """Triton's ``dynamic_batching`` knobs (names kept) plus optional length bucketing."""

    max_batch_size: int = 32
    preferred_batch_sizes: list[int] = field(default_factory=list)
    max_queue_delay_us: float = 0.0  # Triton's default: never delay
    bucket_by_length: bool = False

    def __post_init__(self):
        require(self.max_batch_size >= 1, "max_batch_size", "must be >= 1")
        require(self.max_queue_delay_us >= 0, "max_queue_delay_us", "must be >= 0")
        for p in self.preferred_batch_sizes:
            require(1 <= p <= self.max_batch_size, "preferred_batch_sizes",
                    f"{p} is outside 1..max_batch_size ({self.max_batch_size})")


class DynamicPolicy(BatchPolicy):
    """Triton's dynamic batcher over a run-to-completion padded model."""

    kind = "dynamic"
    knobs = {"adaptive_delay": "max_queue_delay_us"}  # the queue delay follows the load
    # select() only forms batches; a started batch decodes on (BatchPolicy.steady_run)
    fast_path = True
    Params = DynamicParams

    def batch_size_now(self, now: float) -> int:
        """How many requests to send now under Triton's rules (0: wait; sets the timer)."""
        p = self.params
        queued = len(self.waiting)
        if queued == 0:
            return 0
        deadline = self.waiting[0].arrival_s + p.max_queue_delay_us * 1e-6
        # Triton core, dynamic_batch_scheduler.cc GetDynamicBatch: a preferred size goes
        # only while a (non-zero) delay has not expired; past it, whatever is pending goes.
        expired = p.max_queue_delay_us > 0 and now >= deadline
        formable = [s for s in p.preferred_batch_sizes or (p.max_batch_size,) if s <= queued]
        if formable and not expired:
            return max(formable)
        if now >= deadline:
            return min(queued, p.max_batch_size)
        self.timer = deadline
        return 0

    def select(self, now: float) -> list[Sequence]:
        k = self.batch_size_now(now)
        if k == 0:
            return []
        if not self.params.bucket_by_length:
            return list(islice(self.waiting, k))
        oldest = self.waiting[0]
        others = sorted(islice(self.waiting, 1, None),
                        key=lambda s: (abs(s.prompt_tokens - oldest.prompt_tokens), s.arrival_s))
        return [oldest] + others[: k - 1]
