"""A capacity search in a report: the ranked configurations, their sustainable rate and cost as
bars, and every probe run (issue 36 §6; a capacity folder's report said "no results").

Read from the ``capacity.csv`` (one row per configuration, ranked) and ``probes.csv`` (one row
per simulated run of the search) that ``simbatch capacity --out`` writes. The table and the
bars show what the terminal table shows; the probe figure shows how the search found each
boundary: the SLO's latency against the offered rate, runs that held filled, runs that failed
hollow.
"""

from __future__ import annotations

import math

import pandas as pd

from simbatch.report.figures_common import (
    MARKERS,
    log_if_wide,
    new_figure,
    policy_style,
)
from simbatch.report.table import fmt_int, fmt_ms, fmt_num, fmt_pct

# (header, capacity.csv column, format): the columns of capacity's terminal table
# (simbatch.capacity.report reads them from here) and of the report's capacity table.
CAPACITY_VIEW = (
    ("max req/s", "max_rate", fmt_num), ("req/s/GPU", "max_rate_per_gpu", fmt_num),
    ("fails at req/s", "fail_rate", fmt_num), ("$/h", "usd_per_hour", fmt_num),
    ("$/h per req/s", "usd_per_hour_per_req_s", fmt_num),
)
TARGET_VIEW = (
    ("replicas@R", "target_replicas", fmt_int), ("GPUs@R", "target_gpus", fmt_int),
    ("req/s/GPU@R", "target_rate_per_gpu", fmt_num), ("$/h@R", "target_usd_per_hour", fmt_num),
)
# (header, probes.csv column, format): what decided each probe.
PROBE_VIEW = (
    ("req/s offered", "offered_rate", fmt_num), ("req/s served", "request_throughput", fmt_num),
    ("SLO %", "slo_attainment", fmt_pct), ("TTFT p99 ms", "ttft_p99_ms", fmt_ms),
    ("TPOT p99 ms", "tpot_p99_ms", fmt_ms),
)
LATENCY_LABELS = {"ttft_p99_ms": "TTFT p99 (ms)", "tpot_p99_ms": "TPOT p99 (ms)"}
MAX_PROBES = 200  # a bigger search shows its first probes; probes.csv has them all
PROBE_KEYS = ("policy", "hardware", "model", "tp", "pp", "replicas", "split")  # a probe's configuration


def has_target(capacity: pd.DataFrame) -> bool:
    """Whether the search sized the configurations for a target rate (``--target-rate``)."""
    return "target_rate" in capacity.columns and capacity["target_rate"].notna().any()


def configuration(row: dict) -> str:
    """``continuous on a100-80gb llama-2-7b tp1 x1`` (``... of 1P+3D`` when split), as the
    terminal table names a row of capacity.csv or probes.csv."""
    model = f" {row['model']}" if _given(row.get("model")) else ""
    layout = row.get("layout") if _given(row.get("layout")) else f"tp{row.get('tp', 1)}"
    split = row.get("split")
    split = f" of {split}" if _given(split) and split != "colocated" else ""
    return f"{row['policy']} on {row['hardware']}{model} {layout} x{row['replicas']}{split}"


def _given(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and str(value) != ""


def capacity_rows(capacity: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers and formatted rows of the ranked table, with the target's columns when sized."""
    view = CAPACITY_VIEW + (TARGET_VIEW if has_target(capacity) else ())
    rows = [[f"{r['rank']}. {configuration(r)}"] + [f(_value(r.get(col))) for _, col, f in view]
            for r in capacity.to_dict("records")]
    return ["configuration"] + [h for h, _, _ in view], rows


def _value(v):
    """A CSV cell as the formatters take it (NaN and empty as None)."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def probe_rows(probes: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers and formatted rows of the probes (first :data:`MAX_PROBES`), in the order run."""
    rows = []
    for r in probes.head(MAX_PROBES).to_dict("records"):
        why = r.get("why_not")
        verdict = "holds" if r.get("holds") in (True, "True") else f"fails: {why}" if _given(why) else "fails"
        rows.append([configuration({**r, "layout": None}), fmt_num(_value(r.get("scale"))), str(r.get("seed", "-"))]
                    + [f(_value(r.get(col))) for _, col, f in PROBE_VIEW] + [verdict])
    return ["configuration", "scale", "seed"] + [h for h, _, _ in PROBE_VIEW] + ["verdict"], rows


def plot_capacity(capacity: pd.DataFrame):
    """Horizontal bars per configuration (best ranked on top): the highest rate that holds the
    SLO, and the cost per hour, at the target rate when the search sized for one (else per
    req/s served at the limit). Returns ``(figure, note)``; no figure when no row has a rate."""
    rated = capacity[capacity["max_rate"].notna()]
    if rated.empty:
        return None, "no configuration held the SLO at any rate tried."
    target = has_target(capacity)
    cost_col = "target_usd_per_hour" if target else "usd_per_hour_per_req_s"
    cost_label = (f"$/hour at {capacity['target_rate'].dropna().iloc[0]:g} req/s" if target
                  else "$/hour per req/s at the limit")
    names = [configuration(r) for r in capacity.to_dict("records")][::-1]
    fig, axes = new_figure(1, 2, (11.0, 1.2 + 0.45 * len(names)), sharey=True)
    colours = [policy_style(str(p), i)["color"] for i, p in enumerate(capacity["policy"])][::-1]
    for ax, col, label in ((axes[0, 0], "max_rate", "highest rate within the SLO (req/s)"),
                           (axes[0, 1], cost_col, cost_label)):
        values = capacity[col].astype(float).fillna(0.0).tolist()[::-1]
        ax.barh(names, values, color=colours)
        ax.set_xlabel(label)
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    missing = int(capacity[cost_col].isna().sum())
    note = (f"{missing} configuration(s) without a price or a size are drawn at 0 on the cost bars."
            if missing else None)
    return fig, note


def plot_probes(probes: pd.DataFrame, latency: str = "ttft_p99_ms"):
    """The search's probes: ``latency`` against the offered rate, one colour per configuration,
    filled where the run held the SLO, hollow where it failed. Returns ``(figure, note)``."""
    if probes.empty or latency not in probes.columns:
        return None, "probes.csv holds no runs."
    fig, axes = new_figure(1, 1, (8.0, 4.5))
    ax = axes[0, 0]
    keys = [k for k in PROBE_KEYS if k in probes.columns]
    for i, (_, group) in enumerate(probes.groupby(keys, sort=False, dropna=False)):
        first = group.iloc[0].to_dict()
        style = policy_style(str(first["policy"]), i)  # the policy's colour; a marker per configuration
        style["marker"] = MARKERS[i % len(MARKERS)]
        held = group["holds"].astype(str) == "True"
        for mask, face, suffix in ((held, style["color"], ""), (~held, "none", " (fails)")):
            part = group[mask]
            if not part.empty:
                ax.scatter(part["offered_rate"], part[latency], marker=style["marker"], facecolors=face,
                           edgecolors=style["color"], label=configuration({**first, "layout": None}) + suffix)
    log_if_wide(ax, probes[latency].tolist())
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel(LATENCY_LABELS.get(latency, latency))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig, None
