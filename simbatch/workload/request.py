"""Requests and workloads: what a trace turns into before anything is simulated."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request as the trace describes it (nothing about its fate).

    ``arrival_s`` is seconds from the start of the workload; ``hash_ids`` are
    the prompt's prefix-block hashes where the trace has them (Mooncake: one per
    512-token block); ``session_id`` and ``priority`` are optional labels.
    """

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None
    session_id: str | None = None
    priority: int = 0


@dataclass(slots=True)
class Workload:
    """A workload held column-wise (numpy arrays), sorted by arrival time.

    Columns keep a million requests cheap; :meth:`request` builds a
    :class:`Request` for one row when an object is handier. Request ids are the
    row positions ``0..n-1`` in arrival order.
    """

    arrival_s: np.ndarray  # float64, seconds from the first arrival (or the window start)
    prompt_tokens: np.ndarray  # int64, >= 1
    output_tokens: np.ndarray  # int64, >= 1
    hash_ids: list[tuple[int, ...]] | None = None
    session_id: list[str | None] | None = None
    priority: np.ndarray | None = None  # int64
    source: str = "synthetic"  # where it came from, for reports
    notes: list[str] = field(default_factory=list)  # warnings met while building it

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    def request(self, i: int) -> Request:
        """The ``i``-th request as an object."""
        return Request(
            id=i,
            arrival_s=float(self.arrival_s[i]),
            prompt_tokens=int(self.prompt_tokens[i]),
            output_tokens=int(self.output_tokens[i]),
            hash_ids=self.hash_ids[i] if self.hash_ids is not None else None,
            session_id=self.session_id[i] if self.session_id is not None else None,
            priority=int(self.priority[i]) if self.priority is not None else 0,
        )

    def requests(self) -> list[Request]:
        """Every request as an object, in arrival order."""
        return [self.request(i) for i in range(len(self))]

    @classmethod
    def from_requests(cls, requests: list[Request], source: str = "inline") -> "Workload":
        """Build a workload from request objects (sorted by arrival; ids renumbered)."""
        reqs = sorted(requests, key=lambda r: r.arrival_s)
        has_hash = any(r.hash_ids is not None for r in reqs)
        has_session = any(r.session_id is not None for r in reqs)
        return cls(
            arrival_s=np.array([r.arrival_s for r in reqs], dtype=np.float64),
            prompt_tokens=np.array([r.prompt_tokens for r in reqs], dtype=np.int64),
            output_tokens=np.array([r.output_tokens for r in reqs], dtype=np.int64),
            hash_ids=[r.hash_ids or () for r in reqs] if has_hash else None,
            session_id=[r.session_id for r in reqs] if has_session else None,
            priority=np.array([r.priority for r in reqs], dtype=np.int64),
            source=source,
        )
