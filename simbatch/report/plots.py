"""Figures comparing policies (PNG, headless).

Each policy has its colour from :mod:`simbatch.report.palette` (the one the
reports and notebooks use, Okabe-Ito: distinguishable with the common
colour-vision deficiencies); policies are also named on the x axis and p99 bars are hatched,
so the figure still reads in grayscale.
"""

from __future__ import annotations

from pathlib import Path

from simbatch.report.palette import policy_colours
from simbatch.report.table import fmt_num

LATENCY_PANELS = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("E2EL", "e2el_ms"))
P99_HATCH = "///"


def _get(summary: dict, key: str, stat: str | None = None) -> float | None:
    v = summary.get(key)
    if stat is not None:
        v = v.get(stat) if isinstance(v, dict) else None
    return None if v is None else float(v)


def _bar(ax, x: float, height: float | None, width: float, color: str, hatch: str) -> None:
    """One labelled bar; a missing value is written 'n/a' instead of drawn as zero."""
    if height is None:
        ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7)
        return
    ax.bar(x, height, width, color=color, edgecolor="black", linewidth=0.6, hatch=hatch)
    ax.text(x, height, fmt_num(height), ha="center", va="bottom", fontsize=7)


def _latency_panel(ax, summaries: dict[str, dict], name: str, key: str) -> None:
    """p50 (plain) and p99 (hatched) bars side by side for each policy."""
    colours = policy_colours(summaries)
    for i, (policy, s) in enumerate(summaries.items()):
        color = colours[policy]
        _bar(ax, i - 0.2, _get(s, key, "median"), 0.4, color, "")
        _bar(ax, i + 0.2, _get(s, key, "p99"), 0.4, color, P99_HATCH)
    values = [v for s in summaries.values() for st in ("median", "p99")
              if (v := _get(s, key, st)) is not None and v > 0]
    # Policies can differ by orders of magnitude (an overloaded static batcher
    # beside continuous batching): a log axis keeps every bar readable.
    log = bool(values) and max(values) / min(values) > 100
    if log:
        ax.set_yscale("log")
    ax.set_title(f"{name} (p50 plain, p99 hatched){', log scale' if log else ''}", fontsize=9)
    ax.set_ylabel(f"{name} (ms{', log' if log else ''})")


def _throughput_panel(ax, summaries: dict[str, dict]) -> None:
    colours = policy_colours(summaries)
    for i, (policy, s) in enumerate(summaries.items()):
        _bar(ax, i, _get(s, "output_throughput"), 0.6, colours[policy], "")
    ax.set_title("Output throughput", fontsize=9)
    ax.set_ylabel("output tokens/s")


def plot_comparison(summaries: dict[str, dict], path) -> Path:
    """Save one PNG with TTFT, TPOT, E2EL (p50/p99) and output-throughput panels per policy."""
    import matplotlib

    matplotlib.use("Agg")  # headless: never needs a display
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = list(summaries)
    fig, axes = plt.subplots(2, 2, figsize=(max(7.0, 1.2 * len(names) + 4), 6.5))
    for ax, (name, key) in zip(axes.flat, LATENCY_PANELS):
        _latency_panel(ax, summaries, name, key)
    _throughput_panel(axes.flat[3], summaries)
    for ax in axes.flat:
        ax.set_xticks(range(len(names)), names, rotation=20 if len(names) > 3 else 0, fontsize=8)
        ax.set_xlabel("policy")
        ax.margins(y=0.15)
        ax.grid(axis="y", linewidth=0.4, alpha=0.5)
    legend = [Patch(facecolor="white", edgecolor="black", label="p50"),
              Patch(facecolor="white", edgecolor="black", hatch=P99_HATCH, label="p99")]
    fig.legend(handles=legend, loc="upper right", fontsize=8)
    fig.tight_layout(rect=(0, 0, 0.93, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
