"""The fast path (steady decode runs) gives exactly the step-by-step engine's results.

Checked on a fixed grid, not a random sample: every policy x KV mode x feature x load.
"""

import pytest

from simbatch.engine.check import fast_path_difference
from simbatch.engine.simulation import simulate
from simbatch.scenario.spec import from_dict
from prefixkit import shared_prefix_requests

# kv_cache.mode, then /reserve for max_length caches (oracle when absent)
MODES = ["paged", "max_length", "max_length/pow2", "max_length/max"]


def scenario(seed: int, kind: str, mode: str, utilization: float, rate: float, replicas: int,
             prefix: str | None = None, **extra):
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
        "policy": policy, "seed": seed, **extra,
    })


# Features beyond the plain scenario, and the policies each applies to.
FEATURES = {
    "plain": ("static", "dynamic", "continuous", "chunked_prefill"),
    "prefix_hash": ("continuous", "chunked_prefill"),  # padded batches ignore prefix caching
    "prefix_session": ("continuous", "chunked_prefill"),
    "two_replicas_least_kv": ("static", "dynamic", "continuous", "chunked_prefill"),
    # a router that counts each replica's unfinished requests (a padded batch's rows finish mid-run)
    "two_replicas_least_outstanding": ("static", "dynamic", "continuous", "chunked_prefill"),
    # a router that reads each replica's clock (when its current step ends)
    "two_replicas_latency_aware": ("static", "dynamic", "continuous", "chunked_prefill"),
    "control": ("dynamic", "continuous", "chunked_prefill"),  # no controller drives static
    "spf_aged": ("continuous", "chunked_prefill"),
    "mix_prefill_decode": ("continuous",),
    "two_streams": ("continuous", "chunked_prefill"),
    "max_paddings": ("continuous",),  # vLLM v0.2's padded prompt batches
}
CONTROL = {"dynamic": {"kind": "adaptive_delay", "interval_s": 0.5, "window_s": 2.0, "max_value": 80_000},
           "continuous": {"kind": "slo", "interval_s": 0.5, "window_s": 2.0, "min_value": 4, "max_value": 48},
           "chunked_prefill": {"kind": "slo", "interval_s": 0.5, "window_s": 2.0, "min_value": 64, "max_value": 300}}
# (gpu_memory_utilization, rate): a small cache under load (preemptions, a blocked queue head),
# and a large one at a low rate (arrivals into an empty queue end steady runs)
LOADS = {"tight": (0.36, 20.0), "light": (0.9, 2.0)}
GRID = [(kind, mode, feature, load) for feature, kinds in FEATURES.items() for kind in kinds
        for mode in MODES for load in LOADS]


def feature_scenario(kind: str, mode: str, feature: str, load: str, seed: int):
    utilization, rate = LOADS[load]
    prefix = feature.partition("prefix_")[2] or None
    replicas = 2 if feature.startswith("two_replicas") else 1
    extra = {}
    if replicas == 2:
        extra["cluster"] = {"replicas": 2, "router": feature.partition("two_replicas_")[2]}
    if feature == "control":
        extra["control"] = CONTROL[kind]
        extra["slo"] = {"ttft_ms": 500, "tpot_ms": 40}
    sc = scenario(seed, kind, mode, utilization, rate, replicas, prefix, **extra)
    policy = {"spf_aged": {"queue_order": "spf", "max_wait_s": 1.0}, "mix_prefill_decode": {"mix_prefill_decode": True},
              "two_streams": {"streams": 2}, "max_paddings": {"max_paddings": 64}}.get(feature)
    if policy:
        data = dict(sc.data)
        data["policy"] = {**data["policy"], **policy}
        sc = from_dict(data)
    return sc


@pytest.mark.parametrize("kind, mode, feature, load", GRID, ids=["-".join(c) for c in GRID])
def test_fast_path_equals_step_by_step(kind, mode, feature, load):
    seed = GRID.index((kind, mode, feature, load))  # fixed, and different across cases
    sc = feature_scenario(kind, mode, feature, load, seed)
    assert fast_path_difference(sc) is None


def test_the_grid_exercises_what_it_claims():
    # Preemptions under the tight load, control actions, and the second replica used.
    sc = feature_scenario("continuous", "paged", "plain", "tight", 0)
    assert simulate(sc).log.num_preemptions.sum() > 0
    sc = feature_scenario("chunked_prefill", "paged", "control", "tight", 0)
    assert len(simulate(sc).log.control_rows) > 1
    sc = feature_scenario("dynamic", "paged", "two_replicas_least_kv", "light", 0)
    assert set(simulate(sc).log.step_table()["replica"].tolist()) == {0, 1}


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


def test_mixed_steps_run_back_to_back_with_the_decode_group_joined_in_place():
    # One call of mixed_run takes many mixed steps (the engine loop is not re-entered between
    # them), and the requests whose prefill a step completes join the decode group there
    # (join_decoding on the step's chunks), so adopt_decoding seldom scans the running list;
    # the results are the step-by-step engine's (the grid above checks every feature).
    from simbatch.engine.fast import steps as fast_forward
    from simbatch.engine.fast.decode_group import DecodeGroup

    sc = scenario(3, "chunked_prefill", "paged", 0.9, 20.0, 1)
    runs, joins, scans = [], [], []
    original_run, original_join, original_adopt = (fast_forward.mixed_run, DecodeGroup.join_decoding,
                                                    DecodeGroup.adopt_decoding)

    def counted_run(replica, mixed):
        n = yield from original_run(replica, mixed)
        runs.append(n)
        return n

    def counted_join(self, seqs, prev_decode):
        before = len(self.members)
        ok = original_join(self, seqs, prev_decode)
        joins.append(len(self.members) - before)
        return ok

    def counted_adopt(self, running, num_prefilling, prev_decode):
        scans.append(len(running) != len(self.members) + num_prefilling)  # it will scan them
        return original_adopt(self, running, num_prefilling, prev_decode)

    fast_forward.mixed_run, DecodeGroup.join_decoding = counted_run, counted_join
    DecodeGroup.adopt_decoding = counted_adopt
    try:
        fast = simulate(sc)
    finally:
        fast_forward.mixed_run, DecodeGroup.join_decoding = original_run, original_join
        DecodeGroup.adopt_decoding = original_adopt
    ran = [n for n in runs if n]
    assert sum(ran) > 100 and sum(ran) / len(ran) > 3  # several mixed steps per call
    assert sum(joins) > 20  # prefills completed inside runs joined the group there
    assert sum(scans) < sum(ran) / 10  # adopt_decoding seldom scans
    steps = len(fast.log.step_table()["start_s"])
    assert steps == len(simulate(sc, fast_forward=False).log.step_table()["start_s"])
    assert fast_path_difference(sc) is None
