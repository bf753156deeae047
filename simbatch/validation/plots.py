"""Validation figures: predicted vs measured step times, and measured vs predicted latency CDFs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simbatch.report.figures_latency import ecdf
from simbatch.report.palette import policy_colour

KIND_STYLE = {"decode_only": ("tab:blue", "o"), "prefill_heavy": ("tab:orange", "s"), "mixed": ("tab:green", "^")}
CDFS = (("TTFT", "ttft_ms"), ("E2EL", "e2el_ms"))


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_step_scatter(validation, path: Path) -> Path:
    """One log-log panel per policy: each step's predicted against measured seconds, y = x dashed."""
    plt = _pyplot()
    kinds = list(validation.policies)
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.2 * len(kinds), 4.0), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        pairs = validation.policies[kind].pairs
        lo, hi = np.inf, 0.0
        for step_kind, (color, marker) in KIND_STYLE.items():
            rows = pairs[pairs["kind"] == step_kind]
            if rows.empty:
                continue
            m, p = rows["measured_s"].to_numpy() * 1e3, rows["predicted_s"].to_numpy() * 1e3
            lo, hi = min(lo, m.min(), p.min()), max(hi, m.max(), p.max())
            ax.scatter(m, p, s=8, alpha=0.5, color=color, marker=marker, label=step_kind.replace("_", " "))
        if hi > 0:
            ax.plot([lo, hi], [lo, hi], "k--", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel("measured step (ms)")
        ax.set_ylabel("predicted step (ms)")
        ax.set_title(kind, fontsize=10)
        ax.grid(linewidth=0.4, alpha=0.5)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_latency_cdfs(validation, path: Path) -> Path:
    """TTFT and E2EL CDFs per policy: measured solid, predicted dashed, same colour."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(CDFS), figsize=(5.2 * len(CDFS), 4.0), squeeze=False)
    for ax, (name, key) in zip(axes[0], CDFS):
        for i, (kind, v) in enumerate(validation.policies.items()):
            color = policy_colour(kind, i)  # the colours every other figure gives the policies
            for out, style, label in ((v.measured, "-", "measured"), (v.predicted, "--", "predicted")):
                req = out.requests
                x, y = ecdf(req.loc[req["completed"].astype(bool), key])
                if len(x):
                    ax.plot(x, y, style, color=color, drawstyle="steps-post", linewidth=1.3,
                            label=f"{kind} {label}")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of completed requests")
        ax.set_ylim(0, 1.02)
        ax.grid(linewidth=0.4, alpha=0.5)
        ax.set_title(f"{name} CDF: measured (solid) vs predicted (dashed)", fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
