"""The engine memory model: each engine version's KV budget term by term, the server's own block
count as an override, the breakdown a run prints and keeps, and the capacity a log implies."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simbatch import load_scenario, run
from simbatch.catalog.models import get_model
from simbatch.cli import main
from simbatch.engine.setup import kv_budget_per_replica
from simbatch.errors import SimbatchError
from simbatch.measured import MeasuredRun, read_measured
from simbatch.measured.capacity import implied_capacity

GiB = 2**30
SHARED = Path(__file__).resolve().parents[2] / "shared" / "measured"
A100_80GB = 79.25 * GiB  # the driver's figure the preset carries (simbatch/catalog/hardware.py)


def budget(name: str, *overrides: str):
    sc = load_scenario(name, list(overrides))
    return kv_budget_per_replica(sc, sc.model, sc.gpu)


def test_vllm_v0_2_holds_back_the_torch_peak_of_its_profiling_pass():
    """v0.2.3: total x 0.95 - max_memory_allocated() after a pass of 16,384 tokens over 1,024
    sequences (OPT-13B: the MLP's widest moment beats the sampler); nothing outside PyTorch."""
    b = budget("vllm_opt13b_a100")
    weights = 12_840_719_360 * 2
    forward = 2 * 16384 * (2 * 5120 + 20480 + 20480)
    sampler = 1024 * 50272 * 24
    assert forward > sampler and b.activation_bytes == forward
    assert b.weight_bytes == weights and b.graph_bytes == 0 and b.other_bytes == 0
    per_block = 16 * 40 * 2 * 5120 * 2
    assert b.blocks == int((A100_80GB * 0.95 - weights - forward) // per_block) == 4080
    assert b.tokens == 65_280


def test_vllm_v1_0_8_counts_the_sampler_the_rotary_cache_and_memory_outside_pytorch():
    """0.8.x at TP2: each GPU's half of the weights plus the rotary cache; the sampler's
    [256, vocab] pass beats 2,048 tokens of activations; 0.77 GiB outside PyTorch."""
    b = budget("vllm_llama70b_a100_tp2")
    model = get_model("llama-3.1-70b")
    rope = 131072 * 128 * 2
    assert b.weight_bytes == pytest.approx(model.weight_bytes / 2 + rope)
    assert b.activation_bytes == 256 * 128256 * 24
    assert b.other_bytes == pytest.approx(0.77 * GiB)
    per_block = 16 * 80 * 2 * (8 // 2) * 128 * 2
    left = A100_80GB * 0.95 - b.weight_bytes - b.activation_bytes - b.other_bytes
    assert b.bytes_per_block == per_block and b.blocks == int(left // per_block)
    # The release's 1,024-sequence default on a 70 GiB GPU makes the sampler pass bind harder.
    wide = budget("vllm_llama70b_a100_tp2", "policy.max_num_seqs=1024", "policy.max_num_batched_tokens=8192")
    assert wide.activation_bytes == 1024 * 128256 * 24 and wide.blocks < b.blocks


def test_vllm_0_19_on_the_rtx_4090_within_2_percent_of_the_servers_blocks():
    """The one shared run that records its block count: 2,588 (meta.json). Its non-torch term
    is fitted there, so this pins the arithmetic of the other terms, not the rule's accuracy."""
    b = budget("vllm019_llama8b_rtx4090")
    assert b.total_bytes == 25_250_627_584
    assert b.weight_bytes == pytest.approx(8_030_261_248 * 2 + 131072 * 128 * 2)
    assert b.activation_bytes == 256 * 128256 * 24
    assert abs(b.blocks / 2588 - 1) < 0.02


def test_plain_engines_hold_nothing_back_and_graph_memory_is_deducted_where_an_engine_does():
    plain = budget("chat")
    assert (plain.activation_bytes, plain.graph_bytes, plain.other_bytes) == (0, 0, 0)
    graphs = budget("chat", "engine.graph_gib=2")
    assert graphs.graph_bytes == 2 * GiB
    assert plain.blocks - graphs.blocks == pytest.approx(2 * GiB / plain.bytes_per_block, abs=1)


def test_num_gpu_blocks_overrides_the_rule_and_is_checked():
    b = budget("vllm_opt13b_a100", "kv_cache.num_gpu_blocks=3500")
    assert b.override and b.blocks == 3500 and b.tokens == 56_000
    assert "kv_cache.num_gpu_blocks" in b.line() and b.describe()["source"] == "kv_cache.num_gpu_blocks"
    out = run(load_scenario("vllm_opt13b_a100", ["kv_cache.num_gpu_blocks=3500",
                                                 "workload.synthetic.num_requests=20"]))
    assert out.summary["hardware"]["kv_blocks_per_replica"] == 3500
    for bad in ("0", "-3", "1.5", "many", "10000000000"):
        with pytest.raises(SimbatchError) as err:
            load_scenario("vllm_opt13b_a100", [f"kv_cache.num_gpu_blocks={bad}"])
        assert "kv_cache.num_gpu_blocks" in err.value.where


def test_run_prints_the_breakdown_and_summary_json_keeps_it(tmp_path, capsys):
    code = main(["run", "vllm_opt13b_a100", "--set", "workload.synthetic.num_requests=20",
                 "--out", str(tmp_path / "r")])
    assert code == 0
    line = [x for x in capsys.readouterr().out.splitlines() if "KV budget per GPU" in x]
    assert line == ["a100-80gb, TP 1: KV budget per GPU: 79.25 GiB x 0.95 = 75.29 - weights 23.92 - activations "
                    "1.56 - graphs 0.00 - other 0.00 -> KV 49.80 GiB = 4,080 blocks x 16 = 65,280 tokens"]
    kept = json.loads((tmp_path / "r" / "summary.json").read_text())["kv_budget"]
    assert kept["blocks"] == 4080 and kept["tokens"] == 65_280 and kept["weights_gib"] == pytest.approx(23.918, abs=1e-3)


def hand_log(arrival, first, finish, prompt, output) -> MeasuredRun:
    f = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    return MeasuredRun("hand", "", f(arrival), np.asarray(prompt), np.asarray(output), f(first), f(finish))


def test_implied_capacity_counts_tokens_in_flight_while_requests_wait():
    """A holds 100 + its growing output from t=0; B arrives at 1 and waits until 5 (A's end):
    just before t=5, A holds 100 + 1 + 9 x 5/5 = 110 tokens, and B has waited more than 1 s."""
    log = hand_log(arrival=[0, 1], first=[0, 5], finish=[5, 6], prompt=[100, 50], output=[10, 3])
    c = implied_capacity(log)
    assert c.saturates and c.peak_while_waiting == 110 and c.waited_s == pytest.approx(3.0)
    assert c.peak_tokens == 110
    # Nothing waits when B arrives after A is done: the log bounds nothing.
    free = implied_capacity(hand_log([0, 6], [0, 6], [5, 7], [100, 50], [10, 3]))
    assert not free.saturates and "bounds nothing" in free.verdict(1000)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/measured is absent (measured runs are not shipped)")
def test_the_saturating_vllm_log_held_about_56k_tokens_and_the_others_never_queued():
    logs = SHARED / "distserve-opt13b-a100"
    saturated = implied_capacity(read_measured(logs / "vllm-300-3.exp"))
    assert 55_000 < saturated.peak_while_waiting < 57_000
    assert not implied_capacity(read_measured(logs / "vllm-100-1.exp")).saturates


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/measured is absent (measured runs are not shipped)")
def test_validate_sets_the_engines_own_pool_beside_the_scenarios_where_the_bench_recorded_it():
    """LLMServingSim's bench wrote vLLM's 2,588 blocks beside the log; the log alone overstates
    what the 4090 held (it preempted, and a log records no preemption), and the verdict says so."""
    from simbatch.validation.against import validate_against

    log = SHARED / "llmservingsim-vllm0.19" / "RTX4090" / "Llama-3.1-8B" / "vllm" / "requests.jsonl"
    sc = load_scenario("vllm019_llama8b_rtx4090")
    entry = validate_against(sc, [log]).logs[0].errors
    implied = entry["kv_implied"]
    assert implied["engine_tokens"] == 41_408 and implied["used_peak_pct"] > 99
    assert "the engine's own pool is 41,408 tokens" in implied["verdict"]
    assert entry["kv_implied_tokens"] > entry["kv_capacity_tokens"] and "preempted" in implied["verdict"]


@pytest.mark.parametrize("hardware, preset, expected", [
    ("rtx-4090", "vllm-0.19", (2048, 256)),   # under 70 GiB
    ("h100-sxm", "vllm-0.19", (8192, 1024)),  # 70 GiB or more
    ("a100-80gb", "vllm-0.19", (2048, 256)),  # A100s kept the small defaults from PR #17885 on
    ("a100-80gb", "vllm-0.8", (8192, 1024)),  # 0.8.x gave every 70 GiB GPU the large ones
])
def test_a_v1_preset_fills_the_releases_scheduler_defaults_the_policy_leaves_out(hardware, preset, expected):
    from simbatch.scenario.spec import from_dict

    base = {"workload": {"requests": [{"prompt": 10, "output": 3}]}, "model": "llama-3.1-8b",
            "hardware": hardware, "engine": preset}
    sc = from_dict({**base, "policy": {"kind": "chunked_prefill"}})
    assert (sc.policy.params.max_num_batched_tokens, sc.policy.params.max_num_seqs) == expected
    assert sc.data["policy"]["max_num_seqs"] == expected[1]  # in the data: reports show what ran
    given = from_dict({**base, "policy": {"kind": "chunked_prefill", "chunk_size": 512, "max_num_seqs": 32}})
    assert (given.policy.params.max_num_batched_tokens, given.policy.params.max_num_seqs) == (512, 32)
    plain = from_dict({**base, "engine": "none", "policy": {"kind": "chunked_prefill"}})
    assert plain.data["policy"] == {"kind": "chunked_prefill"}
