"""An autoscaled fleet's figures, from its timeline and the request table (issue 36 §3).

``replicas.csv`` is the timeline: a row ``(t_s, ready, starting, draining)`` at every change.
The summary's ``autoscale`` block gives the scale events, replica- and GPU-hours (every
replica not off is paid for: ready, starting or draining), their cost at the GPU's indicative
price (:mod:`simbatch.catalog.prices`), and per hour of arrival the requests, SLO
attainment, TTFT p99 and the mean ready replicas, which is where a slow scale-up shows.
"""

from __future__ import annotations

import math

import numpy as np

from simbatch.catalog.prices import GPU_HOUR_USD
from simbatch.metrics.columns import column
from simbatch.metrics.summary import slo_attaining

HOUR_S = 3600.0
TIMELINE_COLUMNS = ("t_s", "ready", "starting", "draining")


def replicas_table(fleet) -> dict[str, np.ndarray]:
    """The fleet's timeline as columns (``replicas.csv``)."""
    rows = np.array(fleet.changes, dtype=np.float64).reshape(-1, 4)
    table = {"t_s": rows[:, 0]}
    for i, name in enumerate(TIMELINE_COLUMNS[1:], start=1):
        table[name] = rows[:, i].astype(np.int64)
    return table


def replica_seconds(fleet, start: float, end: float, count=lambda ready, starting, draining: ready) -> float:
    """The timeline's ``count`` of replicas (by default the ready ones) integrated over
    ``[start, end)``, in replica-seconds."""
    rows = fleet.changes
    total = 0.0
    for (t, ready, starting, draining), nxt in zip(rows, [*rows[1:], (math.inf,)]):
        total += count(ready, starting, draining) * max(0.0, min(nxt[0], end) - max(t, start))
    return total


def paid(ready: int, starting: int, draining: int) -> int:
    """Replicas paid for: every one not off."""
    return ready + starting + draining


def ready_mean(fleet, start: float, end: float) -> float:
    """Mean ready replicas over ``[start, end)``."""
    return replica_seconds(fleet, start, end) / (end - start) if end > start else float(fleet.changes[-1][1])


def fleet_summary(fleet, requests, duration_s: float, gpus_per_replica: int, hardware: str, slo: dict) -> dict:
    """The ``autoscale`` block of ``summary.json`` (module docstring)."""
    p = fleet.params
    gpu_s = replica_seconds(fleet, 0.0, duration_s, paid) * gpus_per_replica
    price = GPU_HOUR_USD.get(hardware)
    out = {
        "metric": p.metric, "target": p.target if p.metric != "schedule" else None,
        "min": p.min, "max": p.max, "initial": p.initial, "provisioning_s": fleet.provisioning_s,
        "scale_ups": fleet.scale_ups, "scale_downs": fleet.scale_downs,
        "peak_ready": int(max(r[1] for r in fleet.changes)),
        "replica_hours": gpu_s / gpus_per_replica / HOUR_S, "gpu_hours": gpu_s / HOUR_S,
        "usd_per_gpu_hour": price, "cost_usd": None if price is None else price * gpu_s / HOUR_S,
        "hourly": _hourly(fleet, requests, duration_s, slo),
    }
    return out


def _hourly(fleet, requests, duration_s: float, slo: dict) -> list[dict]:
    arrival = column(requests, "arrival_s")
    ttft = column(requests, "ttft_ms")
    done = column(requests, "completed", bool)
    hours = max(1, math.ceil(duration_s / HOUR_S))
    rows = []
    for h in range(hours):
        start, end = h * HOUR_S, (h + 1) * HOUR_S
        mask = (arrival >= start) & (arrival < end)
        n = int(mask.sum())
        sub = {k: column(requests, k)[mask] for k in ("completed", *slo)} if slo else None
        served = ttft[mask & done]
        rows.append({
            "hour": h, "requests": n,
            "slo_attainment": (slo_attaining(sub, slo) / n) if slo and n else None,
            "ttft_p99_ms": float(np.percentile(served, 99)) if len(served) else None,
            "ready_mean": ready_mean(fleet, start, min(end, duration_s)) if start < duration_s else None,
        })
    return rows
