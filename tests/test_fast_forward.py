"""The fast path (steady decode runs) gives exactly the step-by-step engine's results."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simbatch.engine.simulation import simulate
from simbatch.metrics import request_table
from simbatch.scenario import from_dict
from prefixkit import shared_prefix_requests

# kv_cache.mode, then /reserve for max_length caches (oracle when absent)
MODES = ["paged", "max_length", "max_length/pow2", "max_length/max"]


def scenario(seed: int, kind: str, mode: str, utilization: float, rate: float, replicas: int,
             prefix: str | None = None):
    policy = {"static": {"kind": "static", "batch_size": 8, "max_wait_s": 0.2},
              "dynamic": {"kind": "dynamic", "max_batch_size": 8, "preferred_batch_sizes": [4],
                          "max_queue_delay_us": 50_000, "bucket_by_length": True},
              "continuous": {"kind": "continuous", "max_num_seqs": 48},
              "chunked_prefill": {"kind": "chunked_prefill", "max_num_seqs": 48, "chunk_size": 256,
                                  "max_num_batched_tokens": 300}}[kind]
    workload = {"synthetic": {
        "num_requests": 150, "arrival": {"kind": "gamma", "rate": rate, "cv": 2.0},
        "prompt": {"kind": "lognormal", "median": 300, "sigma": 0.8, "max": 1500},
        "output": {"kind": "lognormal", "median": 60, "sigma": 0.9, "max": 400}}}
    if prefix:  # prompts sharing prefixes, with prefix caching on
        workload = {"requests": shared_prefix_requests(seed, rate=rate, hash_block=64, mode=prefix)}
    return from_dict({
        "workload": workload,
        "model": "llama-2-7b", "hardware": "a100-40gb", "cost_model": {"kind": "roofline"},
        "cluster": {"replicas": replicas},
        # a small KV cache (0.36 x 40 GiB leaves ~1,000 blocks) so that runs end in preemptions too
        "kv_cache": {"mode": mode.partition("/")[0], "reserve": mode.partition("/")[2] or "oracle",
                     # reserving Llama-2's 4,096 tokens per request needs the larger cache
                     "gpu_memory_utilization": 0.9 if mode.endswith("/max") else utilization,
                     "prefix_caching": prefix is not None, "hash_block_size": 64},
        "policy": policy, "seed": seed,
    })


def runs(log):
    return sorted(zip(log.run_request, log.run_replica, log.run_first, log.run_last))


def per_replica_steps(log):
    table = log.step_table()
    order = np.lexsort((table["start_s"], table["replica"]))  # replicas interleave differently
    return {k: v[order] for k, v in table.items()}


@settings(max_examples=16, deadline=None)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(["static", "dynamic", "continuous", "chunked_prefill"]),
       mode=st.sampled_from(MODES), utilization=st.sampled_from([0.36, 0.9]),
       rate=st.sampled_from([2.0, 20.0]), replicas=st.sampled_from([1, 2]),
       prefix=st.sampled_from([None, "hash", "session"]))
def test_fast_path_equals_step_by_step(seed, kind, mode, utilization, rate, replicas, prefix):
    sc = scenario(seed, kind, mode, utilization, rate, replicas, prefix)
    fast, slow = simulate(sc, fast_forward=True), simulate(sc, fast_forward=False)
    a, b = per_replica_steps(fast.log), per_replica_steps(slow.log)
    for col in a:
        assert np.array_equal(a[col], b[col]), col
    for name in ("first_scheduled_s", "first_token_s", "finish_s", "num_emitted", "num_preemptions"):
        assert np.array_equal(getattr(fast.log, name), getattr(slow.log, name), equal_nan=True), name
    assert runs(fast.log) == runs(slow.log)
    assert request_table(fast.log, fast.workload).equals(request_table(slow.log, slow.workload))


def test_fast_path_takes_most_steps_of_a_steady_run():
    sc = scenario(0, "continuous", "paged", 0.9, 2.0, 1)
    calls = []
    fast = simulate(sc)
    slow_steps = len(simulate(sc, fast_forward=False).log.steps["start_s"])
    assert len(fast.log.steps["start_s"]) == slow_steps
    # the policy is asked far less often than there are steps
    from simbatch.policies.continuous import ContinuousPolicy

    original = ContinuousPolicy.schedule
    ContinuousPolicy.schedule = lambda self, now: calls.append(now) or original(self, now)
    try:
        simulate(sc)
    finally:
        ContinuousPolicy.schedule = original
    assert len(calls) < slow_steps / 3


def test_chunked_prefill_under_load_runs_mostly_mixed_steps():
    # A loaded chunked-prefill replica has a chunk in nearly every step; the
    # fast path plans only the chunks (schedule_chunks) and runs the decodes lazily.
    sc = scenario(3, "chunked_prefill", "paged", 0.9, 20.0, 1)
    from simbatch.policies.chunked_prefill import ChunkedPrefillPolicy

    calls = {"schedule": 0, "chunks": 0}
    original, chunks = ChunkedPrefillPolicy.schedule, ChunkedPrefillPolicy.schedule_chunks

    def count(name, fn):
        def wrapper(self, *args):
            calls[name] += 1
            return fn(self, *args)
        return wrapper

    ChunkedPrefillPolicy.schedule = count("schedule", original)
    ChunkedPrefillPolicy.schedule_chunks = count("chunks", chunks)
    try:
        fast = simulate(sc)
    finally:
        ChunkedPrefillPolicy.schedule, ChunkedPrefillPolicy.schedule_chunks = original, chunks
    t = fast.log.step_table()
    steps = len(t["start_s"])
    mixed = int(((t["prefill_tokens"] > 0) & (t["decode_tokens"] > 0)).sum())
    assert mixed > steps / 4  # the workload does exercise mixed steps
    assert calls["chunks"] >= 0.9 * mixed
    assert calls["schedule"] < steps / 4


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(["continuous", "chunked_prefill"]),
       mode=st.sampled_from(MODES), utilization=st.sampled_from([0.36, 0.9]),
       rate=st.sampled_from([2.0, 20.0]), prefix=st.sampled_from(["hash", "session"]))
def test_fast_path_equals_step_by_step_with_prefix_caching(seed, kind, mode, utilization, rate, prefix):
    test_fast_path_equals_step_by_step.hypothesis.inner_test(seed, kind, mode, utilization, rate, 1, prefix)
