"""Side-by-side comparison of run summaries: one row per policy (or router, or layout)."""

from __future__ import annotations

import numpy as np

# (column, summary key, statistic or None for a scalar key)
COMPARISON_COLUMNS = (
    ("completed", "completed", None),
    ("duration_s", "duration_s", None),
    ("request_throughput", "request_throughput", None),
    ("output_throughput", "output_throughput", None),
    ("ttft_p50_ms", "ttft_ms", "median"),
    ("ttft_p99_ms", "ttft_ms", "p99"),
    ("tpot_p50_ms", "tpot_ms", "median"),
    ("tpot_p99_ms", "tpot_ms", "p99"),
    ("itl_p99_ms", "itl_ms", "p99"),
    ("e2el_p50_ms", "e2el_ms", "median"),
    ("e2el_p99_ms", "e2el_ms", "p99"),
    ("queue_p50_ms", "queue_ms", "median"),
    ("goodput", "goodput", None),
    ("gpus", "hardware", "gpus"),  # GPUs the run used (replicas x TP), so layouts compare per GPU
    ("slo_attainment", "slo_attainment", None),
    ("padding_waste_frac", "padding_waste_frac", None),
    ("slot_use_frac", "slot_use_frac", None),
    ("busy_frac", "busy_frac", None),
    ("waiting_frac", "waiting_frac", None),
    ("mfu", "mfu", None),
    ("mbu", "mbu", None),
    ("kv_peak_frac", "kv_peak_frac", None),
    ("preemptions", "preemptions", None),
    ("prefix_hit_frac", "prefix_cache", "token_hit_rate"),  # NaN without a prefix cache
)


def _value(summary: dict, key: str, stat: str | None) -> float:
    v = summary.get(key)
    if stat is not None:
        v = v.get(stat) if isinstance(v, dict) else None
    return np.nan if v is None else v


def comparison_table(summaries: dict[str, dict]):
    """One row per policy (in the dict's order), as a pandas DataFrame; a missing value
    (``None``) becomes NaN."""
    import pandas as pd  # here, not at import: ``simbatch run`` never needs it

    names = ["policy"] + [c for c, _, _ in COMPARISON_COLUMNS]
    rows = [
        [policy] + [_value(s, key, stat) for _, key, stat in COMPARISON_COLUMNS]
        for policy, s in summaries.items()
    ]
    table = pd.DataFrame(rows, columns=names)
    # Goodput per GPU: what a colocated cluster and a disaggregated one of equal size compare on.
    table.insert(names.index("gpus") + 1, "goodput_per_gpu", table["goodput"] / table["gpus"])
    return table
