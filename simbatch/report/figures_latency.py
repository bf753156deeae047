"""Latency figures: per-request CDFs and goodput against a scaled TTFT target.

Each maker returns ``(figure or None, note)``: the note says what was drawn,
or why nothing could be.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simbatch.report.figures_common import (
    legend_on_top,
    log_if_wide,
    new_figure,
    plain_ticks,
    policy_style,
)
from simbatch.report.load import RunData, meets_targets

CDF_PANELS = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("E2EL", "e2el_ms"))
MAX_CDF_POINTS = 400  # a CDF of 19k requests looks the same with 400 points and stays small
MARKERS_PER_LINE = 6
SLO_SCALES = np.geomspace(0.25, 4.0, 81)
SCALE_TICKS = (0.25, 0.5, 1.0, 2.0, 4.0)


def ecdf(values) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and the share of values at or below each, thinned to ``MAX_CDF_POINTS``."""
    x = np.sort(np.asarray(values, float)[~np.isnan(np.asarray(values, float))])
    y = np.arange(1, len(x) + 1) / max(len(x), 1)
    if len(x) > MAX_CDF_POINTS:
        keep = np.unique(np.linspace(0, len(x) - 1, MAX_CDF_POINTS).astype(int))
        x, y = x[keep], y[keep]
    return x, y


def _completed(run: RunData) -> pd.DataFrame:
    return run.requests[run.requests["completed"].astype(bool)]


def _cdf_panel(ax, runs: list[RunData], name: str, key: str) -> None:
    spread = []
    for i, run in enumerate(runs):
        x, y = ecdf(_completed(run)[key])
        if len(x) == 0:
            continue
        spread += [x[0], x[-1]]
        step = max(1, len(x) // MARKERS_PER_LINE)
        # Offset each policy's markers so they do not sit on top of each other.
        ax.plot(x, y, drawstyle="steps-post", markevery=(i * step // max(len(runs), 1), step),
                markersize=5, linewidth=1.4, **policy_style(run.name, i))
    log = log_if_wide(ax, spread, axis="x")
    ax.set_xlabel(f"{name} (ms{', log scale' if log else ''})")
    ax.set_ylabel("fraction of completed requests")
    ax.set_ylim(0, 1.02)
    ax.grid(linewidth=0.4, alpha=0.5)
    ax.set_title(f"{name} CDF", fontsize=10)


def plot_latency_cdfs(runs: list[RunData]):
    """One panel per latency (TTFT, TPOT, E2EL), one CDF line per policy."""
    if not runs or not any(len(_completed(r)) for r in runs):
        return None, "No completed requests, so there are no latencies to plot."
    fig, axes = new_figure(1, 3, (13, 4.2))
    for ax, (name, key) in zip(axes[0], CDF_PANELS):
        _cdf_panel(ax, runs, name, key)
    legend_on_top(fig, axes)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig, ""


def goodput_curve(requests: pd.DataFrame, duration_s: float, ttft_targets_ms, fixed: dict) -> np.ndarray:
    """Goodput (req/s) at each TTFT target, the other SLO targets in ``fixed`` held.

    A request counts when it completed, its TTFT is within the target, and each
    fixed target is met (a 1-token request has no TPOT and passes it, as in
    ``metrics.summarize``).
    """
    ok = meets_targets(requests, fixed)
    ttft = np.sort(requests["ttft_ms"].to_numpy(float)[ok])
    counts = np.searchsorted(ttft, np.asarray(ttft_targets_ms, float), side="right")
    return counts / duration_s if duration_s else np.full(len(counts), np.nan)


def slo_reference(runs: list[RunData], slo: dict | None) -> tuple[float | None, dict, str]:
    """(TTFT reference in ms, targets held fixed, how the reference was chosen)."""
    slo = dict(slo or {})
    ref = slo.pop("ttft_ms", None)
    if ref is not None:
        return float(ref), slo, "the scenario's TTFT SLO"
    medians = [(r.summary.get("ttft_ms") or {}).get("median") for r in runs]
    medians = [m for m in medians if m is not None and m > 0]
    if not medians:
        return None, slo, ""
    return float(min(medians)), slo, "the best policy's TTFT p50 (no TTFT SLO recorded)"


def plot_goodput_vs_slo(runs: list[RunData], slo: dict | None):
    """Goodput of each policy as the TTFT target goes from 0.25x to 4x the reference."""
    ref, fixed, how = slo_reference(runs, slo)
    if ref is None:
        return None, "No completed requests with a TTFT, so goodput cannot be scored."
    targets = SLO_SCALES * ref
    fig, axes = new_figure(1, 1, (7.5, 4.2))
    ax = axes[0][0]
    for i, run in enumerate(runs):
        y = goodput_curve(run.requests, run.summary.get("duration_s") or 0.0, targets, fixed)
        # Goodput is a step function of the target: it jumps as each request's TTFT is passed.
        ax.plot(targets, y, drawstyle="steps-post", markersize=5, linewidth=1.4,
                markevery=(2 * i % 10, 10), **policy_style(run.name, i))
    ax.axvline(ref, color="black", linewidth=0.8, linestyle=(0, (1, 2)))
    ax.annotate(" reference", (ref, 1), xycoords=("data", "axes fraction"), va="top", fontsize=8)
    ax.set_xscale("log")
    plain_ticks(ax, "x")
    ax.set_xlabel("TTFT target (ms, log scale)")
    ax.set_ylabel("goodput (req/s)")
    ax.set_ylim(bottom=0)
    top = ax.secondary_xaxis("top", functions=(lambda x: x / ref, lambda s: s * ref))
    top.set_xticks(SCALE_TICKS, [f"{s:g}x" for s in SCALE_TICKS])
    top.set_xticks([], minor=True)
    top.set_xlabel("TTFT target / reference", fontsize=8)
    ax.grid(linewidth=0.4, alpha=0.5)
    ax.legend(fontsize=8)
    fig.tight_layout()
    held = ", ".join(f"{k} <= {v:g}" for k, v in fixed.items())
    note = f"Reference TTFT {ref:,.4g} ms: {how}." + (f" Held fixed: {held}." if held else "")
    return fig, note
