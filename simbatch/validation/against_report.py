"""Outputs of validation against measured logs: the terminal table and the output folder.

``OUT/`` receives, all or nothing (:func:`simbatch.report.outputs.write_files`):
``validation.json`` (``scenario``, ``cost_model`` and the ``against`` list, one
entry per log, keys :data:`simbatch.validation.against.ENTRY_KEYS`),
``pairs/<log>.csv`` (each request measured beside predicted), ``cdfs/<log>.png``
(TTFT, TPOT and E2EL CDFs), with two logs or more ``vs_rate.png`` (SLO
attainment, TTFT p50/p90 and TPOT p50/p90 against the offered rate) and, for a log whose
bench wrote a per-second ``timeseries.csv``, ``timeseries/<log>.png`` and
``.csv`` (running, waiting and KV use over time, measured beside predicted).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simbatch.files.outpaths import check_out_dir
from simbatch.report.figures_latency import ecdf
from simbatch.report.outputs import json_safe, write_files
from simbatch.report.table import render

CDFS = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("E2EL", "e2el_ms"))
# (header, metric) of the measured/predicted columns, in ms; then (header, error key) of the errors.
VALUE_COLUMNS = (("TTFT p50", "ttft_p50_ms"), ("TTFT p90", "ttft_p90_ms"),
                 ("TPOT p50", "tpot_p50_ms"), ("TPOT p90", "tpot_p90_ms"))
ERROR_COLUMNS = (("TTFT p50 %", "ttft_p50_err"), ("p90 %", "ttft_p90_err"), ("p99 %", "ttft_p99_err"),
                 ("TPOT p50 %", "tpot_p50_err"), ("p90 %", "tpot_p90_err"),
                 ("E2EL p50 %", "e2el_p50_err"), ("tput %", "throughput_err"))


def _ms(x) -> str:
    return "-" if x is None else f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def _pair(m, p, fmt) -> str:
    """``measured/predicted`` in one cell."""
    return f"{fmt(m)}/{fmt(p)}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}"


def _err(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}"


def _ktok(x) -> str:
    return "-" if x is None else f"{x / 1e3:.1f}"


def _rate(e) -> float | None:
    """A log's offered rate, None where it has none (a single request, or NaN)."""
    rate = e["offered_rate"]
    return None if rate is None or np.isnan(rate) else float(rate)


def by_rate(logs) -> list:
    """``logs`` (each with ``.name`` and ``.errors``) by offered rate, then name; logs without a
    rate last, by name: the order of the table's rows and of the rate plot's points."""
    def key(v):
        rate = _rate(v.errors)
        return (rate is None, 0.0 if rate is None else rate, v.name)

    return sorted(logs, key=key)


def format_against_table(result) -> str:
    """One row per log, sorted by offered rate then name (:func:`by_rate`): name, offered rate, requests, measured/predicted TTFT and TPOT p50/p90 (ms)
    and SLO attainment (%), the signed errors in percent, then the in-flight tokens' p99
    measured/predicted beside the predicted KV capacity and the most the server held while
    requests waited (the capacity the log implies; thousands of tokens), and the log's own
    step speed against the other logs' (%)."""
    headers = ["log", "req/s", "n", *(f"{h} ms m/p" for h, _ in VALUE_COLUMNS), "SLO % m/p",
               *(h for h, _ in ERROR_COLUMNS), "in-flight k m/p", "KV k", "held k", "steps vs others %"]
    rows = []
    for v in by_rate(result.logs):
        e = v.errors
        rate = _rate(e)
        rows.append([v.name, "-" if rate is None else f"{rate:.2f}", str(e["num_requests"]),
                     *(_pair(e[f"{k}_measured"], e[f"{k}_predicted"], _ms) for _, k in VALUE_COLUMNS),
                     _pair(e["attainment_measured"], e["attainment_predicted"], _pct),
                     *(_err(e[k]) for _, k in ERROR_COLUMNS),
                     _pair(e["inflight_tokens_p99_measured"], e["inflight_tokens_p99_predicted"], _ktok),
                     _ktok(e["kv_capacity_tokens"]), _ktok(e["kv_implied_tokens"]),
                     _err(e["steps_vs_other_logs"])])
    return render(headers, rows)


def write_against(out_dir: str | Path, result) -> Path:
    """Write ``validation.json``, ``pairs/``, ``cdfs/`` and (two logs or more) ``vs_rate.png``
    into ``out_dir``, all or nothing; returns ``out_dir``."""
    out_dir = check_out_dir(out_dir)
    writers = {
        "validation.json": lambda p: p.write_text(
            json.dumps(json_safe(result.as_json()), indent=2, allow_nan=False) + "\n", encoding="utf-8"),
        "pairs": lambda p: _write_pairs(result, p),
        "cdfs": lambda p: _write_cdfs(result, p),
    }
    if len(result.logs) >= 2:
        writers["vs_rate.png"] = lambda p: plot_vs_rate(result, p)
    series = timeseries_of(result)
    if series:
        writers["timeseries"] = lambda p: _write_timeseries(series, p)
    write_files(out_dir, writers)
    return out_dir


