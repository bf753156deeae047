"""Each policy's defining rule, on small hand-made workloads."""

import math

import pytest

from simkit import simulate_policy


def batches(sim):
    """The sets of request ids that each prefill step (a batch start) admitted."""
    return [set(p.request_ids) for p in sim.backend.plans if p.num_decode_slots == 0]


# --- static -----------------------------------------------------------------

def test_static_admits_nothing_mid_batch():
    triples = [(0.0, 100, 20), (0.0, 50, 5), (0.001, 30, 3), (0.002, 40, 4), (0.5, 10, 2)]
    sim = simulate_policy("static", {"batch_size": 2, "max_wait_s": 0.0}, triples)
    current: set[int] = set()
    for plan in sim.backend.plans:
        live = {r for r in plan.request_ids if r >= 0}
        if plan.num_decode_slots == 0:  # a new batch starts: the previous one must be over
            assert all(sim.seqs[r] is None for r in current)  # finished requests are released
            current = live
        else:
            assert live <= current, "a request joined a running static batch"
    assert batches(sim) == [{0, 1}, {2, 3}, {4}]


def test_static_pads_prompts_and_keeps_finished_slots():
    sim = simulate_policy("static", {"batch_size": 2, "max_wait_s": 0.0}, [(0, 100, 20), (0, 60, 5)])
    prefill, *decodes = sim.backend.plans
    assert prefill.num_padded_tokens == 40  # 60-token prompt padded to 100
    assert len(decodes) == 19  # until the longest output (20 tokens) is done
    # after request 1's 5th token its slot computes padding until the batch ends
    assert all(p.num_slots == 2 for p in decodes)
    assert sum(p.num_padded_tokens for p in decodes) == 20 - 5
    assert decodes[-1].num_context_tokens == [100 + 18, 100 + 18]


def test_static_waits_for_batch_or_timeout():
    sim = simulate_policy("static", {"batch_size": 4, "max_wait_s": 1.0}, [(0.0, 10, 2), (0.2, 10, 2)])
    assert sim.log.first_scheduled_s[0] == pytest.approx(1.0)  # partial batch leaves at the time-out
    sim = simulate_policy("static", {"batch_size": 2, "max_wait_s": 1.0}, [(0.0, 10, 2), (0.2, 10, 2)])
    assert sim.log.first_scheduled_s[0] == pytest.approx(0.2)  # full batch leaves at once


def test_static_batch_cut_short_by_padded_kv_reservation():
    # per slot: ceil((100 + 100) / 16) = 13 blocks; 30 blocks fit two slots, not three
    sim = simulate_policy("static", {"batch_size": 3, "max_wait_s": 0.0}, [(0, 100, 100)] * 3, kv_blocks=30)
    assert batches(sim) == [{0, 1}, {2}]
    assert any("cut from 3 to 2" in m for m in sim.log.messages)


# --- dynamic (Triton rules) -------------------------------------------------

def test_dynamic_sends_full_batch_at_once():
    sim = simulate_policy("dynamic", {"max_batch_size": 2, "max_queue_delay_us": 10e6},
                          [(0, 10, 2), (0, 10, 2), (0, 10, 2)])
    assert batches(sim)[0] == {0, 1}
    assert sim.log.first_scheduled_s[0] == 0.0


def test_dynamic_sends_largest_preferred_size_at_once():
    sim = simulate_policy("dynamic", {"max_batch_size": 8, "preferred_batch_sizes": [2, 3],
                                      "max_queue_delay_us": 10e6}, [(0, 10, 2)] * 5)
    assert [len(b) for b in batches(sim)][0] == 3
    assert sim.log.first_scheduled_s[0] == 0.0


def test_dynamic_prefers_a_preferred_size_to_a_full_batch():
    """Triton: preferred [4], max 8, 10 queued sends 4 (the largest preferred size that can be
    formed), not 8."""
    sim = simulate_policy("dynamic", {"max_batch_size": 8, "preferred_batch_sizes": [4]}, [(0, 10, 2)] * 10)
    assert [len(b) for b in batches(sim)][:3] == [4, 4, 2]


