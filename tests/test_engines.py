"""The serving-engine model (scenario ``engine:``) and ``calibrate --from-log``, which fits it."""

from __future__ import annotations

from pathlib import Path

import pytest

from simbatch.policies import parse_policy
from simbatch import load_scenario, run
from simbatch.cli import main
from simbatch.costmodel import build_cost_model
from simbatch.engine.setup import kv_blocks_per_replica
from simbatch.catalog.servers import PRESETS, parse_engine, profiling_peak_bytes
from simbatch.errors import SimbatchError
from simbatch.measured import read_measured
from simbatch.measured.fit_engine import fit_engine, measured_metrics, predicted_metrics
from simbatch.catalog.models import get_model
from simbatch.core.plan import StepPlan

COLUMNS = {"arrival": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens",
           "first_token": "first_token_s", "finish": "finish_s"}
# A small, loaded replica: steps of many sequences, so the per-sequence term shows.
SMALL = ["workload.synthetic.num_requests=120", "workload.synthetic.prompt.median=300",
         "workload.synthetic.output.median=60"]


def test_a_preset_sets_every_term_and_fields_override_it():
    e = parse_engine({"preset": "vllm-0.2-ray", "per_seq_s": 0.002}, "engine")
    assert e.per_seq_s == 0.002
    assert e.step_s == PRESETS["vllm-0.2-ray"]["step_s"] and e.profile_activations
    assert parse_engine("distserve", "engine").preset == "distserve"
    none = parse_engine(None, "engine")
    assert not none.has_overhead and none.overhead_params() == {}
    _, params = parse_policy({"kind": "continuous", "max_num_batched_tokens": 16384})
    assert none.reserved_bytes(get_model("opt-13b"), 1, params, 80 * 2**30) == 0


@pytest.mark.parametrize("spec, where, cause", [
    ({"preset": "tgi"}, "engine.preset", "unknown engine 'tgi'"),
    ({"step": 0.001}, "engine.step", "unknown field"),
    ({"per_seq_s": -1}, "engine.per_seq_s", ">= 0"),
    ({"request_s": float("nan")}, "engine.request_s", "finite"),
    ({"profile_activations": "yes"}, "engine.profile_activations", "true or false"),
    (3, "engine", "preset name or a mapping"),
])
def test_bad_engine_sections_name_the_field(spec, where, cause):
    with pytest.raises(SimbatchError) as err:
        parse_engine(spec, "engine")
    assert err.value.where == where and cause in err.value.cause


def test_overhead_terms_price_every_step():
    """overhead = step_s + per_seq_s x sequences + per_token_s x tokens, replacing the cost model's own."""
    terms = {"step_overhead_s": 0.004, "per_seq_overhead_s": 5e-4, "per_token_overhead_s": 2e-6}
    plan = StepPlan(request_ids=[0, 1, 2], num_new_tokens=[1, 1, 300], num_context_tokens=[50, 70, 0],
                    num_decode_slots=2)
    for kind in ("roofline", "profile"):
        cost = build_cost_model({"kind": kind}, "llama-2-7b", "a100-80gb", overhead=terms)
        assert cost.step_cost(plan).breakdown["overhead"] == pytest.approx(0.004 + 3 * 5e-4 + 302 * 2e-6)
    with pytest.raises(SimbatchError, match="set by the serving engine"):
        build_cost_model({"kind": "roofline", "step_overhead_s": 0.001}, "llama-2-7b", "a100-80gb",
                         overhead=terms)


def test_the_profiling_pass_and_non_torch_memory_shrink_the_kv_cache():
    base = load_scenario("vllm_opt13b_a100", ["engine.preset=none"])
    held = load_scenario("vllm_opt13b_a100")
    model = get_model("opt-13b")
    gpu = __import__("simbatch.catalog.hardware", fromlist=["get_gpu"]).get_gpu("a100-80gb")
    before, after = kv_blocks_per_replica(base, model, gpu), kv_blocks_per_replica(held, model, gpu)
    peak = profiling_peak_bytes(model, 1, 16384, 1024)
    # OPT-13B at 16,384 tokens: the layer's widest moment (residual, hidden, fc1 and its ReLU) wins.
    assert peak == 16384 * 2 * (2 * 5120 + 20480 + 20480)
    expected = (peak + held.engine.non_torch_gib * 2**30) / (16 * model.kv_bytes_per_token)
    assert before - after == pytest.approx(expected, abs=1)
    # A smaller step budget profiles a smaller pass: more KV.
    small = load_scenario("vllm_opt13b_a100", ["policy.max_num_batched_tokens=4096"])
    assert kv_blocks_per_replica(small, model, gpu) > after


