"""Percentiles, throughput and SLO attainment of any request table, measured or simulated.

One definition for both sides of a comparison (``validate --against``) and for
the engine fit (``calibrate --from-log``): a table with ``completed``,
``arrival_s`` and the latency columns (``ttft_ms``, ``tpot_ms``, ``e2el_ms``),
as :meth:`simbatch.measured.MeasuredRun.requests` and a run's ``requests``
both are. Percentiles are :func:`~simbatch.metrics.summary.latency_stats`'
(linear, NaN dropped), attainment the summary's own rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from simbatch.metrics.summary import latency_stats, slo_attaining

# (name, request column, percentiles compared), in ``validation.json`` order.
LATENCIES = (("ttft", "ttft_ms", ("p50", "p90", "p99")),
             ("tpot", "tpot_ms", ("p50", "p90")),
             ("e2el", "e2el_ms", ("p50",)))
STAT_OF = {"p50": "median", "p90": "p90", "p99": "p99"}  # latency_stats' key for each percentile


def side_values(req: pd.DataFrame, slo: dict | None) -> dict:
    """``<name>_<pct>_ms`` for each of :data:`LATENCIES` over the completed requests, ``throughput``
    and ``attainment`` (share of all requests meeting ``slo``; None without one)."""
    done = req["completed"].to_numpy(dtype=bool)
    out = {}
    for name, col, pcts in LATENCIES:
        stats = latency_stats(req[col].to_numpy(dtype=np.float64)[done])
        out.update({f"{name}_{p}_ms": stats[STAT_OF[p]] for p in pcts})
    out["throughput"] = throughput(req)
    out["attainment"] = slo_attaining(req, slo) / len(req) if slo and len(req) else None
    return out


def throughput(req: pd.DataFrame) -> float | None:
    """Completed requests / (last finish - first arrival); None when nothing completed."""
    done = req["completed"].to_numpy(dtype=bool)
    if not done.any():
        return None
    # Both tables carry arrival_s and e2el_ms; finish = arrival + E2EL works for either.
    finish = req["arrival_s"].to_numpy()[done] + req["e2el_ms"].to_numpy()[done] / 1e3
    span = float(finish.max() - req["arrival_s"].min())
    return float(done.sum() / span) if span > 0 else None


def inflight_tokens(req: pd.DataFrame, q: float = 99.0, points: int = 2000) -> float | None:
    """The ``q``-th percentile over time of the tokens held by requests past their first token:
    each completed request holds its prompt plus the tokens generated so far (interpolated
    linearly between its first token and its finish) from first token to finish.

    The same estimate of either side of a comparison shows where the KV cache saturates: a
    log's plateau in this figure is the server's usable KV (minus what preempted requests
    hold), and a predicted one far above the measured one means the simulator gives the
    server more memory than it had. ``points`` samples of the busy span; None when nothing
    completed."""
    done = req["completed"].to_numpy(dtype=bool)
    if not done.any():
        return None
    arrival = req["arrival_s"].to_numpy(dtype=np.float64)[done]
    first = arrival + req["ttft_ms"].to_numpy(dtype=np.float64)[done] / 1e3
    finish = arrival + req["e2el_ms"].to_numpy(dtype=np.float64)[done] / 1e3
    prompt = req["prompt_tokens"].to_numpy(dtype=np.float64)[done]
    output = req["output_tokens"].to_numpy(dtype=np.float64)[done]
    times = np.linspace(first.min(), finish.max(), points, endpoint=False)  # [first, last finish)
    span = np.maximum(finish - first, 1e-12)
    held = np.empty(points)
    for lo in range(0, points, 256):  # bounded memory: 256 instants x requests at a time
        t = times[lo:lo + 256, None]
        inside = (first <= t) & (t < finish)
        grown = np.clip((t - first) / span, 0.0, 1.0) * (output - 1)
        held[lo:lo + 256] = np.where(inside, prompt + 1 + grown, 0.0).sum(axis=1)
    return float(np.percentile(held, q))
