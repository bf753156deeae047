"""Data-parallel attention for mixtures of experts (cluster.data_parallel_attention): each
replica is a data-parallel rank running attention and the dense layers on its own requests
with the whole non-expert weights, the routed experts spread over all the ranks' GPUs and
dispatched by all-to-all; a rank's step is priced with the other ranks as loaded as itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from simbatch.api import run
from simbatch.catalog.models import get_model
from simbatch.catalog.parallelism import ExpertLayout
from simbatch.costmodel import RooflineCostModel
from simbatch.costmodel.work import decode_work
from simbatch.engine.setup import kv_blocks_per_replica
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import from_dict, load_scenario
from simbatch.scenario.variants import variant_data

ROOT = Path(__file__).resolve().parents[1]
DEEPSEEK = get_model("deepseek-v3")


def scenario(cluster: dict, model="deepseek-v3", **extra) -> dict:
    data = {"workload": {"synthetic": {"num_requests": 40, "arrival": {"kind": "poisson", "rate": 4.0},
                                       "prompt": {"kind": "constant", "value": 300},
                                       "output": {"kind": "constant", "value": 20}}},
            "model": model, "hardware": "h200", "policy": {"kind": "continuous", "max_num_seqs": 64},
            "cost_model": {"kind": "roofline"}, "cluster": cluster, "seed": 0}
    data.update(extra)
    return data


DP8_LAYOUT = ExpertLayout(expert_parallel=True, expert_dispatch="all2all", attention_data_parallel=8)
DP8 = {"replicas": 8, "tensor_parallel": 1, "expert_parallel": True, "expert_dispatch": "all2all",
       "data_parallel_attention": True, "router": "least_outstanding"}


def test_the_replicas_are_the_ranks_and_the_experts_span_their_gpus():
    sc = from_dict(scenario(DP8))
    e = sc.experts
    assert (e.attention_data_parallel, e.expert_parallel, e.expert_dispatch) == (8, True, "all2all")
    cm = RooflineCostModel(sc.model, "h200", 1, layout=e)
    assert cm.expert_parallel == 8
    assert cm.describe()["attention_data_parallel"] == 8


def test_a_rank_holds_the_dense_weights_whole_and_an_eighth_of_the_experts():
    held = DP8_LAYOUT.held_weight_bytes(DEEPSEEK)
    routed = DEEPSEEK.num_moe_layers * DEEPSEEK.num_experts * DEEPSEEK.expert_params() * DEEPSEEK.weight_bytes_per_param
    assert held == pytest.approx(DEEPSEEK.weight_bytes - routed * 7 / 8, rel=1e-12)
    assert DEEPSEEK.weight_bytes / 8 < held < DEEPSEEK.weight_bytes / 4  # 93.8 GiB against 78.3 under TP8


def test_latent_kv_is_no_longer_replicated_so_the_node_holds_more_tokens():
    # TP8: every GPU holds the whole latent of every token (MLA has no heads to split); DP8:
    # each GPU holds its own requests' latents, with more weights beside them.
    tp8 = from_dict(scenario({"replicas": 1, "tensor_parallel": 8}))
    dp8 = from_dict(scenario(DP8))
    tokens_tp8 = kv_blocks_per_replica(tp8, tp8.model, tp8.gpu)
    tokens_dp8 = 8 * kv_blocks_per_replica(dp8, dp8.model, dp8.gpu)
    assert tokens_dp8 > 3 * tokens_tp8


def test_a_rank_step_prices_the_experts_for_all_ranks_tokens():
    # A rank of 1 GPU with b sequences, 8 ranks: the experts and all-to-alls see 8 b tokens
    # over 8 GPUs, exactly as one EP8 replica (all2all) whose step holds 8 b sequences.
    dp = RooflineCostModel(DEEPSEEK, "h200", 1, layout=DP8_LAYOUT)
    ep = RooflineCostModel(DEEPSEEK, "h200", 8, layout=ExpertLayout(expert_parallel=True, expert_dispatch="all2all"))
    for b in (1, 16, 128):
        mine, group = decode_work(b, 1000 * b), decode_work(8 * b, 8000 * b)
        a, e = dp.price(mine, mine, b).breakdown, ep.price(group, group, 8 * b).breakdown
        assert a["experts"] == e["experts"]
        assert a["all_to_all"] == e["all_to_all"]
        assert a["allreduce"] == 0.0  # attention is not tensor-parallel inside a rank of 1 GPU


def test_a_rank_runs_attention_and_dense_layers_like_a_one_gpu_replica():
    dp = RooflineCostModel(DEEPSEEK, "h200", 1, layout=DP8_LAYOUT)
    one = RooflineCostModel(DEEPSEEK, "h200", 1)
    work = decode_work(32, 32 * 2000)
    a, o = dp.price(work, work, 32).breakdown, one.price(work, work, 32).breakdown
    for part in ("linear", "lm_head", "attn_decode"):
        assert a[part] == o[part]


@pytest.mark.parametrize("cluster, field, message", [
    ({**DP8, "expert_parallel": False, "expert_dispatch": "allreduce"}, "cluster.data_parallel_attention",
     "expert_parallel"),
    ({**DP8, "expert_dispatch": "allreduce"}, "cluster.expert_dispatch", "all2all"),
    ({**DP8, "replicas": 3}, "cluster.data_parallel_attention", "do not split"),
    ({**DP8, "pipeline_parallel": 2}, "cluster.data_parallel_attention", "pipeline_parallel"),
    ({**DP8, "replicas": [{"count": 4}, {"count": 4, "hardware": "h100-sxm"}]}, "cluster.data_parallel_attention",
     "one kind of replica"),
])
def test_layouts_it_cannot_price_are_refused_naming_the_field(cluster, field, message):
    with pytest.raises(SimbatchError) as err:
        from_dict(scenario(cluster))
    assert field in str(err.value) and message in str(err.value)


def test_a_dense_model_is_refused():
    with pytest.raises(SimbatchError, match="dense"):
        from_dict(scenario(DP8, model="llama-3-8b"))


def test_the_shipped_variant_runs():
    data = load_scenario(ROOT / "scenarios" / "moe_ep_deepseek.yaml").data
    variant = variant_data(data, data["variants"]["dp_attention"], "dp_attention")
    variant.pop("variants", None)
    variant["workload"]["synthetic"]["num_requests"] = 60
    out = run(from_dict(variant))
    assert out.summary["completed"] == 60
    assert out.summary["kv_peak_frac"] > 0
