"""The per-step table: the event log's step columns with each step's number on its replica and end.

Its own module below both :mod:`~simbatch.metrics.requests` (token times are placed on it)
and :mod:`~simbatch.metrics.summary` (which re-exports both names).
"""

from __future__ import annotations

import numpy as np

from simbatch.core.eventlog import EventLog
from simbatch.core.stop import STOP_REASONS
from simbatch.metrics.columns import Columns, group_order, to_frame


def steps_table(log: EventLog):
    """The per-step table as a pandas DataFrame: :func:`step_columns`."""
    return to_frame(step_columns(log))


def step_columns(log: EventLog) -> Columns:
    """The per-step columns in recording order, plus ``step`` (number on its replica) and ``end_s``;
    ``stop_reason`` by name (:mod:`simbatch.core.stop`), not by the code the log keeps."""
    t = log.step_table()
    # The log's own read-only views, not copies: a million-request run logs millions of steps.
    cols = {c: np.asarray(t[c]) for c in log.STEP_COLUMNS}
    replica = np.asarray(cols["replica"], dtype=np.int64)
    cols["replica"] = replica
    # Step number on its replica = rank among that replica's steps in recording order:
    # the steps sorted by replica (stably) are numbered 0, 1, ... from each replica's start.
    order, counts = group_order(replica, log.num_replicas)
    ranks = np.arange(replica.size, dtype=np.int64)
    start = 0
    for n in counts.tolist():  # one slice per replica, in place (no repeated offsets array)
        ranks[start:start + n] -= start
        start += n
    step = np.empty(replica.size, dtype=np.int64)
    step[order] = ranks
    cols["step"] = step
    # An object column of the few names (shared strings): 8 bytes a step, as an integer is.
    cols["stop_reason"] = np.array(STOP_REASONS, dtype=object)[cols["stop_reason"]]
    cols["end_s"] = np.asarray(cols["start_s"], dtype=np.float64) + np.asarray(cols["duration_s"], dtype=np.float64)
    names = ["replica", "step", "start_s", "end_s"] + [c for c in log.STEP_COLUMNS if c not in ("replica", "start_s")]
    return {name: cols[name] for name in names}
