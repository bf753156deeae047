"""The control trajectory as a figure: the knob over time, and the signals against their targets."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def plot_control(control: pd.DataFrame, path, targets: dict[str, float] | None = None) -> Path:
    """Write ``control.png``-style figure of ``control`` (a run's trajectory) to ``path``."""
    import matplotlib.pyplot as plt

    fig = control_figure(control, targets)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def control_figure(control: pd.DataFrame, targets: dict[str, float] | None = None):
    """The trajectory figure: the knob over time, then each signal against its target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = targets or {}
    signals = [c for c in ("ttft_ms", "tpot_ms", "busy") if control[c].notna().any()]
    fig, axes = plt.subplots(1 + len(signals), 1, figsize=(8, 2.4 * (1 + len(signals))), sharex=True)
    axes = list(axes) if len(signals) else [axes]
    knob = control["knob"].iloc[0]
    for r, part in control.groupby("replica"):
        axes[0].step(part["time_s"], part["value"], where="post", label=f"replica {r}")
        for ax, col in zip(axes[1:], signals):
            ax.plot(part["time_s"], part[col], ".", markersize=2, label=f"replica {r}")
    axes[0].set_ylabel(knob)
    axes[0].set_title(f"Online control of {knob}")
    names = {"ttft_ms": "TTFT signal (ms)", "tpot_ms": "TPOT signal (ms)", "busy": "busy fraction"}
    for ax, col in zip(axes[1:], signals):
        ax.set_ylabel(names[col])
        if col in targets:
            ax.axhline(targets[col], color="red", linestyle="--", linewidth=1, label="target")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel("simulated time (s)")
    fig.tight_layout()
    return fig
