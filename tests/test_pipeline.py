"""Pipeline parallelism: stage split, the pipeline bubble, memory per stage, and the scenario
field (issue 17, item 4)."""

from __future__ import annotations

import pytest

from simbatch.catalog.hardware import get_gpu
from simbatch.catalog.models import get_model
from simbatch.costmodel import build_cost_model
from simbatch.costmodel.base import NO_ATTN, AttnWork, StepWork
from simbatch.costmodel.pipeline import PipelineCostModel, stage_layers
from simbatch.errors import SimbatchError
from simbatch.runs.one import run
from simbatch.scenario.spec import load_scenario


@pytest.mark.parametrize("layers, stages, expected", [
    (80, 2, [40, 40]),
    (126, 4, [31, 32, 32, 31]),  # remainder 2 <= p - 2: to the middle stages
    (61, 8, [7, 7, 8, 8, 8, 8, 8, 7]),  # counted back from the stage before the last
    (35, 4, [9, 9, 9, 8]),  # remainder p - 1 reaches the first stage
    (33, 4, [8, 8, 9, 8]),
])
def test_layers_split_as_vllm_get_pp_indices(layers, stages, expected):
    assert stage_layers(layers, stages) == expected
    assert sum(expected) == layers


def _ideal_gpu():
    """A GPU whose stage-to-stage link costs nothing, so that equal stages stay equal."""
    return get_gpu({"base": "h100-sxm", "link_latency_s": 0.0, "link_bandwidth": 1e30})


