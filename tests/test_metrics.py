"""Metrics on hand-built event logs whose answers are worked out by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbatch.errors import SimbatchError
from simbatch.core.eventlog import EventLog
from simbatch.metrics import comparison_table, latency_stats, request_table, steps_table, summarize
from simbatch.metrics.summary import SUMMARY_KEYS, weighted_latency_stats

from logkit import PEAKS, step, three_requests, workload

approx = pytest.approx


def test_request_table_values():
    t = request_table(*three_requests())
    assert list(t.columns) == ["id", "arrival_s", "prompt_tokens", "output_tokens", "replica", "first_scheduled_s",
                               "first_token_s", "finish_s", "num_output_tokens", "completed", "ttft_ms", "tpot_ms",
                               "e2el_ms", "queue_ms", "itl_mean_ms", "preemptions"]
    assert t["id"].tolist() == [0, 1, 2]
    assert t["completed"].tolist() == [True, True, False]
    assert t["ttft_ms"].tolist() == approx([10.0, 25.0, 15.0])
    assert t["tpot_ms"].tolist() == approx([17.5, np.nan, np.nan], nan_ok=True)
    assert t["e2el_ms"].tolist() == approx([45.0, 25.0, np.nan], nan_ok=True)
    assert t["queue_ms"].tolist() == approx([0.0, 5.0, 5.0])
    assert t["itl_mean_ms"].tolist() == approx([17.5, np.nan, np.nan], nan_ok=True)
    assert t["preemptions"].tolist() == [1, 0, 0]
    assert t["num_output_tokens"].tolist() == [3, 1, 1]
    assert t["prompt_tokens"].tolist() == [4, 2, 8]


def test_summary_values_and_keys():
    s = summarize(*three_requests(), slo=None, **PEAKS)
    assert tuple(s) == SUMMARY_KEYS
    assert (s["num_requests"], s["completed"], s["preemptions"]) == (3, 2, 1)
    assert s["duration_s"] == approx(0.045)
    assert s["request_throughput"] == approx(2 / 0.045)
    assert s["output_throughput"] == approx(4 / 0.045)
    assert s["total_token_throughput"] == approx(10 / 0.045)
    assert s["goodput"] is None and s["slo_attainment"] is None
    assert s["padding_waste_frac"] == approx(6 / 27)
    assert s["busy_frac"] == approx(0.04 / 0.045)
    assert s["mfu"] == approx(4e12 / (0.04 * 1e15))
    assert s["mbu"] == approx(8e9 / (0.04 * 4e12))
    assert s["kv_peak_frac"] == approx(0.5)
    assert s["ttft_ms"] == approx({"mean": 17.5, "median": 17.5, "p90": 23.5, "p99": 24.85})
    assert s["tpot_ms"] == approx({"mean": 17.5, "median": 17.5, "p90": 17.5, "p99": 17.5})
    # ITL pools r0's gaps 10 ms (steps 0->1) and 25 ms (across its preemption).
    assert s["itl_ms"] == approx({"mean": 17.5, "median": 17.5, "p90": 23.5, "p99": 24.85})
    assert s["e2el_ms"] == approx({"mean": 35.0, "median": 35.0, "p90": 43.0, "p99": 44.8})
    assert s["queue_ms"] == approx({"mean": 2.5, "median": 2.5, "p90": 4.5, "p99": 4.95})
    json.dumps(s, allow_nan=False)  # JSON-safe as is


def test_gpus_per_replica_cancels_in_mfu():
    s1 = summarize(*three_requests(), slo=None, **PEAKS)
    s8 = summarize(*three_requests(), slo=None, gpus_per_replica=8, **PEAKS)
    assert (s8["mfu"], s8["mbu"]) == approx((s1["mfu"], s1["mbu"]))


@pytest.mark.parametrize("slo, attaining", [
    ({"ttft_ms": 20}, 1),  # r0 (10 ms) only; r1 took 25 ms
    ({"tpot_ms": 10}, 1),  # r0's TPOT 17.5 fails; r1 has one token, so no TPOT: passes
    ({"tpot_ms": 20}, 2),
    ({"e2el_ms": 30}, 1),  # r1 only
    ({"ttft_ms": 30, "tpot_ms": 20, "e2el_ms": 50}, 2),  # r2 never finished: never attains
    ({"ttft_ms": 5}, 0),
])
def test_slo_attainment_and_goodput(slo, attaining):
    s = summarize(*three_requests(), slo=slo, **PEAKS)
    assert s["slo_attainment"] == approx(attaining / 3)
    assert s["goodput"] == approx(attaining / 0.045)


def test_unknown_slo_key_is_a_user_error():
    with pytest.raises(SimbatchError, match="ttft"):
        summarize(*three_requests(), slo={"latency": 1}, **PEAKS)


def test_workload_size_mismatch_is_a_user_error():
    log, _ = three_requests()
    with pytest.raises(SimbatchError):
        request_table(log, workload([0.0], [1], [1]))


def test_empty_run_gives_nulls():
    log = EventLog(0, 1)
    s = summarize(log, workload([], [], []), slo={"ttft_ms": 1}, **PEAKS)
    assert tuple(s) == SUMMARY_KEYS
    assert s["num_requests"] == 0 and s["completed"] == 0 and s["duration_s"] == 0
    for key in ("request_throughput", "goodput", "slo_attainment", "busy_frac", "mfu", "mbu", "kv_peak_frac",
                "padding_waste_frac"):
        assert s[key] is None, key
    assert s["ttft_ms"] == {"mean": None, "median": None, "p90": None, "p99": None}
    assert '"itl_ms": {"mean": null' in json.dumps(s)
    assert steps_table(log).empty and request_table(log, workload([], [], [])).empty


def test_unfinished_requests_are_left_out_of_latencies():
    log = EventLog(2, 1)
    log.kv_capacity_blocks = [10]
    step(log, 0, 0.0, 0.01, prefill=3, kv=1)
    step(log, 0, 0.01, 0.01, decode=1, kv=1)
    log.record_token_run(0, 0, 0, 1)
    log.arrival_s[:] = [0.0, 0.0]
    log.first_scheduled_s[0], log.first_token_s[0] = 0.0, 0.01
    log.num_emitted[:] = [2, 0]
    log.replica[:] = [0, -1]
    t = request_table(log, workload([0, 0], [3, 3], [4, 4]))
    assert t["completed"].tolist() == [False, False]
    assert t["itl_mean_ms"].tolist() == approx([10.0, np.nan], nan_ok=True)  # defined from tokens so far
    assert math.isnan(t["queue_ms"][1]) and math.isnan(t["ttft_ms"][1])
    s = summarize(log, workload([0, 0], [3, 3], [4, 4]), slo={"ttft_ms": 100}, **PEAKS)
    assert s["completed"] == 0 and s["slo_attainment"] == 0 and s["request_throughput"] == 0
    assert s["duration_s"] == approx(0.02)  # no finish: the last step's end
    assert s["itl_ms"]["mean"] is None and s["ttft_ms"]["p99"] is None


def test_two_replicas_step_numbers_and_token_times():
    log = EventLog(2, 2)
    log.kv_capacity_blocks = [10, 40]
    step(log, 0, 0.00, 0.01, prefill=2, kv=5)
    step(log, 1, 0.00, 0.02, prefill=2, kv=10)
    step(log, 0, 0.01, 0.01, decode=1, kv=6)
    step(log, 1, 0.02, 0.03, decode=1, kv=12)
    log.record_token_run(0, 0, 0, 1)
    log.record_token_run(1, 1, 0, 1)
    log.arrival_s[:] = 0.0
    log.first_scheduled_s[:] = 0.0
    log.first_token_s[:] = [0.01, 0.02]
    log.finish_s[:] = [0.02, 0.05]
    log.num_emitted[:] = [2, 2]
    log.replica[:] = [0, 1]
    st_ = steps_table(log)
    assert st_["step"].tolist() == [0, 0, 1, 1]
    assert st_["end_s"].tolist() == approx([0.01, 0.02, 0.02, 0.05])
    assert list(st_.columns[:4]) == ["replica", "step", "start_s", "end_s"]
    wl = workload([0, 0], [2, 2], [2, 2])
    t = request_table(log, wl)
    assert t["replica"].tolist() == [0, 1]
    assert t["itl_mean_ms"].tolist() == approx([10.0, 30.0])
    s = summarize(log, wl, slo=None, **PEAKS)
    assert s["itl_ms"]["mean"] == approx(20.0) and s["itl_ms"]["p99"] == approx(29.8)
    assert s["kv_peak_frac"] == approx(0.6)  # 6/10 on replica 0 beats 12/40 on replica 1
    assert s["busy_frac"] == approx(0.07 / (0.05 * 2))


def test_latency_stats_drops_nan_and_matches_numpy():
    assert latency_stats([1.0, np.nan, 3.0]) == approx({"mean": 2.0, "median": 2.0, "p90": 2.8, "p99": 2.98})
    assert latency_stats([]) == {"mean": None, "median": None, "p90": None, "p99": None}


@given(st.lists(st.tuples(st.floats(0, 100), st.integers(0, 5)), min_size=1, max_size=20))
def test_weighted_stats_equal_expanded_numpy(pairs):
    values, counts = map(np.asarray, zip(*pairs))
    expanded = np.repeat(values, counts)
    got = weighted_latency_stats(values, counts)
    if expanded.size == 0:
        assert got["mean"] is None
        return
    want = [expanded.mean(), *np.percentile(expanded, [50, 90, 99])]
    assert [got[k] for k in ("mean", "median", "p90", "p99")] == approx(want, rel=1e-12, abs=1e-12)


def test_comparison_table_columns_and_missing():
    s = summarize(*three_requests(), slo=None, **PEAKS)
    t = comparison_table({"fcfs": s, "static": s})
    assert list(t.columns) == ["policy", "completed", "duration_s", "request_throughput", "output_throughput",
                               "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "itl_p99_ms",
                               "e2el_p50_ms", "e2el_p99_ms", "queue_p50_ms", "goodput", "gpus", "goodput_per_gpu",
                               "slo_attainment",
                               "padding_waste_frac", "slot_use_frac", "busy_frac", "waiting_frac", "mfu", "mbu", "kv_peak_frac", "preemptions",
                               "prefix_hit_frac"]
    assert t["policy"].tolist() == ["fcfs", "static"]
    assert t["prefix_hit_frac"].isna().all()  # no prefix cache: NaN, and the terminal view leaves it out
    from simbatch.report import format_comparison

    assert "prefix hit" not in format_comparison(t)
    assert t["ttft_p99_ms"][0] == approx(24.85) and t["e2el_p50_ms"][1] == approx(35.0)
    assert math.isnan(t["goodput"][0])


@st.composite
def random_runs(draw):
    """A random but consistent log: steps per replica in time order (some of them prefill-only,
    which pause decodes), token runs that follow the log's rule, some unfinished requests."""
    num_replicas = draw(st.integers(1, 3))
    steps = []  # (start, duration, replica, decodes)
    for r in range(num_replicas):
        t = 0.0
        for _ in range(draw(st.integers(1, 8))):
            t += draw(st.floats(0, 0.05))
            dur = draw(st.floats(0.001, 0.1))
            steps.append((t, dur, r, draw(st.booleans())))
            t += dur
    steps.sort(key=lambda s: s[0])  # interleave replicas; each keeps its own order
    n = draw(st.integers(1, 6))
    log = EventLog(n, num_replicas)
    log.kv_capacity_blocks = [100] * num_replicas
    for start, dur, r, decodes in steps:
        step(log, r, start, dur, decode=int(decodes))
    ends = [[s[0] + s[1] for s in steps if s[2] == r] for r in range(num_replicas)]
    is_decode = [[s[3] for s in steps if s[2] == r] for r in range(num_replicas)]
    for i in range(n):
        r = draw(st.integers(0, num_replicas - 1))
        emitted = []
        pos = draw(st.integers(0, len(ends[r]) - 1))
        for _ in range(draw(st.integers(1, 3))):
            # a run: its first step, then the next L decode steps of the replica
            later = [k for k in range(pos + 1, len(ends[r])) if is_decode[r][k]]
            take = later[: draw(st.integers(0, len(later)))]
            log.record_token_run(i, r, pos, take[-1] if take else pos)
            emitted += [pos, *take]
            if emitted[-1] + 1 >= len(ends[r]):
                break
            pos = draw(st.integers(emitted[-1] + 1, len(ends[r]) - 1))
        first_start = next(s[0] for s in steps if s[2] == r)
        log.arrival_s[i] = draw(st.floats(0, 1)) * first_start
        log.first_scheduled_s[i] = first_start
        log.first_token_s[i] = ends[r][emitted[0]]
        log.finish_s[i] = ends[r][emitted[-1]] if draw(st.booleans()) else np.nan
        log.num_emitted[i] = len(emitted)
        log.replica[i] = r
    return log, workload(log.arrival_s, np.ones(n), np.full(n, 8))


