"""End to end on the real traces in ../shared/traces (skipped where that folder is absent)."""

from pathlib import Path

import pytest

from simbatch.api import POLICY_ORDER, compare, run
from simbatch.scenario.spec import load_scenario

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"


@pytest.fixture(autouse=True)
def need_traces():
    if not TRACES.is_dir():
        pytest.skip("../shared/traces not present: real-trace tests need the shared folder beside the repo")


def test_azure_conv_every_policy_serves_every_request():
    sc = load_scenario(ROOT / "scenarios" / "azure_conv.yaml", ["workload.num_requests=300"])
    runs, table = compare(sc)
    assert list(table["policy"]) == list(POLICY_ORDER)
    for kind, out in runs.items():
        req = out.requests
        assert out.summary["completed"] == 300, kind
        assert (req["num_output_tokens"] == req["output_tokens"]).all()
        assert (req["ttft_ms"] > 0).all() and (req["e2el_ms"] >= req["ttft_ms"]).all()
    # padding is what static and dynamic batching pay for; the others never pad
    waste = dict(zip(table["policy"], table["padding_waste_frac"]))
    assert waste["static"] > 0.2 and waste["continuous"] == 0 and waste["chunked_prefill"] == 0
    # and iteration-level batching serves the same trace with lower tail latency
    e2e = dict(zip(table["policy"], table["e2el_p99_ms"]))
    assert e2e["continuous"] < e2e["static"] and e2e["chunked_prefill"] < e2e["static"]


def test_chunked_prefill_cuts_decode_stalls_on_the_code_trace():
    # Long code prompts stall running decodes under prefill-first continuous
    # batching; chunked prefill bounds the stall, so its ITL tail is shorter.
    sc = load_scenario(ROOT / "scenarios" / "azure_conv.yaml",
                       ["workload.trace=../../shared/traces/AzureLLMInferenceTrace_code.csv",
                        "workload.num_requests=400"])
    runs, _ = compare(sc, ["continuous", "chunked_prefill"])
    itl = {k: r.summary["itl_ms"]["p99"] for k, r in runs.items()}
    assert itl["chunked_prefill"] < itl["continuous"]


def test_mooncake_long_prompts_on_tensor_parallel_replica():
    sc = load_scenario(ROOT / "scenarios" / "mooncake_conv.yaml", ["workload.num_requests=200"])
    out = run(sc)
    assert out.summary["completed"] == 200
    assert out.summary["hardware"]["tensor_parallel"] == 4
    assert out.summary["kv_peak_frac"] <= 1.0


def test_rate_scale_raises_load():
    base = ["workload.num_requests=300", "policy.kind=continuous"]
    slow = run(load_scenario(ROOT / "scenarios" / "azure_conv.yaml", base))
    fast = run(load_scenario(ROOT / "scenarios" / "azure_conv.yaml", base + ["workload.rate_scale=4"]))
    assert fast.summary["duration_s"] < slow.summary["duration_s"]
    assert fast.summary["ttft_ms"]["p99"] > slow.summary["ttft_ms"]["p99"]
