"""Admission says why it stopped (issue 34 §5): ``policy.stop_reason``, the ``stop_reason`` column
of ``steps.csv`` and the summary's ``admission_stops``, for each cause, fast path and step by step."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from simbatch.core.kvcache import KVCache
from simbatch.core.sequence import Sequence
from simbatch.core.stop import STOP_REASONS
from simbatch.engine.check import fast_path_difference
from simbatch.engine.simulation import simulate
from simbatch.metrics import step_columns, summarize
from simbatch.policies import POLICIES
from simbatch.scenario.spec import from_dict


def reason(policy) -> str:
    return STOP_REASONS[policy.stop_reason]


def policy_of(kind: str, blocks: int = 1000, **params):
    cls = POLICIES[kind]
    return cls(cls.Params(**params), KVCache(blocks, 16, max_tokens=4096))


def test_iteration_admission_names_each_cause():
    p = policy_of("continuous", max_num_batched_tokens=4096, max_num_seqs=2)
    assert p.schedule(0.0) is None and reason(p) == "empty"
    for i in range(3):
        p.add(Sequence(i, 0.0, 100, 10), 0.0)
    p.schedule(0.0)  # two seats: two admitted, the third waits for a seat
    assert len(p.running) == 2 and reason(p) == "seats"

    p = policy_of("continuous", max_num_batched_tokens=1000)
    for i in range(3):
        p.add(Sequence(i, 0.0, 400, 10), 0.0)
    p.schedule(0.0)  # 400 + 400 of the 1,000-token budget; the third's 400 do not fit
    assert len(p.running) == 2 and reason(p) == "budget"

    p = policy_of("continuous", blocks=60, max_num_batched_tokens=4096)
    for i in range(3):
        p.add(Sequence(i, 0.0, 400, 10), 0.0)  # 25 blocks each, 60 blocks in all
    p.schedule(0.0)
    assert len(p.running) == 2 and reason(p) == "kv"

    # vLLM v0.2's padded prompt batch: 100 and 1,000 tokens would pad 900, past max_paddings 256
    p = policy_of("continuous", max_num_batched_tokens=4096, max_paddings=256)
    p.add(Sequence(0, 0.0, 100, 10), 0.0)
    p.add(Sequence(1, 0.0, 1000, 10), 0.0)
    p.schedule(0.0)
    assert len(p.running) == 1 and reason(p) == "padding"


def test_chunked_prefill_says_budget_and_preempted():
    p = policy_of("chunked_prefill", max_num_batched_tokens=512)
    for i in range(2):
        p.add(Sequence(i, 0.0, 2000, 10), 0.0)
    p.schedule(0.0)  # the first prompt's chunk takes the whole budget
    assert len(p.running) == 1 and reason(p) == "budget"
    p.preempted_now = True  # as after a preemption for KV growth: vLLM v1 admits nobody
    assert p.admit_chunks(100) == [] and reason(p) == "preempted"


def test_padded_batches_say_batch_while_running():
    p = policy_of("static", batch_size=2, max_wait_s=0.0)
    for i in range(3):
        p.add(Sequence(i, 0.0, 50, 5), 0.0)
    p.schedule(0.0)  # a batch of two forms; one is left queued
    assert reason(p) == "seats"
    p.schedule(0.1)  # its first decode: a started batch admits no one
    assert reason(p) == "batch"


def loaded(kind: str, util: float, **policy) -> dict:
    """Llama-2-7B on ``util`` of an A100-40GB at 30 req/s (at 0.4 the queue builds behind memory)."""
    return from_dict({
        "workload": {"synthetic": {"num_requests": 300, "arrival": {"kind": "poisson", "rate": 30.0},
                                   "prompt": {"kind": "lognormal", "median": 400, "sigma": 0.6, "max": 1500},
                                   "output": {"kind": "lognormal", "median": 120, "sigma": 0.7, "max": 500}}},
        "model": "llama-2-7b", "hardware": "a100-40gb", "cost_model": {"kind": "roofline"},
        "kv_cache": {"gpu_memory_utilization": util},
        "policy": {"kind": kind, **policy}, "seed": 5,
    })


@pytest.mark.parametrize("kind,util,policy,binding", [
    ("continuous", 0.4, {}, "kv"),
    ("continuous", 0.4, {"max_num_seqs": 8}, "seats"),
    ("chunked_prefill", 0.9, {"max_num_batched_tokens": 256}, "budget"),
    ("static", 0.4, {"batch_size": 8}, "batch"),
])
def test_the_limit_that_binds_holds_the_queue_and_the_fast_path_logs_it_alike(kind, util, policy, binding):
    scenario = loaded(kind, util, **policy)
    result = simulate(scenario)
    steps = step_columns(result.log)
    queued = steps["num_waiting"] > 0
    counts = Counter(steps["stop_reason"][queued].tolist())
    assert counts.most_common(1)[0][0] == binding, counts
    if binding == "seats":  # every seats stop is a full batch (prefill-first: a decode step holds them all)
        seats = steps["stop_reason"] == "seats"
        assert (steps["num_seqs"][seats & (steps["prefill_tokens"] == 0)] == 8).all()
    # the steady runs' dry run gives the step-by-step admission's reasons, step for step
    assert fast_path_difference(scenario) is None
    summary = summarize(result.log, result.workload, peak_flops=1.0, peak_bandwidth=1.0)
    shares = summary["admission_stops"]
    assert next(iter(shares)) == binding and np.isclose(sum(shares.values()), 1.0)
    assert shares[binding] == pytest.approx(counts[binding] / queued.sum())
