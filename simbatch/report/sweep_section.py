"""A sweep in a report: what was swept (the grid and its scenario) and one row per run.

Read from ``sweep.csv`` and, when present, the ``sweep.yaml`` written beside it.
A sweep keeps each run's metrics, not its requests and steps, so this table and
the curves over a swept axis (``figures_series.plot_load_curves``) are what a
sweep-only folder's report shows.
"""

from __future__ import annotations

import pandas as pd

from simbatch.report.figures_series import LOAD_GROUP, LOAD_X
from simbatch.report.table import view_cells

# (header with unit, sweep.csv column, kind): kind picks the formatting, as in COMPARISON_VIEW.
SWEEP_VIEW = (
    ("req/s", "request_throughput", "num"),
    ("out tok/s", "output_throughput", "num"),
    ("goodput req/s", "goodput", "num"),
    ("SLO %", "slo_attainment", "pct"),
    ("TTFT p50 ms", "ttft_ms.median", "ms"),
    ("TTFT p99 ms", "ttft_ms.p99", "ms"),
    ("TPOT p99 ms", "tpot_ms.p99", "ms"),
    ("ITL p99 ms", "itl_ms.p99", "ms"),
    ("E2EL p99 ms", "e2el_ms.p99", "ms"),
    ("pad %", "padding_waste_frac", "pct"),
    ("KV peak %", "kv_peak_frac", "pct"),
    ("preempt", "preemptions", "int"),
)
FIRST_METRIC = "num_requests"  # sweep.csv: run_id, the grid's axes, then the metrics, this one first
MAX_ROWS = 200  # a bigger sweep shows its first rows; sweep.csv has them all
MAX_LINES = 8  # an axis with more values than this is averaged over, not drawn as lines


def sweep_axes(sweep: pd.DataFrame, spec: dict | None) -> list[str]:
    """The swept fields, in grid order: sweep.yaml's grid, else the columns before the metrics."""
    if spec and spec.get("grid"):
        return [str(a) for a in spec["grid"] if str(a) in sweep.columns]
    metrics = {FIRST_METRIC, "wall_s", *(col for _, col, _ in SWEEP_VIEW)}
    columns = list(sweep.columns)
    end = next((i for i, c in enumerate(columns) if c in metrics), len(columns))
    return [c for c in columns[:end] if c != "run_id"]


def axis_value(value) -> str:
    """A grid value as written in ``--grid``: 0.5, 2, continuous."""
    if isinstance(value, float):
        return "-" if pd.isna(value) else f"{value:g}"
    return str(value)


def sweep_rows(sweep: pd.DataFrame, axes: list[str]) -> tuple[list[str], list[list[str]]]:
    """Headers and formatted rows: the axes, the metrics sweep.csv has, then the run id."""
    view = [(h, col, k) for h, col, k in SWEEP_VIEW if col in sweep.columns]
    ident = ["run_id"] if "run_id" in sweep.columns else []
    records = sweep.head(MAX_ROWS).to_dict("records")
    heads, cells = view_cells(records, view)
    rows = [[axis_value(rec[a]) for a in axes] + row + [str(rec[c]) for c in ident]
            for rec, row in zip(records, cells)]
    return axes + heads + ident, rows


def grid_rows(sweep: pd.DataFrame, axes: list[str], spec: dict | None) -> list[list[str]]:
    """(axis, its values) rows: the grid as given, else the values found in sweep.csv."""
    grid = (spec or {}).get("grid") or {}
    values = {a: grid.get(a) or list(dict.fromkeys(sweep[a].tolist())) for a in axes}
    return [[a, ", ".join(axis_value(v) for v in vals)] for a, vals in values.items()]


def spec_facts(spec: dict) -> list[list[str]]:
    """What a sweep ran, from sweep.yaml's resolved scenario (before the grid changes it)."""
    sc = spec.get("scenario") or {}
    cluster = sc.get("cluster") or {}
    policy = sc.get("policy") or {}
    workload = sc.get("workload") or {}
    return [
        ["scenario", str(sc.get("name", "-"))],
        ["seed", str(sc.get("seed", "-"))],
        ["model", str(sc.get("model", "-"))],
        ["hardware", f"{cluster.get('replicas', 1)} x {sc.get('hardware', '-')} replica(s), tensor parallel "
                     f"{cluster.get('tensor_parallel', 1)}"],
        ["policy (before the grid)", ", ".join(f"{k}={v}" for k, v in policy.items()) or "-"],
        ["cost model", ", ".join(f"{k}={v}" for k, v in (sc.get("cost_model") or {}).items()) or "default"],
        ["workload", workload_text(workload)],
        ["SLO", ", ".join(f"{k}={v}" for k, v in (sc.get("slo") or {}).items()) or "none"],
    ]


def workload_text(workload: dict) -> str:
    """A scenario's workload section in a few words: its trace, or its synthetic size and rate."""
    if workload.get("trace"):
        return f"trace {workload['trace']}"
    syn = workload.get("synthetic") or {}
    if syn:
        rate = (syn.get("arrival") or {}).get("rate")
        return (f"synthetic, {syn.get('num_requests', '?')} requests"
                + (f", {rate} req/s ({(syn.get('arrival') or {}).get('kind', 'poisson')})" if rate else ""))
    return ", ".join(f"{k}={v}" for k, v in workload.items()) or "-"


def curve_axes(sweep: pd.DataFrame, axes: list[str]) -> tuple[str | None, str | None]:
    """The axis to draw the sweep's curves over (workload.rate_scale when swept, else the first
    numeric axis with several values; None: none) and the axis whose values are the lines
    (the policy when swept, else another axis of at most ``MAX_LINES`` values; None: one line).
    Seeds are neither: runs of several seeds are averaged."""
    numeric = [a for a in axes if a != "seed" and _numeric(sweep[a]) and sweep[a].nunique() > 1]
    x = LOAD_X if LOAD_X in numeric else next(iter(numeric), None)
    others = [a for a in axes if a not in (x, "seed") and 1 < sweep[a].nunique() <= MAX_LINES]  # seeds: averaged
    group = LOAD_GROUP if LOAD_GROUP in others else next(iter(others), None)
    return x, group


def _numeric(column: pd.Series) -> bool:
    return bool(pd.to_numeric(column, errors="coerce").notna().all())
