"""``summary.json``'s ``disaggregation`` section: the handoff between the pools, and each pool.

Waits and transfer times are over completed requests that were transferred
(one-token requests finish on the prefill replica and have none), like every
latency statistic (see docs/metrics.md); bytes and transfer counts are over
every transfer that happened.
"""

from __future__ import annotations

import numpy as np

from simbatch.metrics.columns import column
from simbatch.metrics.summary import _ratio, latency_stats

WAITS = ("prefill_queue_ms", "transfer_wait_ms", "transfer_ms", "decode_queue_ms")


def pool_figures(steps, replicas: list[int], duration: float, kv_blocks: int) -> dict:
    """Busy fraction and peak KV use of the pool made of ``replicas`` (alike, ``kv_blocks`` each);
    ``steps`` is the run's step table (columns or a DataFrame)."""
    mine = np.isin(column(steps, "replica"), replicas)
    busy = float(np.nansum(column(steps, "duration_s")[mine]))
    peak = float(np.nanmax(column(steps, "kv_used_blocks")[mine])) if mine.any() else 0.0
    return {"busy_frac": _ratio(busy, duration * len(replicas)), "kv_peak_frac": _ratio(peak, kv_blocks)}


def disaggregation_summary(requests, steps, duration: float | None, setup: dict) -> dict:
    """The section: ``setup`` (the run's pools and link, ``RunResult.disaggregation``), the
    transfer count and bytes, wait statistics and per-pool figures (busy, KV peak)."""
    duration = duration or 0.0
    sent = column(requests, "decode_replica") >= 0
    done = column(requests, "completed", bool) & sent
    out = dict(setup)
    out["num_transfers"] = int(sent.sum())
    out["kv_bytes_transferred"] = float(column(requests, "kv_bytes")[sent].sum())
    for key in WAITS:
        name = "queue_ms" if key == "prefill_queue_ms" else key
        out[key] = latency_stats(column(requests, name)[done])
    first = 0
    for pool in ("prefill", "decode"):
        info = setup[pool]
        members = list(range(first, first + info["replicas"]))
        first += info["replicas"]
        out[pool] = {**info, **pool_figures(steps, members, duration, info["kv_blocks"])}
    return out
