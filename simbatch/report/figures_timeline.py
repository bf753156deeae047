"""The step timeline: a Gantt chart of which request held which batch slot.

The event log does not record slots, so they are reconstructed: each request
holds one slot from its first scheduled step until it leaves the batch, and
requests get slots greedily in start order, lowest free slot first (interval
partitioning, which uses as few slots as the peak concurrency). Under padded
run-to-completion policies (static, dynamic) a request leaves the batch only
when its batch ends, so its slot shows padding from its finish to then.
"""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd

from simbatch.policies import kind_is
from simbatch.policies.padded_batch import BatchPolicy
from simbatch.report.figures_common import new_figure
from simbatch.report.load import RunData

WINDOW_STEPS = 150  # steps of replica 0 drawn...
WHOLE_RUN_STEPS = 400  # ...unless the whole run is this short
MAX_ROWS = 48
PHASES = {  # colour and hatch per phase: apart in colour, in grayscale and by texture
    "prefill": ("#D55E00", "////"),
    "decode": ("#56B4E9", ""),
    "padding": ("#BBBBBB", "xx"),
}


def batch_spans(steps: pd.DataFrame) -> pd.DataFrame:
    """Start and end of each padded batch on one replica's steps.

    A batch starts with a prefill-only step (its prompts) and runs until the
    step before the next batch's prefill, or the last step.
    """
    steps = steps.sort_values("start_s", kind="stable").reset_index(drop=True)
    first = np.flatnonzero((steps["prefill_tokens"] > 0).to_numpy() & (steps["decode_tokens"] == 0).to_numpy())
    if len(first) == 0 or first[0] != 0:
        first = np.concatenate(([0], first[first != 0]))
    last = np.concatenate((first[1:] - 1, [len(steps) - 1]))
    return pd.DataFrame({"start_s": steps["start_s"].to_numpy()[first], "end_s": steps["end_s"].to_numpy()[last]})


def assign_slots(requests: pd.DataFrame, steps: pd.DataFrame, padded: bool) -> pd.DataFrame:
    """Slot rows for one replica's requests: ``id, slot, start, first_token, finish, busy_until``.

    ``busy_until`` is when the slot frees: the finish, or (``padded``) the end
    of the request's batch; a request still running at the end holds its slot
    to the last step.
    """
    reqs = requests[requests["first_scheduled_s"].notna()].sort_values(["first_scheduled_s", "id"], kind="stable")
    last_end = float(steps["end_s"].max()) if len(steps) else 0.0
    start = reqs["first_scheduled_s"].to_numpy(float)
    finish = reqs["finish_s"].fillna(last_end).to_numpy(float)
    busy = finish.copy()
    if padded and len(steps):
        spans = batch_spans(steps)
        k = np.clip(np.searchsorted(spans["start_s"].to_numpy(), start, side="right") - 1, 0, None)
        busy = np.maximum(finish, spans["end_s"].to_numpy()[k])
    slots = _partition(start, busy)
    return pd.DataFrame({"id": reqs["id"].to_numpy(), "slot": slots, "start": start,
                         "first_token": reqs["first_token_s"].fillna(last_end).to_numpy(float),
                         "finish": finish, "busy_until": busy})


def _partition(start: np.ndarray, end: np.ndarray) -> list[int]:
    """Greedy interval partitioning of intervals sorted by start: lowest free slot first."""
    busy: list[tuple[float, int]] = []  # (frees at, slot)
    free: list[int] = []
    slots: list[int] = []
    num_slots = 0
    for s, e in zip(start, end):
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            slot = heapq.heappop(free)
        else:
            slot, num_slots = num_slots, num_slots + 1
        heapq.heappush(busy, (e, slot))
        slots.append(slot)
    return slots


