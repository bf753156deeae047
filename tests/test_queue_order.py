"""Queue orders, priority classes, priority preemption and the age bound."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbatch.cli import main
from simbatch.engine.simulation import simulate
from simbatch.errors import SimbatchError
from simbatch.metrics import request_table
from simbatch.scenario.spec import from_dict
from prefixkit import shared_prefix_requests


def scenario(requests, kind="continuous", caching=False, **policy):
    return from_dict({
        "workload": {"requests": requests},
        "model": "llama-2-7b", "hardware": "a100-80gb", "cost_model": {"kind": "roofline"},
        "kv_cache": {"prefix_caching": caching, "hash_block_size": 64},
        "policy": {"kind": kind, **policy},
    })


def service_order(result) -> list[int]:
    """Request ids by the time their first step started."""
    return [int(i) for i in np.argsort(result.log.first_scheduled_s, kind="stable")]


# All at t = 0, so the whole queue is there when the first request is chosen.
FOUR = [{"prompt": 300, "output": 5, "priority": 2}, {"prompt": 100, "output": 50, "priority": 1},
        {"prompt": 200, "output": 1, "priority": 0}, {"prompt": 50, "output": 400, "priority": 2}]


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
@pytest.mark.parametrize("order, expected", [
    ("fcfs", [0, 1, 2, 3]),
    ("spf", [3, 1, 2, 0]),  # prompts 50, 100, 200, 300
    ("sjf", [1, 2, 0, 3]),  # prompt + output 150, 201, 305, 450
    ("priority", [2, 1, 0, 3]),  # classes 0, 1, then 2 in arrival order
])
def test_each_order_serves_in_its_order(kind, order, expected):
    result = simulate(scenario(FOUR, kind, max_num_seqs=1, queue_order=order))
    assert service_order(result) == expected


def test_length_buckets_serve_fcfs_within_a_bucket():
    requests = [{"prompt": p, "output": 2} for p in (300, 50, 200, 100)]
    result = simulate(scenario(requests, max_num_seqs=1, queue_order="spf", length_buckets=[128, 512]))
    assert service_order(result) == [1, 3, 0, 2]


def lpm_requests():
    # request 0 runs alone first; then three arrive sharing 2, 6 and 0 hash blocks with it
    mine = list(range(1, 9))
    return [{"arrival_s": 0.0, "prompt": 512, "output": 2, "hash_ids": mine},
            {"arrival_s": 5.0, "prompt": 512, "output": 2, "hash_ids": mine[:2] + list(range(50, 56))},
            {"arrival_s": 5.0, "prompt": 512, "output": 2, "hash_ids": mine[:6] + [60, 61]},
            {"arrival_s": 5.0, "prompt": 512, "output": 2, "hash_ids": list(range(70, 78))}]


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_lpm_serves_the_longest_cached_prefix_first_and_fcfs_when_the_queue_is_long(kind):
    def run(**p):
        return simulate(scenario(lpm_requests(), kind, caching=True, max_num_seqs=1, **p))

    assert service_order(run(queue_order="lpm")) == [0, 2, 1, 3]
    assert service_order(run(queue_order="lpm", lpm_max_queue=2)) == [0, 1, 2, 3]
    assert service_order(run(queue_order="fcfs")) == [0, 1, 2, 3]


def test_lpm_without_prefix_caching_is_fcfs_with_a_note():
    result = simulate(scenario(lpm_requests(), max_num_seqs=1, queue_order="lpm"))
    assert service_order(result) == [0, 1, 2, 3]
    assert any("lpm without kv_cache.prefix_caching" in m for m in result.log.messages)


def starving():
    # one low-class request behind a stream of high-class ones that keeps the seat busy
    stream = [{"arrival_s": 0.002 + 0.05 * i, "prompt": 100, "output": 8, "priority": 0} for i in range(100)]
    return [{"arrival_s": 0.0, "prompt": 100, "output": 8, "priority": 0},
            {"arrival_s": 0.001, "prompt": 100, "output": 8, "priority": 9}] + stream


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_an_aged_request_is_not_starved(kind):
    starved = simulate(scenario(starving(), kind, max_num_seqs=1, queue_order="priority"))
    aged = simulate(scenario(starving(), kind, max_num_seqs=1, queue_order="priority", max_wait_s=0.5))
    assert service_order(starved)[-1] == 1  # without the bound it goes last
    assert starved.log.first_scheduled_s[1] > 5.0
    wait = aged.log.first_scheduled_s[1] - 0.001
    assert 0.5 <= wait < 0.7  # served at the first admission after it aged
    assert aged.log.finish_s[1] < np.nanmax(aged.log.finish_s)


def preemption_requests():
    return [{"arrival_s": 0.0, "prompt": 100, "output": 400, "priority": 1},
            {"arrival_s": 0.0, "prompt": 100, "output": 400, "priority": 1},
            {"arrival_s": 0.5, "prompt": 100, "output": 5, "priority": 1},
            {"arrival_s": 1.0, "prompt": 100, "output": 5, "priority": 0}]


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_priorities_preempt_lower_classes_only_when_enabled(kind):
    on = simulate(scenario(preemption_requests(), kind, max_num_seqs=2, queue_order="priority",
                           preempt_lower_priority=True))
    off = simulate(scenario(preemption_requests(), kind, max_num_seqs=2, queue_order="priority"))
    # the class-0 arrival takes the seat of the newest class-1 runner at once; the class-1
    # arrival before it never preempts its own class
    assert on.log.num_preemptions.tolist() == [0, 1, 0, 0]
    assert on.log.first_scheduled_s[3] - 1.0 < 0.05
    assert on.log.first_scheduled_s[3] < on.log.first_scheduled_s[2]
    assert off.log.num_preemptions.sum() == 0
    assert off.log.first_scheduled_s[3] > 3.0  # waited for a runner to finish
    assert np.isfinite(on.log.finish_s).all()


@settings(max_examples=16, deadline=None)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(["continuous", "chunked_prefill"]),
       order=st.sampled_from(["spf", "sjf", "lpm", "priority"]), aged=st.booleans(), preempt=st.booleans(),
       utilization=st.sampled_from([0.36, 0.9]), rate=st.sampled_from([2.0, 20.0]))
def test_fast_path_equals_step_by_step_under_every_order(seed, kind, order, aged, preempt, utilization, rate):
    requests = shared_prefix_requests(seed, num_requests=120, rate=rate, hash_block=64, priorities=3)
    sc = from_dict({
        "workload": {"requests": requests}, "model": "llama-2-7b", "hardware": "a100-40gb",
        "cost_model": {"kind": "roofline"},
        "kv_cache": {"gpu_memory_utilization": utilization, "prefix_caching": order == "lpm", "hash_block_size": 64},
        "policy": {"kind": kind, "max_num_seqs": 32, "queue_order": order, "max_wait_s": 1.0 if aged else None,
                   "preempt_lower_priority": preempt and order == "priority"},
    })
    fast, slow = simulate(sc, fast_forward=True), simulate(sc, fast_forward=False)
    a, b = fast.log.step_table(), slow.log.step_table()
    for col in a:
        assert np.array_equal(a[col], b[col]), col
    assert request_table(fast.log, fast.workload).equals(request_table(slow.log, slow.workload))


def test_fcfs_is_the_default_and_unchanged():
    requests = shared_prefix_requests(3, num_requests=60, rate=20.0, priorities=3)
    default = simulate(scenario(requests, max_num_seqs=8))
    explicit = simulate(scenario(requests, max_num_seqs=8, queue_order="fcfs", max_wait_s=0.1))
    for col, v in default.log.step_table().items():
        assert np.array_equal(v, explicit.log.step_table()[col]), col


@pytest.mark.parametrize("policy, where, cause", [
    ({"queue_order": "lifo"}, "policy.queue_order", "allowed: fcfs, spf, sjf, lpm, priority"),
    ({"queue_order": "spf", "preempt_lower_priority": True}, "policy.preempt_lower_priority",
     "needs queue_order: priority"),
    ({"queue_order": "priority", "max_wait_s": 0}, "policy.max_wait_s", "must be > 0"),
    ({"queue_order": "spf", "length_buckets": [512, 128]}, "policy.length_buckets", "strictly increasing"),
    ({"queue_order": "lpm", "lpm_max_queue": 0}, "policy.lpm_max_queue", "must be >= 1"),
    ({"queue_order": 3}, "policy.queue_order", "expected a string"),
])
def test_bad_values_name_the_field(policy, where, cause):
    for kind in ("continuous", "chunked_prefill"):
        with pytest.raises(SimbatchError) as err:
            from_dict({**scenario(FOUR).data, "policy": {"kind": kind, **policy}}, "x.yaml")
        assert err.value.where == f"x.yaml: {where}" and cause in err.value.cause


def test_bad_value_names_file_line_and_field(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("workload:\n  requests: [{prompt: 10, output: 3}]\nmodel: llama-2-7b\n"
                    "hardware: a100-80gb\npolicy:\n  kind: chunked_prefill\n  queue_order: lifo\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:7: policy.queue_order: unknown order 'lifo'" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
@pytest.mark.parametrize("order, preempted", [("fcfs", [0, 1]), ("priority", [1, 0])])
def test_kv_pressure_preempts_the_newest_or_under_priority_the_least_important(kind, order, preempted):
    # Two long requests outgrow a 287-block KV cache; the important one (class 0) came second.
    reqs = [{"prompt": 1000, "output": 1500, "priority": 2, "arrival_s": 0.0},
            {"prompt": 1000, "output": 1500, "priority": 0, "arrival_s": 0.01}]
    sc = from_dict({"workload": {"requests": reqs}, "model": "llama-2-7b", "hardware": "a100-80gb",
                    "cost_model": {"kind": "roofline"}, "kv_cache": {"num_gpu_blocks": 287},
                    "policy": {"kind": kind, "queue_order": order, "chunk_size": 1024} if kind == "chunked_prefill"
                    else {"kind": kind, "queue_order": order}})
    result = simulate(sc)
    assert [min(n, 1) for n in result.log.num_preemptions.tolist()] == preempted
    assert np.isfinite(result.log.finish_s).all()


@pytest.mark.parametrize("kind, policy", [("continuous", {}), ("continuous", {"mix_prefill_decode": True}),
                                          ("chunked_prefill", {"chunk_size": 256})])
def test_a_request_preempted_while_its_step_is_planned_leaves_that_plan(kind, policy, monkeypatch):
    # Under priority order a request that needs a block preempts the newest request of the
    # least important class, which may be one planned earlier in the same step. vLLM v1
    # takes it back out of the step (Scheduler.schedule, "if preempted_req in
    # scheduled_running_reqs"); a plan must never compute tokens for a queued request.
    from simbatch.policies import POLICIES
    from simbatch.core.sequence import RUNNING

    rng = np.random.default_rng(1)
    arrivals = np.cumsum(rng.exponential(1 / 20, 200))
    reqs = [{"arrival_s": float(a), "prompt": int(rng.integers(50, 1500)), "output": int(rng.integers(10, 400)),
             "priority": int(rng.integers(0, 3))} for a in arrivals]
    sc = from_dict({"workload": {"requests": reqs}, "model": "llama-2-7b", "hardware": "a100-40gb",
                    "cost_model": {"kind": "roofline"}, "kv_cache": {"gpu_memory_utilization": 0.36},
                    "policy": {"kind": kind, "max_num_seqs": 48, "queue_order": "priority", **policy}})
    cls, planned_queued = POLICIES[kind], []
    original = cls.schedule

    def checked(self, now):
        plan = original(self, now)
        if plan is not None:
            seqs = {s.id: s for s in self.running}
            planned_queued.extend(r for r in plan.request_ids if r not in seqs or seqs[r].status != RUNNING)
        return plan

    monkeypatch.setattr(cls, "schedule", checked)
    result = simulate(sc, fast_forward=False)
    assert int(result.log.num_preemptions.sum()) > 20  # the case arises
    assert planned_queued == []
    assert np.isfinite(result.log.finish_s).all()


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_priority_victim_is_the_latest_arrival_of_the_least_important_class(kind):
    # vLLM v1 (vllm/v1/core/sched/scheduler.py, Scheduler.schedule) picks the KV-growth victim
    # as max(self.running, key=lambda r: (r.priority, r.arrival_time)): a request re-admitted
    # after a preemption sits last in the running list but keeps its early arrival, so it is
    # not the victim while a later arrival of its class runs.
    from simbatch.core.kvcache import KVCache
    from simbatch.policies import POLICIES
    from simbatch.core.sequence import Sequence

    policy = POLICIES[kind](POLICIES[kind].Params(queue_order="priority"), KVCache(100))
    late, early_readmitted, important = Sequence(1, 5.0, 10, 10, 1), Sequence(0, 1.0, 10, 10, 1), Sequence(2, 9.0, 10, 10, 0)
    policy.running.extend([late, important, early_readmitted])  # admission order
    assert policy.newest_victim(frozenset()) is late
    assert policy.newest_victim(frozenset()) is early_readmitted  # class 1 before class 0
    assert policy.newest_victim(frozenset()) is important
