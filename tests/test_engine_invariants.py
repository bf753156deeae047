"""Invariants every policy must keep, checked on random workloads (hypothesis)."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit import simulate_policy

POLICY_PARAMS = {
    "static": {"batch_size": 3, "max_wait_s": 0.05},
    "dynamic": {"max_batch_size": 4, "preferred_batch_sizes": [2], "max_queue_delay_us": 20_000,
                "bucket_by_length": True},
    "continuous": {"max_num_seqs": 5, "max_num_batched_tokens": 512, "watermark": 0.0},
    "chunked_prefill": {"max_num_seqs": 5, "chunk_size": 64, "max_num_batched_tokens": 96,
                        "watermark": 0.0},
}

# the largest request (240 + 40 tokens) needs 18 blocks of 16: every draw is feasible
requests = st.lists(
    st.tuples(st.floats(0, 2.0, allow_nan=False), st.integers(1, 240), st.integers(1, 40)),
    min_size=1, max_size=25,
)
common = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_run(sim, triples, kv_blocks):
    log = sim.log
    outputs = np.array([o for _, _, o in sorted(triples, key=lambda t: t[0])])
    # every request finishes exactly once, with exactly its output tokens
    assert (log.num_emitted == outputs).all()
    assert not np.isnan(log.finish_s).any()
    times = log.token_times()
    for i, t in enumerate(times):
        assert len(t) == outputs[i]
        assert (np.diff(t) > 0).all()  # one token per step at most
        assert t[0] == log.first_token_s[i] and t[-1] == log.finish_s[i]
    assert (log.first_scheduled_s >= log.arrival_s - 1e-12).all()
    assert (log.first_token_s > log.first_scheduled_s).all()
    # KV capacity is never exceeded, at plan time or after a step
    assert max(sim.backend.kv_used) <= kv_blocks
    assert max(log.steps["kv_used_blocks"]) <= kv_blocks
    assert sim.kv.num_used == 0  # everything freed at the end


def check_run_to_completion(sim):
    """Padded batches: nothing joins mid-batch, and a batch starts only when the last one is over."""
    steps = sim.log.steps
    batch: set[int] = set()
    finished: set[int] = set()
    for i, plan in enumerate(sim.backend.plans):
        live = {r for r in plan.request_ids if r >= 0}
        if plan.num_decode_slots == 0:
            assert batch <= finished  # the previous batch is over
            batch = live
        else:
            assert live <= batch
        end = steps["start_s"][i] + steps["duration_s"][i]
        finished |= {r for r in live if sim.log.finish_s[r] <= end}


@common
@given(triples=requests, kv_blocks=st.integers(18, 60), kind=st.sampled_from(sorted(POLICY_PARAMS)))
def test_invariants_hold_for_every_policy(triples, kv_blocks, kind):
    sim = simulate_policy(kind, POLICY_PARAMS[kind], triples, kv_blocks=kv_blocks)
    check_run(sim, triples, kv_blocks)
    if kind in ("static", "dynamic"):
        check_run_to_completion(sim)
    if kind == "chunked_prefill":
        assert all(p.num_batched_tokens <= 96 for p in sim.backend.plans)
    if kind == "continuous":
        assert all(p.num_seqs <= 5 for p in sim.backend.plans)


@common
@given(triples=requests, kv_blocks=st.integers(18, 60),
       kind=st.sampled_from(["continuous", "chunked_prefill"]), mode=st.sampled_from(["paged", "max_length"]))
def test_iteration_policies_under_both_kv_modes(triples, kv_blocks, kind, mode):
    sim = simulate_policy(kind, POLICY_PARAMS[kind], triples, kv_blocks=kv_blocks, kv_mode=mode)
    check_run(sim, triples, kv_blocks)
    if mode == "max_length":
        assert sim.log.num_preemptions.sum() == 0


@settings(max_examples=15, deadline=None)
@given(triples=requests, kind=st.sampled_from(sorted(POLICY_PARAMS)))
def test_same_input_same_run(triples, kind):
    a = simulate_policy(kind, POLICY_PARAMS[kind], triples, kv_blocks=20)
    b = simulate_policy(kind, POLICY_PARAMS[kind], triples, kv_blocks=20)
    assert a.log.steps == b.log.steps
    assert np.array_equal(a.log.finish_s, b.log.finish_s)
