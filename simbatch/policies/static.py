"""Static batching: wait for a full batch (or a time-out), run it to completion."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from simbatch.core.params import require
from simbatch.core.sequence import Sequence
from simbatch.policies.padded_batch import BatchPolicy


@dataclass(frozen=True)
class StaticParams:
    """``batch_size`` requests per batch; a partial batch leaves after ``max_wait_s``."""

    batch_size: int = 32
    max_wait_s: float = 1.0

    def __post_init__(self):
        require(self.batch_size >= 1, "batch_size", "must be >= 1")
        require(self.max_wait_s >= 0, "max_wait_s", "must be >= 0")


class StaticPolicy(BatchPolicy):
    """The oldest ``batch_size`` requests, once that many have arrived or the oldest has waited ``max_wait_s``."""

    kind = "static"
    # select() only forms batches; a started batch decodes on (BatchPolicy.steady_run)
    fast_path = True
    Params = StaticParams

    def select(self, now: float) -> list[Sequence]:
        if not self.waiting:
            return []
        p = self.params
        deadline = self.waiting[0].arrival_s + p.max_wait_s
        if len(self.waiting) >= p.batch_size or now >= deadline:
            return list(islice(self.waiting, p.batch_size))
        self.timer = deadline
        return []
