"""Expert parallelism and routing skew in the roofline (issue 17, item 2): the distinct-expert
formula and the busiest-GPU table against exact draws, EP on one GPU, the all-to-all's bytes,
the load imbalance a step waits for, and the scenario's checks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from simbatch.cli import main
from simbatch.costmodel import RooflineCostModel
from simbatch.costmodel.work import decode_work
from simbatch.costmodel.routing import (ExpertLoad, expected_distinct, inclusion, popularity,
                                        rank_load_table)
from simbatch.errors import SimbatchError
from simbatch.catalog.models import get_model
from simbatch.catalog.parallelism import ExpertLayout
from simbatch.core.plan import StepPlan
from simbatch.scenario.spec import from_dict, load_scenario

ROOT = Path(__file__).resolve().parents[1]
MIXTRAL = dict(name="mixtral", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
               intermediate_size=14336, vocab_size=32000, gated_mlp=True, max_context=32768,
               num_experts=8, experts_per_token=2, moe_intermediate_size=14336)

EP = ExpertLayout(expert_parallel=True)  # experts whole on each GPU, all-reduce dispatch
EP_A2A = ExpertLayout(expert_parallel=True, expert_dispatch="all2all")


def exact_draws(E: int, k: int, skew: float, tokens: int, samples: int, ep: int = 1, seed: int = 1):
    """Per-sample expert row counts, shape (samples, ep, E/ep), from exact per-token draws: each
    token's top-k of log-popularity plus Gumbel noise (k distinct experts, Plackett-Luce)."""
    rng = np.random.default_rng(seed)
    logits = np.log(popularity(E, skew))[None, None, :] + rng.gumbel(size=(samples, tokens, E))
    top = np.argpartition(-logits, k - 1, axis=2)[:, :, :k].reshape(samples, -1)
    counts = np.stack([np.bincount(row, minlength=E) for row in top])
    return counts.reshape(samples, ep, -1)


@pytest.mark.parametrize("E, k", [(8, 2), (64, 6)])
@pytest.mark.parametrize("skew", [0.0, 0.5, 1.0])
def test_distinct_experts_formula_matches_exact_draws_under_skew(E, k, skew):
    pi = inclusion(E, k, skew)
    assert pi.sum() == pytest.approx(k)
    for tokens in (1, 4, 16, 64):
        counts = exact_draws(E, k, skew, tokens, samples=300)
        measured = (counts > 0).sum(axis=(1, 2)).mean()
        assert expected_distinct(pi, tokens) == pytest.approx(measured, rel=0.05), tokens


def test_skew_touches_fewer_experts_and_uniform_keeps_the_closed_form():
    tokens = 16
    uniform, skewed = ExpertLoad(256, 8), ExpertLoad(256, 8, skew=1.0)
    assert uniform.distinct(tokens) == 256 * -np.expm1(tokens * np.log1p(-8 / 256))
    assert skewed.distinct(tokens) < 0.75 * uniform.distinct(tokens)


@pytest.mark.parametrize("E, k, ep, skew", [(8, 2, 2, 0.0), (8, 2, 2, 1.0), (64, 6, 4, 0.0), (64, 6, 4, 1.0)])
def test_busiest_gpu_table_matches_exact_draws(E, k, ep, skew):
    """The table draws experts' rows as independent binomials; exact draws differ by under 10% in
    rows (at 2 tokens: measured 4-8%) and 6% in distinct experts."""
    load = ExpertLoad(E, k, ep, skew)
    for tokens in (1, 2, 8, 64, 512):
        counts = exact_draws(E, k, skew, tokens, samples=300 if tokens < 100 else 60, ep=ep)
        rows, distinct = load.busiest(tokens)
        assert rows == pytest.approx(counts.sum(axis=2).max(axis=1).mean(), rel=0.10), tokens
        assert distinct == pytest.approx((counts > 0).sum(axis=2).max(axis=1).mean(), rel=0.06), tokens