def test_dynamic_expired_delay_sends_everything_pending():
    """Triton core, dynamic_batch_scheduler.cc (GetDynamicBatch): once the oldest request has
    waited past a non-zero max_queue_delay, the batcher sends whatever is pending (up to the
    maximum) rather than the preferred size: preferred [4], max 8, delay 1 ms, 10 queued while
    the first batch runs: 4 go at once, then the other 6 together."""
    sim = simulate_policy("dynamic", {"max_batch_size": 8, "preferred_batch_sizes": [4],
                                      "max_queue_delay_us": 1_000}, [(0, 10, 50)] * 10)
    assert sim.log.first_scheduled_s[4] > 0.001  # the second batch starts after the delay
    assert [len(b) for b in batches(sim)] == [4, 6]


def test_dynamic_defaults_are_tritons():
    """No delay by default (max_queue_delay_microseconds 0) and, with no preferred sizes, batches
    as large as possible up to max_batch_size."""
    sim = simulate_policy("dynamic", {"max_batch_size": 4}, [(0.0, 10, 2)] * 6 + [(0.5, 10, 2)])
    assert sim.log.first_scheduled_s[6] == pytest.approx(0.5)  # the late one leaves on arrival
    assert [len(b) for b in batches(sim)] == [4, 2, 1]


def test_dynamic_waits_up_to_queue_delay():
    sim = simulate_policy("dynamic", {"max_batch_size": 4, "max_queue_delay_us": 100_000},
                          [(0.0, 10, 2), (0.03, 10, 2)])
    assert sim.log.first_scheduled_s[0] == pytest.approx(0.1)  # the oldest's delay expired
    assert batches(sim)[0] == {0, 1}


def test_dynamic_preferred_size_reached_before_delay_leaves_immediately():
    sim = simulate_policy("dynamic", {"max_batch_size": 4, "preferred_batch_sizes": [2],
                                      "max_queue_delay_us": 100_000}, [(0.0, 10, 2), (0.03, 10, 2)])
    assert sim.log.first_scheduled_s[0] == pytest.approx(0.03)


def test_dynamic_zero_delay_sends_whatever_is_queued():
    sim = simulate_policy("dynamic", {"max_batch_size": 4, "max_queue_delay_us": 0}, [(0.0, 10, 2)])
    assert sim.log.first_scheduled_s[0] == 0.0


def test_dynamic_bucket_by_length_groups_similar_prompts():
    triples = [(0, 100, 2), (0, 900, 2), (0, 110, 2), (0, 880, 2)]
    params = {"max_batch_size": 2, "max_queue_delay_us": 0}
    plain = simulate_policy("dynamic", params, triples)
    bucketed = simulate_policy("dynamic", {**params, "bucket_by_length": True}, triples)
    assert batches(plain)[0] == {0, 1}
    assert batches(bucketed)[0] == {0, 2}
    waste = lambda s: sum(p.num_padded_tokens for p in s.backend.plans)
    assert waste(bucketed) < waste(plain)


# --- continuous -------------------------------------------------------------

def test_continuous_admits_at_next_step_boundary():
    backend_step = 0.010 + 1e-5 * 50  # the recording backend's time for request 0's prefill
    sim = simulate_policy("continuous", {"max_num_seqs": 8}, [(0.0, 50, 40), (0.005, 30, 5)])
    ends = sim.log.step_table()
    ends = list(ends["start_s"] + ends["duration_s"])
    # request 1 arrived during the first step and starts exactly when that step ends
    assert sim.log.first_scheduled_s[1] == pytest.approx(ends[0])
    assert ends[0] == pytest.approx(backend_step)
    # it joined while request 0 was still decoding
    assert sim.log.finish_s[0] > sim.log.first_scheduled_s[1]


def test_continuous_respects_seat_and_token_limits():
    triples = [(0, 300, 10)] * 6
    sim = simulate_policy("continuous", {"max_num_seqs": 4, "max_num_batched_tokens": 700}, triples)
    for p in sim.backend.plans:
        assert p.num_seqs <= 4
        assert p.num_prefill_tokens <= 700
    assert batches(sim)[0] == {0, 1}  # 2 x 300 fits a 700-token step, 3 do not