def timeseries_of(result) -> dict:
    """Each log's engine state over time, measured beside predicted, where its bench wrote a
    timeseries.csv (:mod:`simbatch.validation.timeseries`): {log name: (measured, predicted)}."""
    from simbatch.validation.timeseries import log_timeseries

    return {v.name: s for v in result.logs if (s := log_timeseries(v)) is not None}


def _write_timeseries(series: dict, folder: Path) -> None:
    from simbatch.validation.timeseries import plot_timeseries

    folder.mkdir()
    for name, (measured, predicted) in series.items():
        both = measured.merge(predicted, on="t", suffixes=("_measured", "_predicted"))
        both.to_csv(folder / f"{name}.csv", index=False)
        plot_timeseries(measured, predicted, name, folder / f"{name}.png")


def _write_pairs(result, folder: Path) -> None:
    folder.mkdir()
    for v in result.logs:
        v.pairs.to_csv(folder / f"{v.name}.csv", index=False)


def _write_cdfs(result, folder: Path) -> None:
    folder.mkdir()
    for v in result.logs:
        plot_cdfs(v, folder / f"{v.name}.png")


def _pyplot():
    # Lazily, and on the file-only backend: the command runs on machines without a display.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_cdfs(v, path: Path) -> Path:
    """One log's TTFT, TPOT and E2EL CDFs over completed requests: measured solid, predicted dashed."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(CDFS), figsize=(4.6 * len(CDFS), 3.8), squeeze=False)
    for ax, (name, col) in zip(axes[0], CDFS):
        for side, style, color in (("measured", "-", "C0"), ("predicted", "--", "C1")):
            x, y = ecdf(v.pairs[f"{col}_{side}"].to_numpy(dtype=float))
            if len(x):
                ax.plot(x, y, style, color=color, drawstyle="steps-post", linewidth=1.3, label=side)
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(linewidth=0.4, alpha=0.5)
        if ax.lines:
            ax.legend(fontsize=7, loc="lower right")
        else:  # no TPOT when every output is one token: say so, where matplotlib warned of no legend
            ax.text(0.5, 0.5, f"no {name} in this log", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(f"{v.name}: measured vs predicted", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# (y label, ((metric, legend tag), ...)) of each panel of vs_rate.png, left to right.
VS_RATE_PANELS = (("SLO attainment", (("attainment", ""),)),
                  ("TTFT (ms)", (("ttft_p50_ms", " p50"), ("ttft_p90_ms", " p90"))),
                  ("TPOT (ms)", (("tpot_p50_ms", " p50"), ("tpot_p90_ms", " p90"))))


def vs_rate_series(result) -> list:
    """The points of vs_rate.png: per panel ``(label, [(legend, rates, values), ...])``, each
    line measured then predicted, over the logs that have a rate, sorted by it (:func:`by_rate`);
    a missing value is NaN."""
    entries = [v.errors for v in by_rate(result.logs) if _rate(v.errors) is not None]
    rates = [_rate(e) for e in entries]
    panels = []
    for label, keys in VS_RATE_PANELS:
        lines = [(f"{side}{tag}", rates, [np.nan if e[f"{key}_{side}"] is None else e[f"{key}_{side}"]
                                          for e in entries])
                 for key, tag in keys for side in ("measured", "predicted")]
        panels.append((label, lines))
    return panels


def plot_vs_rate(result, path: Path) -> Path:
    """SLO attainment, TTFT p50/p90 and TPOT p50/p90 against each log's offered rate
    (:func:`vs_rate_series`): measured solid, predicted dashed, one colour per percentile."""
    plt = _pyplot()
    panels = vs_rate_series(result)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4), squeeze=False)
    for ax, (label, lines) in zip(axes[0], panels):
        for i, (legend, rates, values) in enumerate(lines):
            predicted = legend.startswith("predicted")
            ax.plot(rates, values, "--" if predicted else "-", marker="s" if predicted else "o",
                    color=f"C{i // 2}", label=legend)
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel(label)
        ax.grid(linewidth=0.4, alpha=0.5)
        ax.legend(fontsize=7)
    axes[0][0].set_ylim(0, 1.02)
    fig.suptitle(f"{result.scenario.name}: measured (solid) vs predicted (dashed)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