def test_busiest_table_is_deterministic():
    a, b = rank_load_table.__wrapped__(64, 6, 4, 1.0), rank_load_table.__wrapped__(64, 6, 4, 1.0)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def _works():
    return [decode_work(1, 100), decode_work(64, 64 * 500), StepPlan([0], [3000], [0]),
            StepPlan([0, 1, 2], [1, 1, 700], [40, 900, 0], None, 2)]


def _cost(cm, work):
    return cm.step_cost(work) if isinstance(work, StepPlan) else cm.price(work, work, work[0])


@pytest.mark.parametrize("skew", [0.0, 1.0])
def test_expert_parallel_on_one_gpu_is_no_expert_parallelism(skew):
    mix = get_model({**MIXTRAL, "routing_skew": skew})
    plain = RooflineCostModel(mix, "h100-sxm", 1)
    ep = RooflineCostModel(mix, "h100-sxm", 1, layout=EP_A2A)
    for work in _works():
        a, b = _cost(plain, work), _cost(ep, work)
        assert (a.seconds, a.breakdown, a.useful_flops, a.useful_bytes) == \
               (b.seconds, b.breakdown, b.useful_flops, b.useful_bytes)


def test_all_to_all_bytes_of_a_known_case_by_hand():
    """Every token picks all 4 experts (k = E), so each of the 2 GPUs computes exactly 2 rows
    per token: the busiest receives 2T rows, half of them from the other GPU."""
    spec = get_model({**MIXTRAL, "name": "all4", "num_experts": 4, "experts_per_token": 4})
    tp, T, h = 2, 1000, 4096
    a2a = RooflineCostModel(spec, "h100-sxm", tp, layout=EP_A2A)
    reduce = RooflineCostModel(spec, "h100-sxm", tp, layout=EP)
    link = 450e9 * 0.65  # H100-SXM NVLink per direction x allreduce_eff
    received = 2 * T * (tp - 1) / tp * h * 2  # rows x remote share x hidden x bf16 bytes = 8.192 MB
    assert received == 8_192_000
    per_collective = received / link + 20e-6
    cost = a2a.price(decode_work(T, T), decode_work(T, T), T)
    assert cost.breakdown["all_to_all"] == pytest.approx(32 * 2 * per_collective, rel=1e-12)
    # The MoE layers' all-reduce (32 of the 64) is what the all-to-alls replace.
    plain = reduce.price(decode_work(T, T), decode_work(T, T), T)
    assert "all_to_all" not in plain.breakdown
    assert cost.breakdown["allreduce"] == pytest.approx(plain.breakdown["allreduce"] / 2, rel=1e-12)


@pytest.mark.parametrize("tokens", [1, 8, 64, 512])
def test_expert_parallel_step_waits_for_the_busiest_gpu(tokens):
    """The experts' part is at least the compute of the busiest GPU's rows in exact draws (the
    busiest of two GPUs of Mixtral, each holding 4 whole experts), and above tensor parallelism's
    even split at small batches, where the load is most uneven."""
    mix = get_model(MIXTRAL)
    ep = RooflineCostModel(mix, "h100-sxm", 2, layout=EP)
    tp = RooflineCostModel(mix, "h100-sxm", 2)
    counts = exact_draws(8, 2, 0.0, tokens, samples=400, ep=2)
    busiest_rows = counts.sum(axis=2).max(axis=1).mean()
    flops_per_row = 2 * 32 * 3 * 4096 * 14336  # a whole expert of every layer, one token
    rate = 989e12 * 0.685
    work = decode_work(tokens, tokens * 100)
    seconds = ep.price(work, work, tokens).breakdown["experts"]
    assert seconds >= 0.97 * busiest_rows * flops_per_row / rate
    if tokens <= 8:
        assert seconds > 1.05 * tp.price(work, work, tokens).breakdown["experts"]


def test_skew_under_expert_parallelism_costs_more_at_large_batches():
    mix = get_model(MIXTRAL)
    even = RooflineCostModel(mix, "h100-sxm", 2, layout=EP)
    skewed = RooflineCostModel(replace(mix, routing_skew=1.0), "h100-sxm", 2, layout=EP)
    prefill = StepPlan([0], [8192], [0])
    assert skewed.step_cost(prefill).breakdown["experts"] > 1.1 * even.step_cost(prefill).breakdown["experts"]
    # Without expert parallelism every GPU computes every row: skew only changes what is read.
    tp, tp_skewed = RooflineCostModel(mix, "h100-sxm", 2), RooflineCostModel(replace(mix, routing_skew=1.0),
                                                                               "h100-sxm", 2)
    assert tp_skewed.step_cost(prefill).seconds == pytest.approx(tp.step_cost(prefill).seconds, rel=1e-9)


