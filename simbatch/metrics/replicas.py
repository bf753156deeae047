"""Per-replica metrics: the cluster view split by replica (``summary.json``'s ``replicas``).

Each replica's throughputs use the whole run's duration, so they sum to the
cluster's; its latencies are over the completed requests it served (as in
:func:`~simbatch.metrics.summary.summarize`), its busy fraction and MFU/MBU
over its own steps. See docs/metrics.md.
"""

from __future__ import annotations

import numpy as np

from simbatch.metrics.columns import RowsView, column, group_rows, num_rows
from simbatch.metrics.summary import _num, _ratio, _total


def _percentile(values: np.ndarray, q: float) -> float | None:
    """Linear percentile of the non-NaN ``values`` (None when there are none)."""
    v = values[~np.isnan(values)]
    return _num(np.percentile(v, q)) if v.size else None


def _per_gpu(value, r: int) -> float:
    """A GPU figure given once for all replicas, or as a list per replica."""
    return float(value[r]) if isinstance(value, (list, tuple, np.ndarray)) else float(value)


def replica_row(req, steps, duration: float, kv_blocks: int, peak_flops: float,
                peak_bandwidth: float) -> dict:
    """Metrics of one replica from its rows of the request and step tables (columns or DataFrames)."""
    done = column(req, "completed", bool)
    busy = _total(steps, "duration_s")
    kv_peak = float(np.nanmax(column(steps, "kv_used_blocks"))) if num_rows(steps) else 0.0

    def kept(name: str) -> np.ndarray:
        return column(req, name)[done]

    return {
        "requests": num_rows(req),
        "completed": int(done.sum()),
        "request_throughput": _ratio(done.sum(), duration),
        "output_throughput": _ratio(float(np.nansum(kept("num_output_tokens"))), duration),
        "ttft_p50_ms": _percentile(kept("ttft_ms"), 50),
        "ttft_p99_ms": _percentile(kept("ttft_ms"), 99),
        "tpot_p50_ms": _percentile(kept("tpot_ms"), 50),
        "tpot_p99_ms": _percentile(kept("tpot_ms"), 99),
        "busy_frac": _ratio(busy, duration),
        "mfu": _ratio(_total(steps, "useful_flops"), busy * peak_flops),
        "mbu": _ratio(_total(steps, "useful_bytes"), busy * peak_bandwidth),
        "kv_peak_frac": _ratio(kv_peak, kv_blocks),
        "preemptions": int(np.sum(column(req, "preemptions"))),
    }


def replica_summaries(requests, steps, duration: float | None, info: list[dict], peak_flops,
                      peak_bandwidth) -> list[dict]:
    """One dict per replica: ``info[r]`` (what it is: index, hardware, policy, ``kv_blocks``...)
    then its metrics.

    ``requests`` and ``steps`` are the run's request and step tables (the columns of
    :func:`~simbatch.metrics.requests.request_columns` and
    :func:`~simbatch.metrics.summary.step_columns`, or their DataFrames), ``duration``
    the summary's ``duration_s``; ``peak_flops`` and ``peak_bandwidth`` are per GPU,
    one number or a list per replica.
    """
    duration = duration or 0.0
    by_replica_req = group_rows(column(requests, "replica"))
    if "decode_replica" in requests:  # disaggregated: a decode replica's requests are those it decoded
        decoded = group_rows(column(requests, "decode_replica"))
        by_replica_req.update({r: rows for r, rows in decoded.items() if r >= 0})
    by_replica_steps = group_rows(column(steps, "replica"))
    empty = np.zeros(0, dtype=np.int64)
    out = []
    for r, what in enumerate(info):
        # Views: a replica's metrics read a few of its rows' columns, taken when read.
        req = RowsView(requests, by_replica_req.get(r, empty))
        st = RowsView(steps, by_replica_steps.get(r, empty))
        row = replica_row(req, st, duration, what.get("kv_blocks") or 0,
                          _per_gpu(peak_flops, r), _per_gpu(peak_bandwidth, r))
        out.append({**what, **row})
    return out
