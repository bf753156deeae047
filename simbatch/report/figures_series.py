"""Figures over time (batch size, queue, KV use) and over load (a sweep's curves).

Long runs are binned, not plotted step by step: a 380k-step run becomes
``NUM_BINS`` exact time-weighted means, so the figure is as fast and as small
as a short run's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simbatch.report.figures_common import (
    legend_on_top,
    log_if_wide,
    new_figure,
    policy_style,
    tick_label,
)
from simbatch.report.load import RunData

NUM_BINS = 400
SERIES = (("num_seqs", "sequences in batch"), ("num_waiting", "requests waiting"),
          ("kv_used_blocks", "KV cache used (%)"))
LOAD_X = "workload.rate_scale"
LOAD_GROUP = "policy.kind"
NO_SWEEP = "there is no sweep.csv in this folder (`simbatch sweep` over workload.rate_scale gives load curves)."
LOAD_METRICS = (("request_throughput", "throughput (req/s)"), ("ttft_ms.p99", "TTFT p99 (ms)"),
                ("tpot_ms.p99", "TPOT p99 (ms)"), ("e2el_ms.p99", "E2EL p99 (ms)"))


def binned_means(steps: pd.DataFrame, column: str, edges: np.ndarray) -> np.ndarray:
    """Time-weighted mean of ``column`` in each bin between ``edges``, summed over replicas.

    Exact for step-wise constant values: per replica, the integral of the value
    over time is piecewise linear through the step starts and ends (flat while
    idle), so its differences at the bin edges are the per-bin areas.
    """
    total = np.zeros(len(edges) - 1)
    for _, rep in steps.groupby("replica", sort=False):
        rep = rep.sort_values("start_s", kind="stable")
        start, end = rep["start_s"].to_numpy(float), rep["end_s"].to_numpy(float)
        area = rep[column].to_numpy(float) * (end - start)
        before = np.concatenate(([0.0], np.cumsum(area)[:-1]))
        xs = np.maximum.accumulate(np.column_stack([start, end]).ravel())  # guards float jitter
        ys = np.column_stack([before, before + area]).ravel()
        integral = np.interp(edges, xs, ys, left=0.0, right=ys[-1] if len(ys) else 0.0)
        total += np.diff(integral)
    return total / np.diff(edges)


def _series_column(axes, run: RunData, index: int) -> float:
    """Draw one run's three series down a column of axes; returns its bin width (s)."""
    end = float(run.steps["end_s"].max())
    edges = np.linspace(0.0, end, min(NUM_BINS, len(run.steps)) + 1) if end > 0 else np.array([0.0, 1.0])
    mids = (edges[:-1] + edges[1:]) / 2
    hw = run.summary.get("hardware") or {}
    capacity = (hw.get("kv_blocks_per_replica") or 0) * max(int(run.steps["replica"].nunique()), 1)
    style = policy_style(run.name, index)
    for ax, (col, _) in zip(axes, SERIES):
        y = binned_means(run.steps, col, edges)
        if col == "kv_used_blocks":
            y = 100 * y / capacity if capacity else np.full_like(y, np.nan)
        ax.plot(mids, y, linewidth=1.1, markevery=max(1, len(mids) // 6), markersize=4, **style)
        ax.grid(linewidth=0.4, alpha=0.5)
    axes[0].set_title(run.name, fontsize=10)
    axes[-1].set_xlabel("simulated time (s)")
    return float(edges[1] - edges[0])


def plot_time_series(runs: list[RunData]):
    """Batch size, queue length and KV use over time: a column per policy, a row per series.

    Columns, not overlaid lines: policies can run for very different times (an
    overloaded static batcher for hours, continuous batching for minutes), and
    each needs its own time axis, which the column's three panels share (ticks on the
    bottom one only). Rows share their y axis, so they compare.
    """
    runs = [r for r in runs if len(r.steps)]
    if not runs:
        return None, "No engine steps were recorded, so there is nothing to plot over time."
    fig, axes = new_figure(len(SERIES), len(runs), (max(8.0, 3.3 * len(runs)), 7.5),
                           sharex="col", sharey="row")
    widths = [_series_column(axes[:, i], run, i) for i, run in enumerate(runs)]
    for ax, (_, label) in zip(axes[:, 0], SERIES):
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    note = (f"Each point is the time-weighted mean over a bin of {min(widths):.3g} to {max(widths):.3g} s "
            f"(at most {NUM_BINS} bins per run).")
    return fig, note


def _load_panel(ax, sweep: pd.DataFrame, metric: str, label: str, x: str, group: str | None) -> None:
    from matplotlib.ticker import FuncFormatter

    groups = sweep.groupby(group, sort=group != LOAD_GROUP) if group else [("all runs", sweep)]
    values = []
    for i, (name, g) in enumerate(groups):
        # Several runs at one x (seeds, other grid axes) are averaged into one point.
        line = g.groupby(x)[metric].mean().sort_index()
        values += list(line.to_numpy(float))
        style = policy_style(str(name) if group in (None, LOAD_GROUP) else f"{group}={name}", i)
        ax.plot(line.index.to_numpy(float), line.to_numpy(float), markersize=5, linewidth=1.4, **style)
    log = "p99" in metric and log_if_wide(ax, values)
    if not log:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_label(v)))
    ax.set_ylabel(label.replace(")", ", log scale)") if log else label)
    ax.set_xlabel("offered load (x the scenario's arrival rate)" if x == LOAD_X else x)
    ax.grid(linewidth=0.4, alpha=0.5)


def plot_load_curves(sweep: pd.DataFrame | None, x: str = LOAD_X, group: str | None = LOAD_GROUP):
    """Throughput and P99 latencies against the swept axis ``x`` (default: the offered load,
    ``workload.rate_scale``), one line per value of ``group`` (default: the policy; None: one line)."""
    if sweep is None:
        return None, NO_SWEEP
    if x not in sweep.columns:
        return None, f"sweep.csv has no {x} column to draw against."
    metrics = [(m, label) for m, label in LOAD_METRICS if m in sweep.columns]
    if not metrics:
        return None, f"sweep.csv has none of the columns {', '.join(m for m, _ in LOAD_METRICS)}."
    sweep = sweep.copy()
    for col in [x] + [m for m, _ in metrics]:
        sweep[col] = pd.to_numeric(sweep[col], errors="coerce")
    group = group if group in sweep.columns else None
    ncols = 2 if len(metrics) > 1 else 1
    nrows = (len(metrics) + 1) // 2
    fig, axes = new_figure(nrows, ncols, (5.2 * ncols, 3.6 * nrows))
    for ax, (metric, label) in zip(axes.flat, metrics):
        _load_panel(ax, sweep, metric, label, x, group)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    legend_on_top(fig, axes)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig, f"{len(sweep)} sweep runs; runs at one {x} value are averaged into one point."