def _scenario(**changes) -> dict:
    data = {"workload": {"requests": [{"prompt": 10, "output": 3}]}, "model": "mixtral-8x7b",
            "hardware": "h100-sxm", "cluster": {"tensor_parallel": 2, "expert_parallel": True},
            "policy": {"kind": "continuous"}}
    for key, value in changes.items():
        data[key] = value
    return data


def test_scenario_takes_the_cluster_layout_beside_the_model():
    sc = from_dict(_scenario(cluster={"tensor_parallel": 2, "expert_parallel": True, "expert_dispatch": "all2all"}))
    assert sc.experts == EP_A2A and sc.model == from_dict(_scenario()).model  # the model is the checkpoint's
    assert from_dict(_scenario(cluster={"tensor_parallel": 2})).experts == ExpertLayout()


@pytest.mark.parametrize("changes, field, text", [
    ({"model": "llama-2-7b"}, "cluster.expert_parallel", "applies to a mixture of experts"),
    ({"model": {"base": "mixtral-8x7b", "num_experts": 6}, "cluster": {"tensor_parallel": 4, "expert_parallel": True}},
     "cluster.expert_parallel", "cluster.tensor_parallel 4 does not split"),
    ({"cluster": {"tensor_parallel": 2, "expert_parallel": True, "replicas": [{"count": 1},
                                                                                {"count": 1, "tensor_parallel": 8}]},
      "model": {"base": "mixtral-8x7b", "num_experts": 4}},
     "cluster.expert_parallel", "cluster.replicas[1].tensor_parallel 8 does not split"),
    ({"model": {"base": "mixtral-8x7b", "routing_skew": -0.5}}, "model.routing_skew", "must be a number >= 0"),
    ({"model": {"base": "llama-2-7b", "routing_skew": 1.0}, "cluster": {}}, "model.routing_skew",
     "mixture of experts only"),
    ({"model": {"base": "mixtral-8x7b", "expert_parallel": True}}, "model.expert_parallel",
     "set cluster.expert_parallel"),
    ({"cluster": {"tensor_parallel": 2, "expert_dispatch": "all2all"}}, "cluster.expert_dispatch",
     "applies with cluster.expert_parallel: true"),
    ({"cluster": {"tensor_parallel": 2, "expert_parallel": True, "expert_dispatch": "deepep"}},
     "cluster.expert_dispatch", "unknown dispatch 'deepep'"),
])
def test_bad_expert_settings_name_the_field(changes, field, text):
    with pytest.raises(SimbatchError) as err:
        from_dict(_scenario(**changes), "s.yaml")
    assert err.value.where == f"s.yaml: {field}" and text in str(err.value)


def test_the_cost_model_refuses_experts_its_tp_does_not_split():
    odd = get_model({**MIXTRAL, "num_experts": 6})
    with pytest.raises(SimbatchError, match="does not split"):
        RooflineCostModel(odd, "h100-sxm", 4, layout=EP)