def test_continuous_prefill_first_pauses_decodes():
    sim = simulate_policy("continuous", {}, [(0.0, 50, 40), (0.1, 30, 5)])
    mixed = [p for p in sim.backend.plans if 0 < p.num_decode_slots < p.num_slots]
    assert not mixed
    sim = simulate_policy("continuous", {"mix_prefill_decode": True}, [(0.0, 50, 40), (0.1, 30, 5)])
    assert any(0 < p.num_decode_slots < p.num_slots for p in sim.backend.plans)


def test_continuous_rejects_requests_longer_than_the_step_budget():
    sim = simulate_policy("continuous", {"max_num_batched_tokens": 100}, [(0, 90, 5), (0, 95, 10)])
    assert sim.log.num_emitted.tolist() == [5, 0]
    assert math.isnan(sim.log.finish_s[1])
    assert any("rejected" in m for m in sim.log.messages)


def test_preemption_by_recompute_when_kv_runs_out():
    # 4 requests of 16-token prompts growing to 16+64 tokens: 5 blocks each at the end,
    # but only 12 blocks exist, so decodes run out of blocks and the newest is preempted.
    sim = simulate_policy("continuous", {"watermark": 0.0}, [(0, 16, 64)] * 4, kv_blocks=12)
    assert sim.log.num_preemptions.sum() > 0
    assert (sim.log.num_emitted == 64).all()
    assert max(sim.backend.kv_used) <= 12


def test_max_length_reservation_never_preempts():
    sim = simulate_policy("continuous", {"watermark": 0.0}, [(0, 16, 64)] * 4, kv_blocks=12,
                          kv_mode="max_length")
    assert sim.log.num_preemptions.sum() == 0
    assert (sim.log.num_emitted == 64).all()


# --- chunked prefill --------------------------------------------------------

def test_chunked_prefill_never_exceeds_budget_and_chunk_size():
    triples = [(0.0, 1500, 20), (0.01, 700, 30), (0.02, 40, 50), (0.03, 900, 5)]
    sim = simulate_policy("chunked_prefill", {"chunk_size": 256, "max_num_batched_tokens": 300}, triples)
    for p in sim.backend.plans:
        assert p.num_batched_tokens <= 300
        assert all(n <= 256 for n in p.num_new_tokens[p.num_decode_slots:])
    assert (sim.log.num_emitted == [20, 30, 50, 5]).all()


def test_chunked_prefill_decodes_go_first_and_are_never_stalled():
    # a 4,000-token prompt arrives while request 0 decodes: request 0 keeps emitting every step
    sim = simulate_policy("chunked_prefill", {"chunk_size": 512}, [(0.0, 100, 60), (0.05, 4000, 5)])
    runs = [(r, a, b) for r, a, b in zip(sim.log.run_request, sim.log.run_first, sim.log.run_last) if r == 0]
    assert len(runs) == 1  # one unbroken run of tokens: no step skipped it
    for p in sim.backend.plans:
        assert all(n == 1 for n in p.num_new_tokens[: p.num_decode_slots])
        if 0 in p.request_ids and p.num_decode_slots:  # request 0 decodes ahead of the prefill chunk
            assert p.request_ids[0] == 0
    assert max(p.num_batched_tokens for p in sim.backend.plans) <= 512


def test_chunked_prefill_budget_defaults_to_chunk_size():
    sim = simulate_policy("chunked_prefill", {"chunk_size": 128}, [(0.0, 1000, 3)])
    assert [p.num_prefill_tokens for p in sim.backend.plans[:8]] == [128] * 7 + [104]


def test_chunked_prefill_defaults_to_vllm_v1s_budget_without_a_per_request_cap():
    # vLLM v1's API server on an A100: max_num_batched_tokens 2048, long_prefill_token_threshold 0.
    sim = simulate_policy("chunked_prefill", {}, [(0.0, 3000, 3), (0.0, 500, 3)])
    first, second = sim.backend.plans[:2]
    assert first.num_new_tokens == [2048] and first.request_ids == [0]  # one request takes the budget
    assert second.num_prefill_tokens == 952 + 500  # the rest of it, then the next prompt whole


