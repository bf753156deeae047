"""The event log's recording API: steps appended as named records, token runs as joins, stays
and leaves (the engine's side of what test_metrics reads back)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import simpy

from logkit import step
from simbatch.engine.dispatcher import dispatch
from simbatch.engine.replica import Replica
from simbatch.engine.setup import flush_unfinished
from simbatch.core.eventlog import EventLog
from simbatch.core.kvcache import KVCache
from simbatch.core.params import parse_params
from simbatch.policies.continuous import ContinuousPolicy
from simbatch.core.sequence import Sequence
from simkit import RecordingBackend, workload_of


def test_steps_are_appended_with_every_column_by_name_and_nothing_else():
    for method in (EventLog.append_step, EventLog.append_steps):
        params = inspect.signature(method).parameters.values()
        named = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
        assert tuple(named) == EventLog.STEP_COLUMNS, method.__name__
    log = EventLog(1)
    with pytest.raises(TypeError):
        log.append_step(replica=0, start_s=0.0)  # a record with columns missing


def test_a_run_of_steps_is_the_same_as_its_steps_one_by_one():
    one, run = EventLog(1, 2), EventLog(1, 2)
    step(one, 1, 0.0, 0.5)  # replica 1 has a step before the run
    step(run, 1, 0.0, 0.5)
    starts, secs, waiting = [0.5, 1.0, 1.75], [0.5, 0.75, 0.25], [3, 2, 0]
    for s, d, w in zip(starts, secs, waiting):
        one.append_step(replica=1, start_s=s, duration_s=d, num_seqs=2, num_slots=4, prefill_tokens=0,
                        decode_tokens=2, padded_tokens=2, kv_used_blocks=9, num_waiting=w, stop_reason=3,
                        useful_flops=d * 10, useful_bytes=d * 20)
    first = run.append_steps(replica=1, start_s=starts, duration_s=secs, num_seqs=2, num_slots=4,
                             prefill_tokens=0, decode_tokens=2, padded_tokens=2, kv_used_blocks=9,
                             num_waiting=waiting, stop_reason=3, useful_flops=[d * 10 for d in secs],
                             useful_bytes=[d * 20 for d in secs])
    assert first == 1 and run.replica_num_steps == one.replica_num_steps == [0, 4]
    for column, values in one.step_table().items():
        assert np.array_equal(run.step_table()[column], values), column


def test_token_runs_are_recorded_from_joins_stays_and_leaves():
    log = EventLog(2)
    for i in range(6):  # steps 0..5 end at 1..6 s; step 3 runs no decodes (a prefill-only step)
        step(log, 0, float(i), 1.0, decode=0 if i in (0, 3) else 1)
    log.join(0, 0, 0)  # request 0's first token, at step 0
    assert log.run_continues(0, since=-1)  # no decode step ran since: a token now stays in the run
    log.stay(0, 2)  # it decoded at steps 1 and 2
    assert log.run_continues(0, since=2) and not log.run_continues(0, since=4)
    assert len(log.run_request) == 0  # nothing recorded while the run is open
    log.join(0, 0, 5)  # a gap (say a preemption): the open run leaves, a new one starts
    log.leave(0)
    log.leave(0)  # no open run: nothing more to record
    assert not log.run_continues(1, since=-1)  # request 1 never emitted
    runs = list(zip(log.run_request, log.run_replica, log.run_first, log.run_last))
    assert runs == [(0, 0, 0, 2), (0, 0, 5, 5)]
    assert log.token_times()[0].tolist() == [1.0, 2.0, 3.0, 6.0]
    assert log.token_times()[1].size == 0


class StopsAfterFourSteps(ContinuousPolicy):
    """Continuous batching that plans four steps, then nothing more (a run cut short)."""

    kind = "stops_after_four_steps"

    def schedule(self, now):
        self.planned = getattr(self, "planned", 0)
        plan = super().schedule(now) if self.planned < 4 else None
        self.planned += plan is not None
        return plan


def test_a_request_cut_off_mid_decode_keeps_its_open_run():
    # Prefill at step 0, decodes at steps 1-3, then nothing: the open run is recorded at the end.
    workload = workload_of([(0.0, 32, 50)])
    log, env, kv = EventLog(1, 1), simpy.Environment(), KVCache(100, 16, "paged")
    policy = StopsAfterFourSteps(parse_params(StopsAfterFourSteps.Params, {}, "policy"), kv)
    seqs: list[Sequence | None] = [None]
    replica = Replica(env, 0, policy, RecordingBackend(), log, seqs)
    env.process(dispatch(env, workload, [replica], seqs, log))
    env.run()
    assert len(log.run_request) == 0  # still open
    flush_unfinished(seqs, [replica], log)
    assert list(zip(log.run_request, log.run_first, log.run_last)) == [(0, 0, 3)]
    ends = log.step_table()["start_s"] + log.step_table()["duration_s"]
    assert log.token_times()[0].tolist() == ends.tolist()
    assert log.num_emitted[0] == 4 and np.isnan(log.finish_s[0])
