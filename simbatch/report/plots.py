"""Figures comparing policies (PNG, headless).

Each policy has its colour from :mod:`simbatch.report.palette` (the one the
reports and notebooks use, Okabe-Ito: distinguishable with the common
colour-vision deficiencies); policies are also named on the x axis and p99 bars are hatched,
so the figure still reads in grayscale. Each bar carries its value, short
(:func:`bar_label`: ``2.02M``, not ``2,017,420``); where a panel's labels would
still touch, they turn upright (:func:`unclash_labels`), as do the policies' names on the
x axis where slanted they would touch.
"""

from __future__ import annotations

from pathlib import Path

from simbatch.report.palette import policy_colours
from simbatch.report.table import fmt_num

LATENCY_PANELS = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("E2EL", "e2el_ms"))
P99_HATCH = "///"
DPI = 120
MAX_WIDTH_IN = 14.0  # beyond it, more policies make the bars narrower and the labels upright
LABEL_GAP_PX = 3  # the least space between two value labels side by side


def _get(summary: dict, key: str, stat: str | None = None) -> float | None:
    v = summary.get(key)
    if stat is not None:
        v = v.get(stat) if isinstance(v, dict) else None
    return None if v is None else float(v)


def _three_digits(q: float) -> str:
    """``q`` (1 <= |q| < 1000) to three significant digits, trailing zeros kept: 2.02, 21.6, 532."""
    return f"{q:.{2 if abs(q) < 10 else 1 if abs(q) < 100 else 0}f}"


def bar_label(value: float) -> str:
    """A bar's value in at most about five characters: 372.9, 3,463, 21.6k, 2.02M; beyond
    a thousand G, the whole number of G."""
    if abs(value) < 1e4:
        return fmt_num(value)
    for divisor, suffix in ((1e3, "k"), (1e6, "M"), (1e9, "G")):
        text = _three_digits(value / divisor)
        if abs(float(text)) < 1000:
            return text + suffix
    return fmt_num(value / 1e9) + "G"


def _bar(ax, x: float, height: float | None, width: float, color: str, hatch: str) -> None:
    """One labelled bar; a missing value is written 'n/a' instead of drawn as zero."""
    if height is None:
        ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7, gid="value")
        return
    ax.bar(x, height, width, color=color, edgecolor="black", linewidth=0.6, hatch=hatch)
    ax.text(x, height, bar_label(height), ha="center", va="bottom", fontsize=7, gid="value")


def value_labels(ax) -> list:
    """The value labels :func:`_bar` wrote on ``ax``."""
    return [t for t in ax.texts if t.get_gid() == "value"]


def labels_clash(fig, ax, gap_px: float = LABEL_GAP_PX, texts=None) -> bool:
    """Whether two of ``texts`` (default: ``ax``'s value labels), as drawn, come closer than
    ``gap_px`` side by side, at whatever heights (a label wider than its bar would also cover
    its neighbour's bar)."""
    renderer = fig.canvas.get_renderer()
    drawn = value_labels(ax) if texts is None else texts
    spans = sorted((b.x0, b.x1) for b in (t.get_window_extent(renderer) for t in drawn))
    return any(right + gap_px > left for (_, right), (left, _) in zip(spans, spans[1:]))


def _policy_ticks(fig, ax, names: list[str]) -> None:
    """The policies' names under their bars: level for a few, slanted for more, upright where
    slanted they would still run into each other (twelve variants with long names)."""
    ax.set_xticks(range(len(names)), names, rotation=20 if len(names) > 3 else 0, fontsize=8)
    if len(names) > 3 and labels_clash(fig, ax, texts=ax.get_xticklabels()):
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=8)


def unclash_labels(fig, ax) -> None:
    """Turn ``ax``'s value labels upright, where side by side they would overlap, and raise
    the panel's top so the upright labels stay inside it."""
    if labels_clash(fig, ax):
        for t in value_labels(ax):
            t.set_rotation(90)
        _room_above(fig, ax)


def _room_for_names(fig, axes) -> None:
    """Make the figure taller by what upright policy names take beyond a line of text, in each
    row of panels, so the bars keep their height."""
    renderer = fig.canvas.get_renderer()
    tall = max((t.get_window_extent(renderer).height for ax in axes.flat for t in ax.get_xticklabels()
                if t.get_rotation() == 90), default=0.0) / fig.dpi
    if tall > 0.5:
        fig.set_figheight(fig.get_figheight() + axes.shape[0] * (tall - 0.5))


def _room_above(fig, ax) -> None:
    """Raise ``ax``'s upper limit (on its own scale, linear or log) until every value label,
    anchored at its bar's top, ends below the panel's top edge."""
    renderer = fig.canvas.get_renderer()
    scale = ax.yaxis.get_transform()
    lo, hi = scale.transform(ax.get_ylim())
    height_px = ax.bbox.height
    need = 1.0
    for t in value_labels(ax):
        anchor = (scale.transform([t.get_position()[1]])[0] - lo) / (hi - lo)  # of the panel's height
        label = t.get_window_extent(renderer).height / height_px
        if label < 1:
            need = max(need, 1.03 * anchor / (1 - label))
    if need > 1:
        ax.set_ylim(top=scale.inverted().transform([lo + (hi - lo) * need])[0])


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


def comparison_figure(summaries: dict[str, dict]):
    """The figure of :func:`plot_comparison`, laid out (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")  # headless: never needs a display
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = list(summaries)
    fig, axes = plt.subplots(2, 2, figsize=(min(max(7.0, 1.5 * len(names) + 4), MAX_WIDTH_IN), 6.5))
    for ax, (name, key) in zip(axes.flat, LATENCY_PANELS):
        _latency_panel(ax, summaries, name, key)
    _throughput_panel(axes.flat[3], summaries)
    fig.set_dpi(DPI)  # the saved size, so the labels are checked as they will be drawn
    for ax in axes.flat:
        _policy_ticks(fig, ax, names)
        ax.set_xlabel("policy")
        ax.margins(y=0.15)
        ax.grid(axis="y", linewidth=0.4, alpha=0.5)
    legend = [Patch(facecolor="white", edgecolor="black", label="p50"),
              Patch(facecolor="white", edgecolor="black", hatch=P99_HATCH, label="p99")]
    fig.legend(handles=legend, loc="upper right", fontsize=8)
    _room_for_names(fig, axes)
    fig.tight_layout(rect=(0, 0, 0.93, 1))
    for ax in axes.flat:
        unclash_labels(fig, ax)
    return fig


def plot_comparison(summaries: dict[str, dict], path) -> Path:
    """Save one PNG with TTFT, TPOT, E2EL (p50/p99) and output-throughput panels per policy."""
    import matplotlib.pyplot as plt

    fig = comparison_figure(summaries)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