def test_cli_bad_expert_parallel_is_one_line_exit_2(capsys, tmp_path):
    assert main(["run", "chat", "--set", "cluster.expert_parallel=true", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cluster.expert_parallel" in err and "llama-2-7b is dense" in err and "\n" not in err
    assert not (tmp_path / "o").exists()


def test_shipped_scenario_compares_tp_and_ep():
    sc = load_scenario(ROOT / "scenarios" / "moe_ep_deepseek.yaml")
    assert sc.variants == ["tp", "ep", "ep_all2all", "tp_skewed", "ep_skewed", "dp_attention"]
    models = {v: sc.with_variant(v).model for v in sc.variants}
    layouts = {v: sc.with_variant(v).experts for v in sc.variants}
    assert [layouts[v].expert_parallel for v in sc.variants] == [False, True, True, False, True, True]
    assert [layouts[v].attention_data_parallel for v in sc.variants] == [1, 1, 1, 1, 1, 8]
    assert layouts["ep_all2all"].expert_dispatch == "all2all" and models["ep_skewed"].routing_skew == 1.0
    cm = RooflineCostModel(models["ep"], sc.gpu, sc.cluster.tensor_parallel, layout=layouts["ep"])
    assert cm.describe()["expert_parallel"] == 8


def _pools(prefill: dict, decode: dict, **cluster) -> dict:
    return _scenario(cluster={"tensor_parallel": 2, **cluster},
                     disaggregation={"prefill": {"replicas": 1, **prefill}, "decode": {"replicas": 1, **decode},
                                     "link": "nvlink"})


def test_each_pool_takes_its_own_expert_layout():
    # DeepSeek serves prefill and decode with different expert layouts: a pool's own
    # expert_parallel / expert_dispatch, else the cluster's, prices that pool's steps.
    from simbatch.engine.disaggregation.build import build_pools

    sc = from_dict(_pools({}, {"expert_parallel": True, "expert_dispatch": "all2all"}))
    assert not sc.experts.expert_parallel  # the cluster's layout
    pre, dec = build_pools(sc, sc.model)
    assert pre.backend.describe().get("expert_parallel", 1) == 1 and dec.backend.describe()["expert_parallel"] == 2
    plan = StepPlan(request_ids=list(range(64)), num_new_tokens=[1] * 64, num_context_tokens=[1000] * 64,
                    num_decode_slots=64)
    tp_only = RooflineCostModel(sc.model, sc.gpu, 2).step_cost(plan).seconds
    assert dec.backend.step_cost(plan).seconds != tp_only  # priced with its own layout
    assert pre.backend.step_cost(plan).seconds == tp_only
    inherit = from_dict(_pools({"expert_parallel": False}, {}, expert_parallel=True))
    pre, dec = build_pools(inherit, inherit.model)
    assert pre.backend.describe().get("expert_parallel", 1) == 1 and dec.backend.describe()["expert_parallel"] == 2
    summary = run_summary(sc)
    assert summary["disaggregation"]["decode"]["expert_dispatch"] == "all2all"
    assert "expert_parallel" not in summary["disaggregation"]["prefill"]


def run_summary(sc) -> dict:
    from simbatch.runs.one import run

    return run(sc).summary


@pytest.mark.parametrize("prefill, decode, field, text", [
    ({}, {"expert_dispatch": "all2all"}, "disaggregation.decode.expert_dispatch", "applies with expert parallelism"),
    ({}, {"expert_parallel": True, "tensor_parallel": 16}, "disaggregation.decode.expert_parallel",
     "disaggregation.decode.tensor_parallel 16 does not split"),
    ({"expert_dispatch": "deepep"}, {}, "disaggregation.prefill.expert_dispatch", "unknown dispatch 'deepep'"),
])
def test_bad_pool_expert_settings_name_the_field(prefill, decode, field, text):
    with pytest.raises(SimbatchError) as err:
        from_dict(_pools(prefill, decode), "s.yaml")
    assert err.value.where == f"s.yaml: {field}" and text in str(err.value), err.value


def test_a_dense_model_refuses_a_pools_expert_parallelism():
    data = _pools({}, {"expert_parallel": True})
    with pytest.raises(SimbatchError, match="llama-2-7b is dense") as err:
        from_dict({**data, "model": "llama-2-7b"}, "s.yaml")
    assert err.value.where == "s.yaml: disaggregation.decode.expert_parallel"


def test_eplb_placement_replicates_the_hottest_and_evens_the_gpus():
    from simbatch.costmodel.routing import eplb_placement

    pi = inclusion(8, 2, 1.0)
    placed = eplb_placement(pi, 2, 2)  # 8 experts + 2 redundant over 2 GPUs: 5 slots each
    assert placed.shape == (2, 5) and placed.sum() == pytest.approx(2.0)  # every chance placed once
    hottest = np.sort(pi)[::-1]
    assert np.isclose(placed, hottest[0] / 2).sum() == 2  # the hottest expert holds two replicas
    loads = placed.sum(axis=1)
    linear = pi.reshape(2, -1).sum(axis=1)
    assert loads.max() - loads.min() < linear.max() - linear.min()


def test_eplb_brings_the_busiest_gpu_towards_the_mean_under_skew():
    # DeepSeek-V3's 256 experts, top-8, over 8 GPUs, Zipf 1.0: without EPLB the busiest GPU
    # computes far more rows than the mean; EPLB's placement, then redundant slots, even it out.
    mean = 16384 * 8 / 8
    plain, placed, spare = (ExpertLoad(256, 8, 8, 1.0, eplb, r).busiest(16384)[0] / mean
                            for eplb, r in ((False, 0), (True, 0), (True, 32)))
    assert plain > 1.4 and 1.0 < spare < placed < 1.1
    # uniform routing: nothing to balance
    assert ExpertLoad(256, 8, 8, 0.0, True, 0).busiest(16384)[0] == pytest.approx(
        ExpertLoad(256, 8, 8, 0.0).busiest(16384)[0], rel=0.02)


def test_eplb_in_a_scenario_prices_and_holds_its_copies():
    data = _scenario(model={"base": "mixtral-8x7b", "routing_skew": 1.0},
                     cluster={"tensor_parallel": 4, "expert_parallel": True, "eplb": True, "redundant_experts": 4})
    sc = from_dict(data)
    plain = from_dict(_scenario(model={"base": "mixtral-8x7b", "routing_skew": 1.0},
                                cluster={"tensor_parallel": 4, "expert_parallel": True}))
    assert sc.experts.eplb and sc.experts.redundant_experts == 4
    routed = sc.model.num_moe_layers * 8 * sc.model.expert_params() * sc.model.weight_bytes_per_param
    held, plain_held = sc.experts.held_weight_bytes(sc.model), plain.experts.held_weight_bytes(plain.model)
    assert held - plain_held == pytest.approx(routed * 4 / 8)
    balanced = RooflineCostModel(sc.model, sc.gpu, 4, layout=sc.experts)
    unbalanced = RooflineCostModel(plain.model, sc.gpu, 4, layout=plain.experts)

    def decode(n):
        return StepPlan(request_ids=list(range(n)), num_new_tokens=[1] * n, num_context_tokens=[500] * n,
                        num_decode_slots=n)

    # Many rows: the busiest GPU's rows rule and EPLB evens them out. Few rows: every GPU reads
    # all its replicas' weights, and a redundant copy is one more to read.
    assert balanced.step_cost(decode(2048)).seconds < unbalanced.step_cost(decode(2048)).seconds
    assert balanced.step_cost(decode(8)).seconds > unbalanced.step_cost(decode(8)).seconds
    assert balanced.describe()["eplb"] and balanced.describe()["redundant_experts"] == 4


@pytest.mark.parametrize("cluster, field, text", [
    ({"tensor_parallel": 2, "eplb": True}, "cluster.eplb", "applies with cluster.expert_parallel: true"),
    ({"tensor_parallel": 2, "expert_parallel": True, "redundant_experts": 2}, "cluster.redundant_experts",
     "applies with cluster.eplb: true"),
    ({"tensor_parallel": 2, "expert_parallel": True, "eplb": True, "redundant_experts": -1},
     "cluster.redundant_experts", "must be >= 0"),
])
def test_bad_eplb_settings_name_the_field(cluster, field, text):
    with pytest.raises(SimbatchError) as err:
        from_dict(_scenario(cluster=cluster), "s.yaml")
    assert err.value.where == f"s.yaml: {field}" and text in str(err.value), err.value


def test_redundant_experts_must_split_over_the_gpus():
    sc = from_dict(_scenario(cluster={"tensor_parallel": 4, "expert_parallel": True, "eplb": True,
                                      "redundant_experts": 2}))
    with pytest.raises(SimbatchError, match="8 experts \\+ 2 redundant do not split evenly over 4 GPUs"):
        RooflineCostModel(sc.model, sc.gpu, 4, layout=sc.experts)