@pytest.mark.parametrize("stages, micro", [(2, 1), (2, 2), (2, 4), (2, 8), (4, 4), (4, 16)])
def test_drained_pipeline_bubble_matches_the_textbook(stages, micro):
    cm = PipelineCostModel(get_model("llama-2-7b"), _ideal_gpu(), 1, stages, micro, "drain", step_overhead_s=0.0)
    work = StepWork((4096, 0, NO_ATTN, AttnWork((4096 * 4097 // 2, 4096, 4096))))  # no LM head row
    cost = cm.price(work, work, 1)
    assert cost.breakdown["bubble"] / cost.seconds == pytest.approx((stages - 1) / (micro + stages - 1), rel=1e-9)


def test_overlapped_pipeline_has_no_bubble_once_every_stage_is_fed():
    work = StepWork((4096, 0, NO_ATTN, AttnWork((4096 * 4097 // 2, 4096, 4096))))
    model = get_model("llama-2-7b")
    full = PipelineCostModel(model, _ideal_gpu(), 1, 4, 4, "overlap", step_overhead_s=0.0).price(work, work, 1)
    assert full.breakdown["bubble"] == pytest.approx(0.0, abs=1e-12)
    # Two micro-batches cannot fill four stages: a step still takes one trip through all.
    half = PipelineCostModel(model, _ideal_gpu(), 1, 4, 2, "overlap", step_overhead_s=0.0).price(work, work, 1)
    assert half.breakdown["bubble"] / half.seconds == pytest.approx(0.5, rel=1e-9)


def test_stage_imbalance_and_the_lm_head_set_the_pace():
    model = get_model("llama-2-7b")
    cm = PipelineCostModel(model, get_gpu("h100-sxm"), 1, 3, 3, "overlap")
    work = StepWork((64, 64, AttnWork((64 * 1000, 64 * 1000, 64)), NO_ATTN))
    times = cm.stage_seconds(work)
    assert cm.layers == [11, 11, 10]
    assert times[2] != times[0]  # fewer layers, but the LM head
    assert cm.price(work, work, 64).seconds == pytest.approx(3 * max(times) + cm.overhead(work, 64))


def _scenario(*overrides):
    return load_scenario("scenarios/chat.yaml", ["model=llama-3-70b", "hardware=h100-sxm",
                                                 "workload.synthetic.num_requests=300", *overrides])


def test_a_pipeline_replica_counts_its_gpus_and_holds_as_much_kv_as_tensor_parallel():
    tp = run(_scenario("cluster.tensor_parallel=4")).summary
    pp = run(_scenario("cluster.tensor_parallel=2", "cluster.pipeline_parallel=2")).summary
    assert tp["hardware"]["gpus"] == pp["hardware"]["gpus"] == 4
    assert pp["hardware"]["pipeline_parallel"] == 2
    # Per GPU a quarter of the weights and of each token's KV either way.
    assert pp["hardware"]["kv_blocks_per_replica"] == tp["hardware"]["kv_blocks_per_replica"]
    # Memory-bound decode: each micro-batch re-reads its stage's weights, so a pipeline
    # does not cut the time per output token as tensor parallelism does.
    assert pp["tpot_ms"]["median"] > 1.3 * tp["tpot_ms"]["median"]
    assert pp["cost_model"]["stage_layers"] == [40, 40]
    drain = run(_scenario("cluster.tensor_parallel=2", "cluster.pipeline_parallel=2",
                          "cluster.pipeline_schedule=drain")).summary
    assert drain["tpot_ms"]["median"] > pp["tpot_ms"]["median"]  # the bubble every step


@pytest.mark.parametrize("overrides, text", [
    (["cluster.pipeline_parallel=81", "cluster.tensor_parallel=1"], "81 stages for llama-3-70b's 80 layers"),
    (["cluster.pipeline_parallel=2", "policy.streams=2"], "two-stream steps"),
    (["cluster.pipeline_parallel=2", "cluster.pipeline_schedule=gpipe"], "unknown schedule 'gpipe'"),
])
def test_pipeline_misuse_is_a_one_line_error(overrides, text):
    with pytest.raises(SimbatchError, match=text):
        run(_scenario("cluster.tensor_parallel=4", *overrides))


def test_profile_cost_models_refuse_pipelines():
    with pytest.raises(SimbatchError, match="roofline only"):
        build_cost_model({"kind": "profile"}, "llama-2-7b", "a100-80gb", 1, pipeline=(2, 0, "overlap"))
    assert build_cost_model(None, "llama-2-7b", "a100-80gb", 1, pipeline=(2, 0, "overlap")).describe()[
        "pipeline_parallel"] == 2


def test_a_slower_link_between_stages_slows_prefill_and_is_reported():
    from simbatch.catalog.links import get_link

    work = StepWork((8192, 1, NO_ATTN, AttnWork((8192 * 8193 // 2, 8192, 8192))))
    model, gpu = get_model("llama-3-70b"), get_gpu("h100-sxm")
    nvlink = PipelineCostModel(model, gpu, 4, 2, 2, "overlap")
    ib = PipelineCostModel(model, gpu, 4, 2, 2, "overlap", link=get_link("infiniband-hdr"))
    # 4096 tokens x 2 x 8192 x 2 bytes / 4 GPUs per micro-batch over 25 GB/s: about 0.67 ms more.
    extra = 4096 * 2 * 8192 * 2 / 4 / 25e9
    assert ib.stage_seconds(work)[0] - nvlink.stage_seconds(work)[0] == pytest.approx(
        extra - 4096 * 2 * 8192 * 2 / 4 / (450e9 * 0.65) + 5e-6 - 20e-6, rel=1e-6)
    assert ib.describe()["pipeline_link"]["name"] == "infiniband-hdr"
    summary = run(_scenario("cluster.tensor_parallel=2", "cluster.pipeline_parallel=2",
                            "cluster.pipeline_link=infiniband-ndr")).summary
    assert summary["cost_model"]["pipeline_link"]["bandwidth_GB_s"] == 50
    with pytest.raises(SimbatchError, match="unknown link 'carrier-pigeon'"):
        run(_scenario("cluster.tensor_parallel=2", "cluster.pipeline_parallel=2",
                      "cluster.pipeline_link=carrier-pigeon"))