def window(run: RunData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Replica 0's steps in the drawn window and the slots of the requests that started in it."""
    all_steps = run.steps[run.steps["replica"] == 0].sort_values("start_s", kind="stable")
    steps = all_steps if len(all_steps) <= WHOLE_RUN_STEPS else all_steps.iloc[:WINDOW_STEPS]
    t1 = float(steps["end_s"].max())
    reqs = run.requests[(run.requests["replica"] == 0) & (run.requests["first_scheduled_s"] < t1)]
    return steps, assign_slots(reqs, all_steps, kind_is(run.kind, BatchPolicy))


def _draw_run(ax, run: RunData, steps: pd.DataFrame, slots: pd.DataFrame) -> None:
    """Draw one policy's timeline over ``steps``."""
    t1 = float(steps["end_s"].max())
    padded = kind_is(run.kind, BatchPolicy)  # static, dynamic or a subclass; unregistered: not padded
    rows = int(slots["slot"].max()) + 1 if len(slots) else 1
    shown = slots[slots["slot"] < MAX_ROWS]
    for phase, lo, hi in (("prefill", "start", "first_token"), ("decode", "first_token", "finish"),
                          ("padding", "finish", "busy_until")):
        colour, hatch = PHASES[phase]
        for slot, g in shown.groupby("slot"):
            a, b = g[lo].clip(upper=t1).to_numpy(), g[hi].clip(upper=t1).to_numpy()
            bars = [(x, w) for x, w in zip(a, b - a) if w > 0]
            ax.broken_barh(bars, (slot - 0.4, 0.8), facecolor=colour, edgecolor="black",
                           linewidth=0.4, hatch=hatch)
    if len(shown) <= 24:  # few requests: name them, so a reader can follow one
        for r in shown.itertuples():
            ax.text(min(r.first_token, t1), r.slot, f"r{r.id}", va="center", ha="left", fontsize=7,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    if padded:
        for t in batch_spans(steps)["start_s"]:
            ax.axvline(t, color="black", linewidth=0.7, linestyle=(0, (4, 3)))
    drawn = min(rows, MAX_ROWS)
    ax.set_ylim(drawn - 0.5, -0.5)
    ax.set_yticks(range(drawn) if drawn <= 16 else range(0, drawn, max(1, drawn // 8)))
    ax.set_ylabel("slot")
    more = f", slots 0-{MAX_ROWS - 1} of {rows}" if rows > MAX_ROWS else ""
    ax.set_title(f"{run.name}: {len(steps)} steps of replica 0{more}", fontsize=9, loc="left")


def plot_step_timeline(runs: list[RunData]):
    """One Gantt panel per policy over its first steps; prefill, decode and padding apart."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    runs = [r for r in runs if len(r.steps) and (r.steps["replica"] == 0).any()]
    if not runs:
        return None, "No engine steps were recorded, so there is no timeline."
    windows = [window(r) for r in runs]
    rows = [min(int(sl["slot"].max()) + 1 if len(sl) else 1, MAX_ROWS) for _, sl in windows]
    fig, axes = new_figure(len(runs), 1, (11, 1.2 * len(runs) + 0.15 * sum(min(r, 24) for r in rows) + 1.0),
                           sharex=True, gridspec_kw={"height_ratios": [max(r, 2) for r in rows]})
    for ax, run, (steps, slots) in zip(axes[:, 0], runs, windows):
        _draw_run(ax, run, steps, slots)
        ax.set_facecolor("#FFFFFF")
        ax.grid(axis="x", linewidth=0.4, alpha=0.5)
    axes[-1][0].set_xlabel("simulated time (s)")
    legend = [Patch(facecolor=c, edgecolor="black", hatch=h, label=p) for p, (c, h) in PHASES.items()]
    legend += [Patch(facecolor="white", edgecolor="black", label="idle slot"),
               Line2D([], [], color="black", linewidth=0.7, linestyle=(0, (4, 3)), label="batch start")]
    fig.legend(handles=legend, loc="upper center", ncol=len(legend), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    note = (f"The first {WINDOW_STEPS} steps of replica 0 (the whole run when it has at most "
            f"{WHOLE_RUN_STEPS} steps); padded batches (static, dynamic) start at the dashed lines.")
    return fig, note