def test_front_end_latency_adds_to_every_latency_and_to_no_step():
    over = ["workload.synthetic.num_requests=1"]
    plain = run(load_scenario("vllm_opt13b_a100", over + ["engine.request_s=0"])).requests.iloc[0]
    slow = run(load_scenario("vllm_opt13b_a100", over + ["engine.request_s=0.03"])).requests.iloc[0]
    assert slow.ttft_ms - plain.ttft_ms == pytest.approx(30.0)
    assert slow.e2el_ms - plain.e2el_ms == pytest.approx(30.0)
    assert slow.tpot_ms == pytest.approx(plain.tpot_ms)


def own_log(scenario, path: Path):
    run(scenario).requests.to_csv(path, index=False)
    return read_measured(path, columns=COLUMNS)


def test_calibrate_from_log_recovers_known_overhead_terms(tmp_path):
    """Logs simulated with known terms at two loads (one load cannot tell a per-step cost from a
    per-sequence one), fitted from the search's own fixed starting points, give the terms back."""
    truth = {"step_s": 0.003, "per_seq_s": 4e-4, "request_s": 0.02}
    sets = [f"engine.{k}={v}" for k, v in truth.items()]
    logs = [own_log(load_scenario("chat", SMALL + sets + [f"workload.synthetic.arrival.rate={rate}"]),
                    tmp_path / f"log{rate}.csv") for rate in (2, 10)]
    start = load_scenario("chat", SMALL)
    fit = fit_engine(start, logs, terms=tuple(truth))
    for key, value in truth.items():
        assert fit.terms[key] == pytest.approx(value, rel=0.15), key
    for log in logs:
        m, p = measured_metrics(log), predicted_metrics(start, log, fit.terms)
        assert all(abs(p[k] / m[k] - 1) < 0.07 for k in m)  # the search stops near, not at, the truth


def test_calibrate_from_log_command(tmp_path, capsys):
    """A requests.csv simbatch wrote reads without a column mapping; the fitted section is written."""
    log = tmp_path / "log.csv"
    run(load_scenario("chat", SMALL + ["engine.step_s=0.002"])).requests.to_csv(log, index=False)
    out = tmp_path / "engine.yaml"
    code = main(["calibrate", "--from-log", str(log), "--check", str(log), "--scenario", "chat",
                 "--terms", "step_s", *sum((["--set", s] for s in SMALL), []), "--out", str(out)])
    assert code == 0
    assert "engine:\n" in out.read_text() and "step_s: 0.002" in out.read_text()
    printed = capsys.readouterr().out
    assert "measured / predicted" in printed and " fit " in printed and " check " in printed


@pytest.mark.parametrize("extra, cause", [
    (["--scenario", "chat", "--terms", "per_request_s"], "unknown term"),
    ([], "needs --scenario"),
    (["--scenario", "chat", "--out", "."], "is a folder"),
])
def test_calibrate_from_log_bad_arguments(tmp_path, capsys, extra, cause):
    log = tmp_path / "log.csv"
    log.write_text("x\n1\n")
    assert main(["calibrate", "--from-log", str(log), *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and cause in err


def test_calibrate_from_log_bad_log_is_one_line(tmp_path, capsys):
    log = tmp_path / "log.csv"
    log.write_text("a,b\n1,2\n")
    assert main(["calibrate", "--from-log", str(log), "--scenario", "chat"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "log.csv" in err


def test_the_summary_names_the_engine_only_when_one_is_modelled():
    over = ["workload.synthetic.num_requests=5"]
    assert run(load_scenario("chat", over)).summary["engine"] is None
    engine = run(load_scenario("vllm_opt13b_a100", over)).summary["engine"]
    assert engine["preset"] == "vllm-0.2-ray" and engine["profile_activations"] is True


def test_distserve_holds_back_its_weights_and_one_percent_of_memory():
    # distserve/worker.py: blocks = (total x utilization - (total x 0.01 + weights)) // block bytes;
    # no profiling pass, so the step budget does not change the pool.
    model = get_model("opt-13b")
    gpu = __import__("simbatch.catalog.hardware", fromlist=["get_gpu"]).get_gpu("a100-80gb")
    scenario = load_scenario("distserve_opt13b_a100")
    assert scenario.engine.reserve_fraction == 0.01 and not scenario.engine.profile_activations
    blocks = kv_blocks_per_replica(scenario, model, gpu, tensor_parallel=1)
    expected = (gpu.memory_bytes * (0.95 - 0.01) - model.weight_bytes) // (16 * model.kv_bytes_per_token)
    assert blocks == expected
    wider = load_scenario("distserve_opt13b_a100", ["policy.max_num_batched_tokens=4096"])
    assert kv_blocks_per_replica(wider, model, gpu, tensor_parallel=1) == blocks
    with pytest.raises(SimbatchError, match="below 1"):
        load_scenario("distserve_opt13b_a100", ["engine.reserve_fraction=1.5"])
