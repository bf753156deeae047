"""One measured serving run, whatever tool wrote its log.

A :class:`MeasuredRun` holds what a real server did with each request, on one
clock re-based so the first request was sent at 0.0: when the client sent it,
its prompt and output lengths, when its first token and its last token came
back, and (where the log has them) when every token came back. From those it
derives the per-request latencies with vLLM's definitions (docs/metrics.md):
TTFT = first token - arrival; E2EL = finish - arrival; TPOT = (E2EL - TTFT) /
(output tokens - 1), defined only for outputs of two tokens or more. It also
gives the workload to replay: the same arrivals and lengths.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from simbatch.errors import SimbatchError
from simbatch.workload.request import Workload


@dataclass(slots=True)
class MeasuredRun:
    """Per-request columns of one measured run, sorted by arrival (numpy arrays).

    ``first_token_s`` and ``finish_s`` are NaN for a request that failed
    (``ok`` False); ``token_times`` is one array per request of every token's
    arrival time (same clock) where the log records them, else None.
    """

    source: str  # the log's path, for reports and errors
    system: str  # what served it, as the log or its name says (e.g. "vllm", "distserve"); "" if unknown
    arrival_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64, >= 1
    output_tokens: np.ndarray  # int64, >= 1
    first_token_s: np.ndarray  # float64
    finish_s: np.ndarray  # float64
    ok: np.ndarray | None = None  # bool; None: every request succeeded
    token_times: list[np.ndarray] | None = None
    notes: list[str] = field(default_factory=list)
    # The log's own clock at the first send, before re-basing (NaN: not known). Runs logged
    # on one machine's monotonic clock (DistServe's .exp files) are ordered in time by it.
    clock_start_s: float = float("nan")

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def succeeded(self) -> np.ndarray:
        """Boolean mask of the requests that completed."""
        return np.ones(len(self), bool) if self.ok is None else self.ok

    def check_completed(self, purpose: str) -> None:
        """A one-line :class:`SimbatchError` naming the log when none of its requests completed:
        it holds no latency, so there is nothing to ``purpose`` (``fit on``, ``compare with``)."""
        if not self.succeeded.any():
            raise SimbatchError(self.source, f"no request completed (all {len(self):,} failed, as the log "
                                             f"records them): no latency to {purpose}")

    @property
    def offered_rate(self) -> float:
        """Requests per second the client sent (n - 1 gaps over the arrival span)."""
        span = float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0
        return (len(self) - 1) / span if span > 0 else float("nan")

    def workload(self) -> Workload:
        """The workload to replay: these arrivals and lengths, request ids in arrival order."""
        return Workload(arrival_s=self.arrival_s.astype(np.float64),
                        prompt_tokens=self.prompt_tokens.astype(np.int64),
                        output_tokens=self.output_tokens.astype(np.int64),
                        source=f"measured:{self.source}")

    def requests(self) -> pd.DataFrame:
        """One row per request: ``id, arrival_s, prompt_tokens, output_tokens, completed,
        ttft_ms, tpot_ms, e2el_ms`` (vLLM's definitions; NaN where undefined)."""
        ttft = (self.first_token_s - self.arrival_s) * 1e3
        e2el = (self.finish_s - self.arrival_s) * 1e3
        out = self.output_tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out > 1, (e2el - ttft) / np.maximum(out - 1, 1), np.nan)
        return pd.DataFrame({
            "id": np.arange(len(self)), "arrival_s": self.arrival_s,
            "prompt_tokens": self.prompt_tokens, "output_tokens": out,
            "completed": self.succeeded, "ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": e2el,
        })
