"""Drawing helpers every report figure shares: line styles per policy, new figures, PNG bytes,
log axes and readable ticks (below :mod:`simbatch.report.figures` and its figure modules)."""

from __future__ import annotations

import io
import math

from simbatch.policies.registry import POLICY_ORDER
from simbatch.report.palette import policy_colour

LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
DPI = 100


def policy_style(name: str, index: int = 0) -> dict:
    """Matplotlib line keywords for a policy: its colour (:mod:`simbatch.report.palette`), and a
    line style and marker of its own (known kinds keep their place, others follow)."""
    i = POLICY_ORDER.index(name) if name in POLICY_ORDER else len(POLICY_ORDER) + index
    return {"color": policy_colour(name, index), "linestyle": LINE_STYLES[i % len(LINE_STYLES)],
            "marker": MARKERS[i % len(MARKERS)], "label": name}


def new_figure(nrows: int, ncols: int, size: tuple[float, float], **kwargs):
    """A headless (Agg) figure and its axes array (always 2-D)."""
    import matplotlib

    matplotlib.use("Agg")  # never needs a display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False, **kwargs)
    return fig, axes


def to_png(fig) -> bytes:
    """Render ``fig`` to PNG bytes and free it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


def log_if_wide(ax, values, axis: str = "y", ratio: float = 100.0) -> bool:
    """Use a log axis when positive ``values`` span more than ``ratio``; returns whether it did."""
    pos = [float(v) for v in values if v is not None and not math.isnan(v) and v > 0]
    wide = bool(pos) and max(pos) / min(pos) > ratio
    if wide:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        plain_ticks(ax, axis, minor_labels=max(pos) / min(pos) < 30)
    return wide


def tick_label(v: float) -> str:
    """A short axis label: 200, 1,000, 20k, 3M."""
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:,g}"


def plain_ticks(ax, axis: str = "y", minor_labels: bool = True) -> None:
    """Label a log axis 200, 1,000, 20k rather than 2x10^2, 10^3.

    ``minor_labels``: also label the 2x and 5x ticks, for narrow ranges that may
    hold no power of ten (wide ranges would crowd them).
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    which = ax.yaxis if axis == "y" else ax.xaxis
    fmt = FuncFormatter(lambda v, _: tick_label(v))
    which.set_major_formatter(fmt)
    if minor_labels:
        which.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    which.set_minor_formatter(fmt if minor_labels else NullFormatter())


def legend_on_top(fig, axes) -> None:
    """One legend for the figure, in a row above the panels (never over a line)."""
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=max(len(labels), 1), fontsize=9, frameon=False)


# The paragraph each section opens with.