def test_long_prefill_token_threshold_caps_one_requests_chunk_not_the_step():
    sim = simulate_policy("chunked_prefill", {"long_prefill_token_threshold": 512},
                          [(0.0, 1000, 3), (0.0, 1000, 3), (0.0, 1000, 3), (0.0, 1000, 3), (0.0, 1000, 3)])
    first = sim.backend.plans[0]
    assert first.num_new_tokens == [512, 512, 512, 512] and first.num_batched_tokens == 2048
    assert all(n <= 512 for p in sim.backend.plans for n in p.num_new_tokens)
    assert (sim.log.num_emitted == 3).all()


def test_chunk_size_is_an_alias_of_the_threshold_and_refuses_both():
    from simbatch.errors import SimbatchError
    from simbatch.policies import parse_policy

    _, alias = parse_policy({"kind": "chunked_prefill", "chunk_size": 256, "max_num_batched_tokens": 1024})
    _, named = parse_policy({"kind": "chunked_prefill", "long_prefill_token_threshold": 256,
                             "max_num_batched_tokens": 1024})
    assert alias.chunk_cap == named.chunk_cap == 256 and alias.budget == named.budget == 1024
    with pytest.raises(SimbatchError, match="policy.chunk_size: is an alias of long_prefill_token_threshold"):
        parse_policy({"kind": "chunked_prefill", "chunk_size": 256, "long_prefill_token_threshold": 128})


def test_request_larger_than_kv_cache_fails_loudly_instead_of_looping():
    with pytest.raises(RuntimeError, match="needs more KV blocks than exist"):
        simulate_policy("continuous", {"watermark": 0.0}, [(0, 20, 30)], kv_blocks=2)


def test_chunked_prefill_admits_nobody_in_a_step_that_preempted(monkeypatch):
    """vLLM v1: a step whose running requests needed a preemption for KV takes nobody from the
    waiting queue (scheduler.py, ``if not preempted_reqs``)."""
    from simbatch.policies.chunked_prefill import ChunkedPrefillPolicy

    steps = []
    original = ChunkedPrefillPolicy.schedule

    def recording(self, now):
        queued = {s.id for s in self.waiting}
        before = sum(s.num_preemptions for s in [*self.running, *self.waiting])
        plan = original(self, now)
        after = sum(s.num_preemptions for s in [*self.running, *self.waiting])
        admitted = queued & set(plan.request_ids) if plan else set()
        steps.append((after > before, admitted))
        return plan

    monkeypatch.setattr(ChunkedPrefillPolicy, "schedule", recording)
    # Tight memory: 40 blocks of 16 tokens for requests that grow to 200 tokens each.
    triples = [(0.01 * i, 100, 100) for i in range(30)]
    simulate_policy("chunked_prefill", {"max_num_seqs": 16, "chunk_size": 64, "max_num_batched_tokens": 512},
                    triples, kv_blocks=40)
    preempting = [admitted for preempted, admitted in steps if preempted]
    assert preempting and all(not a for a in preempting)
    assert any(admitted for preempted, admitted in steps if not preempted)


# --- continuous: vLLM v0.2's padded prompt batches ---------------------------

def prefill_steps(sim):
    """(request ids, padded tokens) of each prompt-only step."""
    return [(set(p.request_ids), p.num_padded_tokens) for p in sim.backend.plans if p.num_decode_slots == 0]


def test_continuous_packs_prompts_unpadded_by_default():
    sim = simulate_policy("continuous", {"max_num_batched_tokens": 4096}, [(0, 100, 3), (0, 500, 3)])
    assert prefill_steps(sim)[0] == ({0, 1}, 0)


def test_continuous_max_paddings_splits_prompts_of_unlike_lengths():
    """vLLM v0.2.3: 100 and 500 tokens padded to 2 x 500 would waste 400 > max_paddings 256, so
    the second prompt waits for the next step; 100 and 300 go together, 200 tokens padded."""
    params = {"max_num_batched_tokens": 4096, "max_paddings": 256}
    sim = simulate_policy("continuous", params, [(0, 100, 3), (0, 500, 3)])
    assert prefill_steps(sim)[:2] == [({0}, 0), ({1}, 0)]
    sim = simulate_policy("continuous", params, [(0, 100, 3), (0, 300, 3)])
    assert prefill_steps(sim)[0] == ({0, 1}, 200)


