"""Speculative decoding (issue 17, item 6): the section, the acceptance draws, the verify step's
engine and cost, memory, and what a run reports."""

from __future__ import annotations

import numpy as np
import pytest

from simbatch.core.plan import StepPlan
from simbatch.costmodel.roofline import RooflineCostModel
from simbatch.costmodel.work import plan_work
from simbatch.costmodel.speculative import SpeculativeCostModel, build_drafter
from simbatch.engine.setup import kv_blocks_per_replica
from simbatch.engine.simulation import simulate
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import from_dict, load_scenario
from simbatch.scenario.speculative import Acceptance, SpeculativeParams, acceptance_rate_from_length, drafter_model


def _scenario(spec=None, *overrides, requests=200):
    sets = ["workload.synthetic.num_requests=%d" % requests, *overrides]
    if spec is not None:
        sets.append("speculative=" + spec)
    return load_scenario("scenarios/chat.yaml", sets)


def _one_request(spec: dict | None, prompt=100, output=41, **fields):
    data = {"workload": {"synthetic": {"num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0},
                                       "prompt": {"kind": "constant", "value": prompt},
                                       "output": {"kind": "constant", "value": output}}},
            "model": "llama-2-7b", "hardware": "a100-80gb", "policy": {"kind": "continuous"},
            "cost_model": {"kind": "roofline"}, **fields}
    if spec is not None:
        data["speculative"] = spec
    return from_dict(data)


@pytest.mark.parametrize("alpha, k", [(0.5, 4), (0.8, 3), (0.3, 1)])
def test_tokens_per_verify_step_follow_leviathan_equation_1(alpha, k):
    acc = Acceptance(SpeculativeParams(method="ngram", num_speculative_tokens=k, acceptance_rate=alpha), seed=1)
    kept = [acc.accept(rid, g, 4000, k) for rid in range(40) for g in range(1, 3000)]
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert 1 + np.mean(kept) == pytest.approx(expected, rel=0.02)
    assert acc.stats()["tokens_per_verify_step"] == pytest.approx(1 + np.mean(kept))


def test_draws_depend_on_seed_request_and_position_only():
    params = SpeculativeParams(method="ngram", num_speculative_tokens=4, acceptance_rate=0.6)
    a, b = Acceptance(params, 7), Acceptance(params, 7)
    forward = [a.accept(r, g, 100, 4) for r in range(5) for g in range(1, 99)]
    backward = {(r, g): b.accept(r, g, 100, 4) for r in reversed(range(5)) for g in reversed(range(1, 99))}
    assert forward == [backward[(r, g)] for r in range(5) for g in range(1, 99)]
    other = Acceptance(params, 8)
    assert forward != [other.accept(r, g, 100, 4) for r in range(5) for g in range(1, 99)]


def test_per_request_acceptance_rates_spread_as_asked():
    params = SpeculativeParams(method="ngram", num_speculative_tokens=1, acceptance_rate={"mean": 0.6, "std": 0.2})
    acc = Acceptance(params, 0)
    rates = [np.mean([acc.accept(r, g, 2000, 1) for g in range(1, 2000)]) for r in range(300)]
    assert np.mean(rates) == pytest.approx(0.6, abs=0.03)
    assert np.std(rates) == pytest.approx(0.2, abs=0.03)


