"""The shipped MLPerf llama2-70b scenario (scenarios/fp8_70b_h100.yaml, issue 17's check):
it loads as NVIDIA's v4.1 H100 setup (FP8 weights and KV, 4 x TP2 = 8 GPUs, TensorRT-LLM's
in-flight batching knobs, MLPerf's Server constraints), its lengths have the dataset's
statistics, and a short run completes every request."""

from pathlib import Path

import numpy as np
import pytest

from simbatch.api import run
from simbatch.scenario.spec import load_scenario

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "fp8_70b_h100.yaml"


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(SCENARIO)


def test_loads_quantised_to_fp8_weights_and_kv(scenario):
    assert scenario.model.name == "llama-2-70b"
    assert scenario.model.weight_quant == "fp8"
    assert scenario.model.kv_quant == "fp8"
    assert scenario.gpu.name == "h100-sxm"


def test_uses_eight_gpus_as_four_tp2_instances(scenario):
    c = scenario.cluster
    assert (c.replicas, c.tensor_parallel, c.pipeline_parallel) == (4, 2, 1)
    assert c.replicas * c.tensor_parallel * c.pipeline_parallel == 8
    assert c.router == "least_outstanding"


def test_policy_and_slo_are_the_submissions(scenario):
    p = scenario.policy.params
    assert scenario.policy.kind == "continuous"
    assert (p.max_num_seqs, p.max_num_batched_tokens, p.mix_prefill_decode) == (1024, 4096, True)
    assert (scenario.slo.ttft_ms, scenario.slo.tpot_ms) == (2000, 200)
    synthetic = scenario.data["workload"]["synthetic"]
    assert synthetic["arrival"] == {"kind": "poisson", "rate": 75}


def test_lengths_match_the_dataset_statistics(scenario):
    # Inputs: mean 222.3 over the 24,576 samples, 48..1,021; outputs: the published 290.3
    # generated tokens per sample, at most max_output_len 1,024 (sources in the scenario).
    w = scenario.build_workload()
    assert len(w) == 20000
    assert np.mean(w.prompt_tokens) == pytest.approx(222.3, rel=0.03)
    assert np.mean(w.output_tokens) == pytest.approx(290.3, rel=0.03)
    assert 48 <= w.prompt_tokens.min() and w.prompt_tokens.max() <= 1021
    assert 1 <= w.output_tokens.min() and w.output_tokens.max() <= 1024


def test_a_short_run_completes_every_request():
    out = run(load_scenario(SCENARIO, ["workload.synthetic.num_requests=50"]))
    assert out.summary["num_requests"] == 50
    assert out.summary["completed"] == 50, out.messages
    assert out.requests["completed"].all()
