"""Test kit: a hand-built event log whose metrics are worked out by hand (see test_metrics)."""

from __future__ import annotations

import numpy as np

from simbatch.core.eventlog import EventLog
from simbatch.workload.request import Workload

PEAKS = {"peak_flops": 1e15, "peak_bandwidth": 4e12}


def step(log, replica, start, dur, prefill=0, decode=0, padded=0, kv=0, flops=1e12, nbytes=2e9):
    """Record one step with the columns a test cares about."""
    return log.append_step(replica=replica, start_s=start, duration_s=dur, num_seqs=1, num_slots=1,
                           prefill_tokens=prefill, decode_tokens=decode, padded_tokens=padded,
                           kv_used_blocks=kv, num_waiting=0, stop_reason=0, useful_flops=flops, useful_bytes=nbytes)


def workload(arrival, prompt, output) -> Workload:
    return Workload(np.asarray(arrival, float), np.asarray(prompt, np.int64), np.asarray(output, np.int64))


def three_requests() -> tuple[EventLog, Workload]:
    """One replica, four 10 ms steps (idle 5 ms before the last); ends .01 .02 .03 .045.

    r0 (3 tokens) emits at steps 0,1, is preempted, emits again at step 3.
    r1 (1 token) emits at step 2. r2 emits its first token at step 3, never finishes.
    """
    log = EventLog(3, 1)
    log.kv_capacity_blocks = [100]
    step(log, 0, 0.000, 0.010, prefill=4, kv=10)
    step(log, 0, 0.010, 0.010, prefill=1, decode=1, padded=2, kv=30)
    step(log, 0, 0.020, 0.010, prefill=1, kv=20)
    step(log, 0, 0.035, 0.010, prefill=14, padded=4, kv=50)
    log.record_token_run(0, 0, 0, 1)
    log.record_token_run(1, 0, 2, 2)
    log.record_token_run(0, 0, 3, 3)
    log.record_token_run(2, 0, 3, 3)
    log.arrival_s[:] = [0.0, 0.005, 0.030]
    log.first_scheduled_s[:] = [0.0, 0.010, 0.035]
    log.first_token_s[:] = [0.010, 0.030, 0.045]
    log.finish_s[:] = [0.045, 0.030, np.nan]
    log.num_emitted[:] = [3, 1, 1]
    log.num_preemptions[:] = [1, 0, 0]
    log.replica[:] = 0
    return log, workload([0.0, 0.005, 0.030], [4, 2, 8], [3, 1, 5])


DISAGGREGATION_TIMES = ("first_token_s", "finish_s", "transfer_start_s", "transfer_end_s", "decode_start_s")


def assert_same_disaggregated_logs(fast: EventLog, slow: EventLog) -> None:
    """Two disaggregated runs' logs agree exactly: per-request times and every step column."""
    for name in DISAGGREGATION_TIMES:
        assert np.array_equal(getattr(fast, name), getattr(slow, name), equal_nan=True), name
    for column, values in fast.step_table().items():
        assert np.array_equal(values, slow.step_table()[column]), column