def test_continuous_max_paddings_counts_padding_in_the_budget():
    """Three prompts of 300, 200 and 300 tokens: 3 x 300 = 900 padded tokens exceed a budget of
    800 although the 800 kept ones fit, so the third waits."""
    sim = simulate_policy("continuous", {"max_num_batched_tokens": 800, "max_paddings": 256},
                          [(0, 300, 3), (0, 200, 3), (0, 300, 3)])
    assert prefill_steps(sim)[0] == ({0, 1}, 100)


# --- continuous's default budget -----------------------------------------------

@pytest.mark.parametrize("model, budget", [("llama-2-7b", 4096), ("opt-13b", 2048), ("llama-3.1-8b", 131072),
                                           ("tiny", 2048)])
def test_continuous_default_budget_is_the_models_window_and_at_least_2048(model, budget):
    # vLLM V0 without chunked prefill: max(max_model_len, 2048) (v0.2.3 vllm/config.py,
    # SchedulerConfig.__init__); an explicit budget stays, in groups and disaggregated pools too.
    from simbatch.scenario.spec import from_dict

    base = {"workload": {"requests": [{"prompt": 10, "output": 2}]}, "model": model, "hardware": "a100-80gb"}
    sc = from_dict({**base, "policy": {"kind": "continuous"}})
    assert sc.policy.params.max_num_batched_tokens == budget
    assert from_dict({**base, "policy": {"kind": "continuous", "max_num_batched_tokens": 999}}
                     ).policy.params.max_num_batched_tokens == 999
    pools = from_dict({**base, "policy": {"kind": "continuous"},
                       "disaggregation": {"prefill": {"replicas": 1}, "decode": {"replicas": 1},
                                          "link": "nvlink"}}).disaggregation
    assert {p.params.max_num_batched_tokens for p in pools.policies.values()} == {budget}
    groups = from_dict({**base, "policy": {"kind": "chunked_prefill"},
                        "cluster": {"replicas": [{"count": 1, "policy": {"kind": "continuous"}}]}}).group_policies
    assert groups[0].params.max_num_batched_tokens == budget


def test_a_continuous_policy_built_without_a_scenario_takes_its_caches_window():
    from simbatch.core.kvcache import KVCache
    from simbatch.policies.continuous import ContinuousParams, ContinuousPolicy

    assert ContinuousPolicy(ContinuousParams(), KVCache(100, max_tokens=4096)).params.max_num_batched_tokens == 4096
    assert ContinuousPolicy(ContinuousParams(), KVCache(100)).params.max_num_batched_tokens == 2048


def test_one_admissibility_rule_for_every_policy():
    """A request the model's context window cannot hold is refused under every policy, with one
    note (issue 34 §8: on a trace past Llama-2's 4,096 tokens static served every request while
    continuous rejected them as longer than its step budget, so compare set different request
    sets side by side)."""
    from simbatch.api import compare
    from simbatch.scenario.spec import from_dict

    sc = from_dict({
        "workload": {"synthetic": {"num_requests": 120, "arrival": {"kind": "poisson", "rate": 1.0},
                                   "prompt": {"kind": "lognormal", "median": 3000, "sigma": 0.4},
                                   "output": {"kind": "lognormal", "median": 400, "sigma": 0.6}}},
        "model": "llama-2-7b", "hardware": "a100-80gb", "policy": {"kind": "continuous"}, "seed": 3})
    workload = sc.build_workload()
    beyond = int(((workload.prompt_tokens + workload.output_tokens) > 4096).sum())
    assert 10 < beyond < 110  # the rule is exercised both ways
    outputs, table = compare(sc, jobs=1)
    served = {}
    for kind, out in outputs.items():
        served[kind] = frozenset(map(int, (out.result.log.replica >= 0).nonzero()[0]))
        notes = [m for m in out.messages if "refused" in m]
        assert notes == [f"{beyond} request(s) refused: prompt + output longer than the model's context window "
                         f"(4,096 tokens), under every policy (vLLM refuses them too: max_model_len); clip them "
                         f"with workload.max_total_tokens"], (kind, out.messages)
        assert not [m for m in out.messages if "rejected" in m], (kind, out.messages)
    assert len(set(served.values())) == 1 and len(next(iter(served.values()))) == 120 - beyond
    assert set(table["completed"]) == {120 - beyond}
