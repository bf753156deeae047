"""Pipeline stages in disaggregated pools (issue 17, item 4): each pool's own TP x PP, its GPU
count, KV per stage, its price, the KV transfer between differently split pools, and errors."""

from __future__ import annotations

import numpy as np
import pytest

from simbatch.api import run
from simbatch.cli import main
from simbatch.costmodel.pipeline import PipelineCostModel, stage_layers
from simbatch.costmodel.roofline import RooflineCostModel
from simbatch.costmodel.work import decode_work
from simbatch.engine.disaggregation.build import run_pools
from simbatch.catalog.links import LINKS
from simbatch.metrics.compare import comparison_table
from simbatch.catalog.models import get_model
from simbatch.scenario.spec import from_dict
from tests.logkit import assert_same_disaggregated_logs

from test_disaggregation import KV_PER_TOKEN, scenario_data

LLAMA = get_model("llama-2-7b")  # 32 layers


def one_request(prompt=900, output=40, **pools) -> dict:
    """One request through one prefill and one decode replica over InfiniBand (pools: overrides)."""
    pools = {"prefill": {}, "decode": {}, **pools}
    return scenario_data([{"prompt": prompt, "output": output, "arrival_s": 0.0}], link="infiniband",
                         **{k: {"replicas": 1, **v} for k, v in pools.items()})


