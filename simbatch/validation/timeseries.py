"""The engine's state over time, measured beside predicted: running, waiting and KV use per second.

vLLM's stat logger prints, about once a second, how many requests run, how
many wait and how full the KV cache is; LLMServingSim's bench writes those as
``timeseries.csv`` beside its ``requests.jsonl``
(:func:`simbatch.measured.readers_bench.read_timeseries`). The simulation's
step log holds the same state at every step (``num_seqs``, ``num_waiting``,
``kv_used_blocks``), so the predicted series samples it at the same seconds:
at each ``t`` the last step that started at or before ``t`` (nothing before
the first step). Both clocks are taken to start at the first request: the
bench's ``t`` counts seconds from its start, which the log does not relate to
the requests' clock more closely (a note in the plot says so).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

SERIES = (("running", "running requests"), ("waiting", "waiting requests"), ("kv_cache_pct", "KV cache use (%)"))


def predicted_series(steps: pd.DataFrame, capacity_blocks: int, times: np.ndarray) -> pd.DataFrame:
    """``t, running, waiting, kv_cache_pct`` of a one-replica run's steps at ``times`` (seconds)."""
    start = steps["start_s"].to_numpy(dtype=float)
    order = np.argsort(start, kind="stable")
    start = start[order]
    at = np.searchsorted(start, times, side="right") - 1  # the last step started by t

    def pick(col: str) -> np.ndarray:
        values = steps[col].to_numpy(dtype=float)[order]
        return np.where(at >= 0, values[np.maximum(at, 0)], 0.0)
    kv = 100.0 * pick("kv_used_blocks") / max(capacity_blocks, 1)
    return pd.DataFrame({"t": times, "running": pick("num_seqs"), "waiting": pick("num_waiting"),
                         "kv_cache_pct": kv})


def plot_timeseries(measured: pd.DataFrame, predicted: pd.DataFrame, title: str, path: Path) -> Path:
    """Three panels on one time axis: measured solid, predicted dashed."""
    import matplotlib

    matplotlib.use("Agg")  # file-only: the command runs on machines without a display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(SERIES), 1, figsize=(8, 7), sharex=True, squeeze=False)
    for ax, (col, label) in zip(axes[:, 0], SERIES):
        ax.plot(measured["t"], measured[col], "-", color="C0", linewidth=1.2, label="measured")
        ax.plot(predicted["t"], predicted[col], "--", color="C1", linewidth=1.2, label="predicted")
        ax.set_ylabel(label)
        ax.grid(linewidth=0.4, alpha=0.5)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("seconds (both clocks from the first request)")
    fig.suptitle(f"{title}: engine state over time", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def log_timeseries(v) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """(measured, predicted) series of one :class:`~simbatch.validation.against.LogValidation`
    whose log has a ``timeseries.csv`` beside it and a one-replica prediction; else None."""
    from simbatch.measured.readers_bench import bench_companions, read_timeseries

    found = bench_companions(v.measured.source).get("timeseries")
    steps = v.predicted.steps
    if found is None or steps is None or len(steps) == 0 or steps["replica"].nunique() != 1:
        return None
    measured = read_timeseries(found)
    capacity = v.predicted.result.log.kv_capacity_blocks[0]
    return measured, predicted_series(steps, capacity, measured["t"].to_numpy(dtype=float))
