"""Per-replica metrics: the cluster view split by replica (``summary.json``'s ``replicas``).

Each replica's throughputs use the whole run's duration, so they sum to the
cluster's; its latencies are over the completed requests it served (as in
:func:`~simbatch.metrics.summary.summarize`), its busy fraction and MFU/MBU
over its own steps. See docs/metrics.md.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simbatch.metrics.summary import _num, _ratio


def _percentile(values: np.ndarray, q: float) -> float | None:
    """Linear percentile of the non-NaN ``values`` (None when there are none)."""
    v = values[~np.isnan(values)]
    return _num(np.percentile(v, q)) if v.size else None


def _per_gpu(value, r: int) -> float:
    """A GPU figure given once for all replicas, or as a list per replica."""
    return float(value[r]) if isinstance(value, (list, tuple, np.ndarray)) else float(value)


def replica_row(req: pd.DataFrame, steps: pd.DataFrame, duration: float, kv_blocks: int,
                peak_flops: float, peak_bandwidth: float) -> dict:
    """Metrics of one replica from its rows of the request and step tables."""
    done = req["completed"].to_numpy()
    busy = float(steps["duration_s"].sum())
    kept = req[done]
    kv_peak = float(steps["kv_used_blocks"].max()) if len(steps) else 0.0
    return {
        "requests": int(len(req)),
        "completed": int(done.sum()),
        "request_throughput": _ratio(done.sum(), duration),
        "output_throughput": _ratio(float(kept["num_output_tokens"].sum()), duration),
        "ttft_p50_ms": _percentile(kept["ttft_ms"].to_numpy(), 50),
        "ttft_p99_ms": _percentile(kept["ttft_ms"].to_numpy(), 99),
        "tpot_p50_ms": _percentile(kept["tpot_ms"].to_numpy(), 50),
        "tpot_p99_ms": _percentile(kept["tpot_ms"].to_numpy(), 99),
        "busy_frac": _ratio(busy, duration),
        "mfu": _ratio(float(steps["useful_flops"].sum()), busy * peak_flops),
        "mbu": _ratio(float(steps["useful_bytes"].sum()), busy * peak_bandwidth),
        "kv_peak_frac": _ratio(kv_peak, kv_blocks),
        "preemptions": int(req["preemptions"].sum()),
    }


def replica_summaries(requests: pd.DataFrame, steps: pd.DataFrame, duration: float | None,
                      info: list[dict], peak_flops, peak_bandwidth) -> list[dict]:
    """One dict per replica: ``info[r]`` (what it is: index, hardware, policy, ``kv_blocks``...)
    then its metrics.

    ``requests`` and ``steps`` are :func:`request_table` and :func:`steps_table`
    of the run, ``duration`` the summary's ``duration_s``; ``peak_flops`` and
    ``peak_bandwidth`` are per GPU, one number or a list per replica.
    """
    duration = duration or 0.0
    by_replica_req = dict(requests.groupby("replica").indices)
    if "decode_replica" in requests:  # disaggregated: a decode replica's requests are those it decoded
        decoded = requests.groupby("decode_replica").indices
        by_replica_req.update({r: rows for r, rows in decoded.items() if r >= 0})
    by_replica_steps = steps.groupby("replica").indices
    empty = np.zeros(0, dtype=np.int64)
    out = []
    for r, what in enumerate(info):
        req = requests.iloc[by_replica_req.get(r, empty)]
        st = steps.iloc[by_replica_steps.get(r, empty)]
        row = replica_row(req, st, duration, what.get("kv_blocks") or 0,
                          _per_gpu(peak_flops, r), _per_gpu(peak_bandwidth, r))
        out.append({**what, **row})
    return out