@settings(max_examples=60, deadline=None)
@given(random_runs())
def test_token_run_properties(case):
    log, wl = case
    t = request_table(log, wl)
    times = log.token_times()
    done = t["completed"].to_numpy()
    assert np.all(t["ttft_ms"][done] <= t["e2el_ms"][done] + 1e-9)
    assert np.all((t["tpot_ms"] >= 0) | t["tpot_ms"].isna())
    assert [len(t) for t in times] == list(log.num_emitted)  # runs rebuild every token
    for i in np.flatnonzero(done):
        k = len(times[i])
        if k > 1:
            assert t["itl_mean_ms"][i] * (k - 1) == approx((log.finish_s[i] - log.first_token_s[i]) * 1e3)
            assert t["itl_mean_ms"][i] == approx(np.diff(times[i]).mean() * 1e3)
    gaps = np.concatenate([np.diff(times[i]) for i in np.flatnonzero(done)] + [np.zeros(0)]) * 1e3
    s = summarize(log, wl, slo=None, **PEAKS)
    if gaps.size:
        want = [gaps.mean(), *np.percentile(gaps, [50, 90, 99])]
        assert [s["itl_ms"][k] for k in ("mean", "median", "p90", "p99")] == approx(want, rel=1e-9, abs=1e-9)
    else:
        assert s["itl_ms"]["mean"] is None