def test_every_draft_accepted_emits_k_plus_one_tokens_per_step():
    # One request of 41 output tokens: the prefill emits the first, then 40 tokens in verify
    # steps of 1 + 3 tokens each (acceptance 1): 10 decode steps instead of 40.
    plain = simulate(_one_request(None))
    spec = simulate(_one_request({"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 1.0}))
    assert len(plain.log.steps["start_s"]) == 41
    assert len(spec.log.steps["start_s"]) == 11
    assert spec.log.num_emitted[0] == 41
    assert spec.log.speculation == {"verify_steps": 10, "drafted": 30, "accepted": 30, "draft_acceptance_rate": 1.0,
                                    "tokens_per_verify_step": 4.0}
    # Each verify step computes 4 tokens for the request, and is dearer than a plain decode.
    assert set(spec.log.steps["decode_tokens"][1:]) == {4}
    assert spec.log.steps["duration_s"][-1] > plain.log.steps["duration_s"][-1]


def test_drafts_never_run_past_the_last_output_token():
    # 10 output tokens, k = 4, all accepted: verify steps emit 5, then the 4 left (3 drafts).
    spec = simulate(_one_request({"method": "ngram", "num_speculative_tokens": 4, "acceptance_rate": 1.0},
                                 output=10))
    assert list(spec.log.steps["decode_tokens"][1:]) == [5, 4]
    assert spec.log.num_emitted[0] == 10


def test_no_draft_accepted_costs_time_and_gains_nothing():
    base = simulate(_one_request(None))
    spec = simulate(_one_request({"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.0}))
    assert len(spec.log.steps["start_s"]) == len(base.log.steps["start_s"])
    assert spec.log.finish_s[0] > base.log.finish_s[0]


def test_speculation_cuts_tpot_under_load_and_reports_what_it_did():
    from simbatch.runs.one import run

    base = run(_scenario()).summary
    spec_run = run(_scenario("{method: eagle, num_speculative_tokens: 3, acceptance_rate: 0.7}"))
    spec = spec_run.summary
    assert spec["tpot_ms"]["median"] < 0.6 * base["tpot_ms"]["median"]
    stats = spec_run.result.log.speculation
    # vLLM's share of drafts accepted: the leading accepted ones of each step's three.
    assert stats["draft_acceptance_rate"] == pytest.approx(0.7 * (1 - 0.7 ** 3) / 0.3 / 3, rel=0.03)
    assert stats["tokens_per_verify_step"] == pytest.approx((1 - 0.7 ** 4) / 0.3, rel=0.03)
    assert base["speculative"] is None
    assert spec["speculative"]["verify_steps"] == stats["verify_steps"] > 0
    assert spec["speculative"]["expected_tokens_per_step"] == pytest.approx((1 - 0.7 ** 4) / 0.3, abs=1e-4)
    assert spec["scenario_file"].endswith("scenarios/chat.yaml")
    described = spec["cost_model"]["speculative"]
    assert described["drafter"] == "llama-2-7b-eagle-head" and described["num_speculative_tokens"] == 3
    # ITL pools the gaps between chunks (several tokens arrive together), TPOT divides by tokens.
    assert spec["itl_ms"]["median"] > 1.5 * spec["tpot_ms"]["median"]


def test_runs_are_deterministic_and_seeded():
    spec = "{method: ngram, num_speculative_tokens: 4, acceptance_rate: 0.6}"
    a, b = simulate(_scenario(spec, requests=60)), simulate(_scenario(spec, requests=60))
    assert np.array_equal(a.log.finish_s, b.log.finish_s)
    c = simulate(_scenario(spec, "seed=5", requests=60))
    assert not np.array_equal(a.log.finish_s, c.log.finish_s)


def test_chunked_prefill_counts_drafts_in_its_token_budget():
    sc = _scenario("{method: ngram, num_speculative_tokens: 4, acceptance_rate: 0.5}", "policy.kind=chunked_prefill",
                   "policy.max_num_batched_tokens=64", requests=40)
    from simbatch.engine.simulation import run_cluster
    from tests.simkit import RecordingBackend

    backend = RecordingBackend()
    run_cluster(sc, backend=backend)
    assert max(p.num_batched_tokens for p in backend.plans) <= 64
    assert max(max(p.num_new_tokens[:p.num_decode_slots], default=0) for p in backend.plans) == 5


def test_the_drafter_holds_memory_so_the_kv_cache_shrinks():
    sc = _one_request(None, model="llama-3.1-70b", hardware="h100-sxm", cluster={"tensor_parallel": 4})
    base = kv_blocks_per_replica(sc, sc.model, sc.gpu, 4)
    draft = _one_request({"method": "draft_model", "draft_model": "llama-3.1-8b", "acceptance_rate": 0.7},
                         model="llama-3.1-70b", hardware="h100-sxm", cluster={"tensor_parallel": 4})
    eagle = _one_request({"method": "eagle", "acceptance_rate": 0.7},
                         model="llama-3.1-70b", hardware="h100-sxm", cluster={"tensor_parallel": 4})
    ngram = _one_request({"method": "ngram", "acceptance_rate": 0.7},
                         model="llama-3.1-70b", hardware="h100-sxm", cluster={"tensor_parallel": 4})
    blocks = {s: kv_blocks_per_replica(x, x.model, x.gpu, 4) for s, x in (("draft", draft), ("eagle", eagle),
                                                                         ("ngram", ngram))}
    assert blocks["ngram"] == base
    assert base > blocks["eagle"] > blocks["draft"]
    # The 8B draft's KV is 32 of 80 layers' worth beside each token: at least 40/112 fewer blocks.
    assert blocks["draft"] < base * 80 / 112 * 1.01


def test_the_verify_step_prices_every_draft_and_the_drafter_its_passes():
    target = RooflineCostModel("llama-3.1-70b", "h100-sxm", 4)
    spec = SpeculativeParams(method="draft_model", draft_model="llama-3.1-8b", acceptance_rate=0.7)
    draft_spec = drafter_model(spec, target.model, "speculative")
    drafter = build_drafter(draft_spec, target.gpu, 4, target.params, 0.0)
    cm = SpeculativeCostModel(target, drafter, {})
    plan = StepPlan(list(range(8)), [5] * 8, [1000] * 8, num_decode_slots=8)
    work, _, _ = plan_work(plan)
    assert work.rows == 40  # logits for the last token and every draft
    cost = cm.step_cost(plan)
    passes = [drafter.step_cost(StepPlan(list(range(8)), [1] * 8, [1000 + j] * 8, num_decode_slots=8)).seconds
              for j in range(4)]
    assert cost.breakdown["draft"] == pytest.approx(sum(passes))
    assert cost.seconds == pytest.approx(target.step_cost(plan).seconds + sum(passes))
    plain = StepPlan(list(range(8)), [1] * 8, [1000] * 8, num_decode_slots=8)
    assert cm.step_cost(plain).seconds == target.step_cost(plain).seconds  # no drafts, no draft passes
    ngram = SpeculativeCostModel(target, None, {})
    assert ngram.step_cost(plan).seconds == target.step_cost(plan).seconds


@pytest.mark.parametrize("spec, fields, text", [
    ({"method": "eagle"}, {}, "speculative.acceptance_rate: missing"),
    ({"method": "draft_model", "acceptance_rate": 0.5}, {}, "speculative.draft_model: missing"),
    ({"method": "draft_model", "draft_model": "llama-3.1-8b", "acceptance_rate": 0.5}, {},
     "vocabulary \\(128,256\\) is not llama-2-7b's \\(32,000\\)"),
    ({"method": "eagle", "draft_model": "llama-2-7b", "acceptance_rate": 0.5}, {}, "only the draft_model method"),
    ({"method": "medusa", "acceptance_rate": 0.5}, {}, "unknown proposer; allowed: draft_model, eagle, ngram"),
    ({"method": "ngram", "acceptance_rate": 1.5}, {}, "must be in \\[0, 1\\]"),
    ({"method": "ngram", "acceptance_rate": {"mean": 0.5, "std": 0.5}}, {}, "std 0.5 impossible"),
    ({"method": "ngram", "acceptance_rate": 0.5, "num_speculative_tokens": 0}, {}, "must be in \\[1, 64\\]"),
    ({"method": "ngram", "acceptance_rate": 0.5}, {"policy": {"kind": "static"}}, "not static"),
    ({"method": "ngram", "acceptance_rate": 0.5}, {"cluster": {"pipeline_parallel": 2}}, "on a pipeline"),
])
def test_bad_sections_are_one_line_errors(spec, fields, text):
    with pytest.raises(SimbatchError, match=text) as info:
        _one_request(spec, **fields)
    assert "\n" not in str(info.value)


def test_disabled_section_runs_without_speculation():
    sc = _one_request({"method": "ngram", "acceptance_rate": 0.5, "enabled": False})
    assert sc.speculative is None
    assert len(simulate(sc).log.steps["start_s"]) == 41


@pytest.mark.parametrize("alpha, k", [(0.7, 3), (0.35, 5), (0.95, 2)])
def test_a_measured_acceptance_length_reads_back_into_the_rate(alpha, k):
    length = SpeculativeParams(method="ngram", num_speculative_tokens=k, acceptance_rate=alpha).mean_tokens_per_step
    assert acceptance_rate_from_length(length, k) == pytest.approx(alpha, abs=1e-9)
    with pytest.raises(ValueError, match="must be in \\[1, 4\\]"):
        acceptance_rate_from_length(4.5, 3)