def expected_blocks(sc, tp: int, stages: int) -> int:
    """KV blocks of one replica whose busiest stage holds its share of the weights and of each
    token's KV (written out from the budget's arithmetic, not from the engine's sizing)."""
    share = max(stage_layers(LLAMA.num_layers, stages)) / LLAMA.num_layers
    kv = sc.kv_cache
    reserved = sc.engine.reserved_bytes(LLAMA, tp, sc.policy.params, sc.gpu.memory_bytes)
    left = sc.gpu.memory_bytes * kv.gpu_memory_utilization - LLAMA.weight_bytes * share / tp - reserved
    return int(left // (kv.block_size * LLAMA.kv_bytes_per_token_per_gpu(tp) * share))


def test_a_two_stage_decode_pool_runs_counts_its_gpus_and_sizes_kv_per_stage():
    data = scenario_data(prefill={"replicas": 2, "tensor_parallel": 2},
                         decode={"replicas": 3, "tensor_parallel": 1, "pipeline_parallel": 2})
    out = run(from_dict(data))
    s, section = out.summary, out.summary["disaggregation"]
    assert s["completed"] == s["num_requests"] == 240
    gpus = 2 * 2 + 3 * 1 * 2  # replicas x TP x PP, both pools
    assert s["hardware"]["gpus"] == section["gpus"] == gpus
    assert section["decode"]["pipeline_parallel"] == 2 and section["decode"]["gpus_per_replica"] == 2
    assert section["prefill"]["pipeline_parallel"] == 1 and section["prefill"]["gpus_per_replica"] == 2
    # Each decode stage holds 16 of the 32 layers: twice the KV of a one-stage TP1 replica.
    sc = out.result.scenario
    assert section["decode"]["kv_blocks"] == expected_blocks(sc, 1, 2) > 2 * expected_blocks(sc, 1, 1)
    assert section["prefill"]["kv_blocks"] == expected_blocks(sc, 2, 1)
    decode_rows = [r for r in s["replicas"] if r["pool"] == "decode"]
    assert [r.get("pipeline_parallel") for r in decode_rows] == [2, 2, 2]
    # Goodput per GPU (what layouts are compared on) divides by all ten GPUs.
    row = comparison_table({"pp": s}).iloc[0]
    assert row["gpus"] == gpus and row["goodput_per_gpu"] == pytest.approx(s["goodput"] / gpus)


def test_uneven_stages_size_the_kv_cache_by_the_stage_with_most_layers():
    sc = from_dict(one_request(decode={"pipeline_parallel": 3}))  # 32 layers: 11, 11, 10
    _, replicas = run_pools(sc)
    assert replicas[1].policy.kv.num_blocks == expected_blocks(sc, 1, 3)
    assert expected_blocks(sc, 1, 3) != expected_blocks(sc, 1, 2)


def decode_steps(out, first_decode_replica: int):
    steps = out.steps
    return steps[steps["replica"] >= first_decode_replica]["duration_s"].to_numpy()


def test_a_pipeline_decode_pool_is_priced_by_the_pipeline_cost_model():
    prompt, output = 900, 40
    sc = from_dict(one_request(prompt, output, decode={"pipeline_parallel": 2, "micro_batches": 2}))
    _, replicas = run_pools(sc)
    backend = replicas[1].backend
    assert isinstance(backend, PipelineCostModel) and backend.stages == 2 and backend.layers == [16, 16]
    assert isinstance(replicas[0].backend, RooflineCostModel)  # the prefill pool keeps its own layout
    pp = run(sc)
    flat = run(from_dict(one_request(prompt, output)))
    # After its first step (the transferred prompt's first token), a lone request's decode
    # steps have contexts prompt + 1, prompt + 2, ...: each lasts what the pool's model prices.
    ctx = prompt + np.arange(1, output - 1)
    pipeline = [backend.price(decode_work(1, int(c)), decode_work(1, int(c)), 1).seconds for c in ctx]
    one_stage = RooflineCostModel(LLAMA, sc.gpu, 1)
    single = [one_stage.price(decode_work(1, int(c)), decode_work(1, int(c)), 1).seconds for c in ctx]
    assert decode_steps(pp, 1)[1:] == pytest.approx(pipeline, rel=1e-12)
    assert decode_steps(flat, 1)[1:] == pytest.approx(single, rel=1e-12)
    # Same prefill, same transfer (one lane either way), so TPOT differs by the decode steps alone.
    assert pp.requests["ttft_ms"][0] == flat.requests["ttft_ms"][0]
    assert pp.requests["transfer_ms"][0] == flat.requests["transfer_ms"][0]
    gap = (pp.requests["tpot_ms"][0] - flat.requests["tpot_ms"][0]) * (output - 1) / 1e3
    assert gap == pytest.approx(decode_steps(pp, 1).sum() - decode_steps(flat, 1).sum(), rel=1e-9)
    # Two micro-batches over two stages of half the layers read the weights once per step, as one
    # stage does; the activations each sends to the next stage make the difference.
    assert 0 < gap < 0.01 * sum(single)


def test_a_pipeline_prefill_pool_changes_ttft_and_not_the_decode_steps():
    pp = run(from_dict(one_request(prefill={"pipeline_parallel": 2, "pipeline_schedule": "drain"})))
    flat = run(from_dict(one_request()))
    assert pp.summary["disaggregation"]["prefill"]["pipeline_parallel"] == 2
    assert pp.requests["ttft_ms"][0] != flat.requests["ttft_ms"][0]
    assert decode_steps(pp, 1).tolist() == decode_steps(flat, 1).tolist()


@pytest.mark.parametrize("prefill, decode, lanes", [
    ({"tensor_parallel": 2}, {"tensor_parallel": 1, "pipeline_parallel": 2}, 2),  # 2 senders, 2 stages
    ({"tensor_parallel": 1}, {"tensor_parallel": 1, "pipeline_parallel": 2}, 1),  # one sender binds
    ({"tensor_parallel": 1, "pipeline_parallel": 2}, {"tensor_parallel": 2, "pipeline_parallel": 2}, 2),
    ({"tensor_parallel": 4}, {"tensor_parallel": 1, "pipeline_parallel": 3}, 32 / 11),  # 11 of 32 layers
    ({"tensor_parallel": 2}, {"tensor_parallel": 2}, 2),  # no pipeline: min of the TP degrees, as before
])
def test_the_kv_transfer_runs_over_as_many_lanes_as_its_busiest_gpu_allows(prefill, decode, lanes):
    out = run(from_dict(one_request(prefill=prefill, decode=decode)))
    link, nbytes = LINKS["infiniband-hdr"], 900 * KV_PER_TOKEN
    assert out.result.log.kv_bytes[0] == nbytes  # the same bytes whatever the split
    want = link.latency_s + nbytes / (link.bandwidth * lanes)
    assert out.requests["transfer_ms"][0] == pytest.approx(want * 1e3, rel=1e-12)


@pytest.mark.parametrize("transfer", ["push", "pull"])
def test_the_fast_path_gives_identical_results_on_pipeline_pools(transfer):
    from simbatch.engine.simulation import simulate

    data = scenario_data(prefill={"replicas": 1, "pipeline_parallel": 2},
                         decode={"replicas": 2, "pipeline_parallel": 2, "micro_batches": 4,
                                 "hardware": {"base": "a100-80gb", "memory_bytes": 16 * 2**30}}, transfer=transfer)
    sc = from_dict(data)
    assert_same_disaggregated_logs(simulate(sc).log, simulate(sc, fast_forward=False).log)


def test_cluster_pipeline_fields_are_the_pools_defaults():
    data = one_request(prefill={"pipeline_parallel": 1})
    data["cluster"] = {"replicas": 2, "pipeline_parallel": 2, "pipeline_schedule": "drain"}
    section = run(from_dict(data)).summary["disaggregation"]
    assert section["prefill"]["pipeline_parallel"] == 1 and section["decode"]["pipeline_parallel"] == 2
    assert section["gpus"] == 1 + 2


BAD = [
    ("  decode: {pipeline_parallel: 33}\n", "disaggregation.decode.pipeline_parallel",
     "33 stages for llama-2-7b's 32 layers"),
    ("  decode: {pipeline_parallel: 0}\n", "disaggregation.decode.pipeline_parallel", ">= 1"),
    ("  prefill: {pipeline_parallel: 2, pipeline_schedule: gpipe}\n", "disaggregation.prefill.pipeline_schedule",
     "unknown schedule 'gpipe'"),
    ("  decode: {pipeline_parallel: 2, pipeline_link: carrier-pigeon}\n", "disaggregation.decode.pipeline_link",
     "unknown link 'carrier-pigeon'"),
    ("  decode: {pipeline_parallel: 2, micro_batches: -1}\n", "disaggregation.decode.micro_batches", ">= 0"),
    ("  decode: {pipeline_parallel: 2, policy: {streams: 2}}\n", "disaggregation.decode.pipeline_parallel",
     "set disaggregation.decode.policy.streams to 1"),
    ("  decode: {pipeline_parallel: 2, cost_model: {kind: profile}}\n", "disaggregation.decode.cost_model.kind",
     "roofline only"),
    ("  decode: {pipeline_stages: 2}\n", "disaggregation.decode.pipeline_stages", "unknown field"),
]


@pytest.mark.parametrize("section, field, cause", BAD)
def test_what_a_pipeline_pool_cannot_be_is_a_one_line_error_naming_the_field(tmp_path, capsys, section, field,
                                                                               cause):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nworkload:\n  requests:\n    - {prompt: 10, output: 4}\nmodel: llama-2-7b\n"
                    "hardware: a100-80gb\npolicy:\n  kind: continuous\ncluster:\n  replicas: 2\n"
                    "disaggregation:\n  link: nvlink\n" + section)
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert f": {field}: " in err and cause in err and "\n" not in err, err
    assert not (tmp_path / "o").exists()