def test_waiting_frac_is_the_union_of_waits_per_replica_over_replica_time():
    from simbatch.metrics.summary import waiting_frac

    log = EventLog(4, num_replicas=2)
    log.replica[:] = [0, 0, 1, -1]  # the last was rejected: it waits nowhere
    log.arrival_s[:] = [0.0, 1.0, 2.0, 0.0]
    log.first_scheduled_s[:] = [2.0, 3.0, np.nan, np.nan]  # request 2 never ran
    # replica 0: [0, 2) and [1, 3) overlap -> 3 s; replica 1: [2, 10) -> 8 s; over 10 s x 2 replicas
    assert waiting_frac(log, 10.0) == pytest.approx(11 / 20)
    # a 0.5 s front end: waits start when the scheduler sees the request
    assert waiting_frac(log, 10.0, front_end_s=0.5) == pytest.approx((2.5 + 7.5) / 20)
    # brute force on a fine grid agrees on random waits over three replicas
    rng = np.random.default_rng(0)
    log = EventLog(60, num_replicas=3)
    log.replica[:] = rng.integers(0, 3, 60)
    log.arrival_s[:] = np.sort(rng.uniform(0, 50, 60))
    log.first_scheduled_s[:] = log.arrival_s + rng.exponential(2.0, 60)
    grid = np.arange(0, 60, 0.001) + 0.0005
    covered = sum(np.any((log.arrival_s[log.replica == r, None] <= grid)
                         & (grid < log.first_scheduled_s[log.replica == r, None]), axis=0).sum() * 0.001
                  for r in range(3))
    assert waiting_frac(log, 60.0) == pytest.approx(covered / 180, abs=1e-3)


def test_waiting_frac_rises_with_load_while_busy_stays_near_one():
    from simbatch.scenario.spec import load_scenario
    from simbatch.runs.one import run
    from pathlib import Path

    chat = Path(__file__).resolve().parents[1] / "scenarios" / "chat.yaml"
    light, heavy = (run(load_scenario(chat, ["workload.synthetic.num_requests=400",
                                             f"workload.synthetic.arrival.rate={r}"])).summary for r in (2, 8))
    assert light["busy_frac"] > 0.9 and heavy["busy_frac"] > 0.9
    assert light["waiting_frac"] < 0.1 < 0.5 < heavy["waiting_frac"]
