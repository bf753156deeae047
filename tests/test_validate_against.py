"""``simbatch validate SCENARIO --against LOG...``: replaying measured runs and reporting the errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simbatch import load_scenario, run
from simbatch.cli import main
from simbatch.errors import SimbatchError
from simbatch.validation.against import ENTRY_KEYS, ERROR_KEYS, validate_against
from simbatch.validation.against_report import format_against_table, vs_rate_series, write_against

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT.parent / "shared" / "measured" / "distserve-opt13b-a100"
needs_measured = pytest.mark.skipif(not MEASURED.is_dir(),
                                    reason=f"measured logs not present at {MEASURED} (data kept outside the project)")
# The generic reader's mapping of simbatch's own requests.csv columns.
COLUMNS = {"arrival": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens",
           "first_token": "first_token_s", "finish": "finish_s"}
SMALL = ["workload.synthetic.num_requests=150"]
# vLLM (v0) serving OPT-13B on one A100-80GB as in DistServe's runs (README of the data).
VLLM_OPT13B = """\
name: vllm-opt13b
workload: {synthetic: {num_requests: 4, arrival: {kind: poisson, rate: 1}, prompt: {kind: fixed, value: 8},
           output: {kind: fixed, value: 8}}}
model: opt-13b
hardware: a100-80gb
policy: {kind: continuous, max_num_seqs: 1024, max_num_batched_tokens: 16384}
kv_cache: {block_size: 16, gpu_memory_utilization: 0.95}
slo: {ttft_ms: 250, tpot_ms: 100}
"""


def own_log(scenario, path: Path) -> Path:
    """Simulate ``scenario`` and write its requests as a measured log (simbatch's requests.csv columns)."""
    run(scenario).requests.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("name, overrides", [
    # Targets near the medians, so some requests attain and some do not (E2EL too: every kind of target).
    ("chat", SMALL + ["slo.ttft_ms=60", "slo.tpot_ms=18", "slo.e2el_ms=20000"]),  # colocated, one replica
    ("disaggregated", SMALL + ["workload.synthetic.arrival.rate=6", "slo.tpot_ms=15"]),  # 2 prefill + 2 decode
])
def test_own_log_gives_zero_errors(tmp_path, name, overrides):
    scenario = load_scenario(name, overrides)
    assert scenario.is_disaggregated == (name == "disaggregated")
    result = validate_against(scenario, [own_log(scenario, tmp_path / "own.csv")], columns=COLUMNS)
    (v,) = result.logs
    assert list(v.errors) == list(ENTRY_KEYS)
    for key in ERROR_KEYS:
        assert v.errors[key] == pytest.approx(0.0, abs=1e-9), key
    assert v.errors["attainment_measured"] == v.errors["attainment_predicted"]
    assert v.errors["inflight_tokens_p99_measured"] == pytest.approx(v.errors["inflight_tokens_p99_predicted"])
    assert v.errors["inflight_tokens_p99_measured"] <= v.errors["kv_capacity_tokens"]
    assert 0 < v.errors["attainment_measured"] < 1  # a real test of the SLO, not all-or-nothing
    assert v.errors["num_requests"] == len(v.pairs) == 150
    for col in ("ttft_ms", "tpot_ms", "e2el_ms"):
        m, p = v.pairs[f"{col}_measured"].to_numpy(), v.pairs[f"{col}_predicted"].to_numpy()
        assert np.allclose(m, p, rtol=1e-9, atol=1e-9, equal_nan=True), col


def test_attainment_matches_the_summary(tmp_path):
    scenario = load_scenario("chat", SMALL)
    out = run(scenario)
    out.requests.to_csv(tmp_path / "own.csv", index=False)
    (v,) = validate_against(scenario, [tmp_path / "own.csv"], columns=COLUMNS).logs
    assert v.errors["attainment_predicted"] == pytest.approx(out.summary["slo_attainment"], abs=1e-12)
    assert v.errors["ttft_p90_ms_predicted"] == pytest.approx(out.summary["ttft_ms"]["p90"], rel=1e-12)


@needs_measured
def test_measured_logs_command_writes_every_file(tmp_path):
    scenario_path = tmp_path / "vllm.yaml"
    scenario_path.write_text(VLLM_OPT13B)
    logs = [str(MEASURED / "vllm-100-1.exp"), str(MEASURED / "vllm-300-3.exp")]
    out = tmp_path / "out"
    assert main(["validate", str(scenario_path), "--against", *logs, "--out", str(out)]) == 0
    doc = json.loads((out / "validation.json").read_text())
    assert {"scenario", "cost_model", "against"} <= set(doc)
    assert [Path(e["log"]).name for e in doc["against"]] == ["vllm-100-1.exp", "vllm-300-3.exp"]
    for entry in doc["against"]:
        assert list(entry) == list(ENTRY_KEYS)
    assert doc["against"][0]["num_requests"] == 100
    assert doc["against"][0]["attainment_measured"] == pytest.approx(0.86)  # the data README's figure
    # vLLM's KV cache saturates at 3 req/s: its in-flight tokens plateau below what vLLM's sizing rule
    # gives it (about 66k tokens), far above the 1 req/s run's.
    low, high = (e["inflight_tokens_p99_measured"] for e in doc["against"])
    assert 10_000 < low < 15_000 and 50_000 < high < doc["against"][1]["kv_capacity_tokens"]
    # Two logs: each one's load lies outside the other's, so neither speed is compared (None).
    assert [e["steps_vs_other_logs"] for e in doc["against"]] == [None, None]
    for name in ("vllm-100-1", "vllm-300-3"):
        assert (out / "pairs" / f"{name}.csv").stat().st_size > 0
        assert (out / "cdfs" / f"{name}.png").stat().st_size > 0
    assert (out / "vs_rate.png").stat().st_size > 0


@needs_measured
def test_disaggregated_scenario_against_distserve_logs(tmp_path):
    # DistServe's layout: one prefill instance at TP2, one decode instance at TP1.
    scenario_path = tmp_path / "distserve.yaml"
    scenario_path.write_text(VLLM_OPT13B + "disaggregation: {prefill: {replicas: 1, tensor_parallel: 2}, "
                                           "decode: {replicas: 1}, link: nvlink}\n")
    scenario = load_scenario(scenario_path)
    result = validate_against(scenario, [MEASURED / "distserve-c21d11-300-3.exp"])
    (v,) = result.logs
    assert v.errors["num_requests"] == 300 and v.predicted.summary["completed"] == 300
    assert "disaggregation" in v.predicted.summary
    assert "distserve-c21d11-300-3" in format_against_table(result)
    write_against(tmp_path / "out", result)
    assert not (tmp_path / "out" / "vs_rate.png").exists()  # one log: no rate plot


def test_cli_exit_codes_and_nothing_written_on_error(tmp_path, capsys):
    scenario = load_scenario("chat", SMALL)
    log = own_log(scenario, tmp_path / "own.csv")
    cols = ",".join(f"{k}={v}" for k, v in COLUMNS.items())
    base = ["validate", "chat", *[a for o in SMALL for a in ("--set", o)], "--columns", cols]
    out = tmp_path / "out"
    assert main([*base, "--against", str(log), "--out", str(out)]) == 0
    assert (out / "validation.json").is_file() and (out / "pairs" / "own.csv").is_file()
    capsys.readouterr()

    # --out is an existing file: one line, exit 2, nothing simulated or written.
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me")
    assert main([*base, "--against", str(log), "--out", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "not a folder" in err
    assert blocker.read_text() == "keep me"

    # A bad log: the reader's one-line error, exit 2, nothing written.
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens,first_token_s,finish_s\n0.0,10,5,oops,1.0\n")
    out2 = tmp_path / "out2"
    assert main([*base, "--against", str(bad), "--out", str(out2)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simbatch: error:") and err.count("\n") == 1 and "bad.csv" in err
    assert not out2.exists()
    assert main([*base, "--against", str(tmp_path / "missing.csv")]) == 2
    assert "file not found" in capsys.readouterr().err

    # Torch-mode options have nothing to act on with --against.
    assert main([*base, "--against", str(log), "--device", "cuda"]) == 2
    assert "--device" in capsys.readouterr().err


def test_cli_subprocess_prints_the_table(tmp_path):
    scenario = load_scenario("chat", SMALL)
    log = own_log(scenario, tmp_path / "own.csv")
    cols = ",".join(f"{k}={v}" for k, v in COLUMNS.items())
    done = subprocess.run([sys.executable, "-m", "simbatch", "validate", "chat", "--set", SMALL[0],
                           "--against", str(log), "--columns", cols],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("chat: llama-2-7b on a100-80gb (colocated, continuous)")
    assert lines[1].split()[:3] == ["log", "req/s", "n"] and lines[3].startswith("own ")
    assert "+0.0" in lines[3]


def test_request_larger_than_kv_cache_is_one_line_error(tmp_path, capsys):
    # 40 GB of a 80 GB GPU left for KV after Llama-2-7B's weights, at most ~80k tokens:
    # a 500k-token request can never fit one replica.
    log = tmp_path / "huge.csv"
    log.write_text("arrival_s,prompt_tokens,output_tokens,first_token_s,finish_s\n"
                   "0.0,100,10,0.05,0.5\n1.0,500000,10,3.0,4.0\n")
    # a window that holds it (Llama-2's 4,096 is the next test's case), so the KV check speaks
    wide = [*SMALL, "model={base: llama-2-7b, max_context: 1000000}"]
    scenario = load_scenario("chat", wide)
    with pytest.raises(SimbatchError, match="huge.csv.*cannot replay.*KV blocks"):
        validate_against(scenario, [log], columns=COLUMNS)
    cols = ",".join(f"{k}={v}" for k, v in COLUMNS.items())
    assert main(["validate", "chat", "--against", str(log), "--columns", cols, "--out", str(tmp_path / "o"),
                 *[w for item in wide for w in ("--set", item)]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "KV blocks" in err
    assert not (tmp_path / "o").exists()


def test_a_logged_request_past_the_models_window_is_one_line_error(tmp_path, capsys):
    """The server held a request the scenario's model could not (a replay would refuse it and
    compare different request sets; it divided by zero when none was left): one line naming it."""
    log = tmp_path / "long.csv"
    log.write_text("arrival_s,prompt_tokens,output_tokens,first_token_s,finish_s\n"
                   "0.0,100,10,0.05,0.5\n1.0,5000,10,3.0,4.0\n")
    with pytest.raises(SimbatchError, match=r"long.csv: request 1 \(prompt 5,000 \+ output 10 tokens\) is "
                                            r"longer than llama-2-7b's context window \(4,096 tokens"):
        validate_against(load_scenario("chat", SMALL), [log], columns=COLUMNS)
    cols = ",".join(f"{k}={v}" for k, v in COLUMNS.items())
    assert main(["validate", "chat", "--against", str(log), "--columns", cols, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "context window" in err and not (tmp_path / "o").exists()


def test_rows_and_rate_plot_points_sorted_by_rate(tmp_path):
    # Given fast before slow, and named so that name order is not rate order: the table's rows and
    # vs_rate.png's points go by offered rate; TTFT p50/p90 is a panel of the plot.
    logs = []
    for name, rate in (("a-fast", 8), ("b-slow", 2), ("c-mid", 4)):
        scenario = load_scenario("chat", ["workload.synthetic.num_requests=60",
                                          f"workload.synthetic.arrival.rate={rate}"])
        logs.append(own_log(scenario, tmp_path / f"{name}.csv"))
    result = validate_against(load_scenario("chat", SMALL), logs, columns=COLUMNS)
    rows = format_against_table(result).splitlines()[2:]
    assert [r.split()[0] for r in rows] == ["b-slow", "c-mid", "a-fast"]
    rates = [float(r.split()[1]) for r in rows]
    assert rates == sorted(rates)
    panels = dict(vs_rate_series(result))
    assert list(panels) == ["SLO attainment", "TTFT (ms)", "TPOT (ms)"]
    ttft = {legend: (x, y) for legend, x, y in panels["TTFT (ms)"]}
    assert list(ttft) == ["measured p50", "predicted p50", "measured p90", "predicted p90"]
    x, y = ttft["measured p90"]
    assert x == sorted(x) and len(x) == 3
    by_name = {v.name: v.errors for v in result.logs}
    assert y == [by_name[n]["ttft_p90_ms_measured"] for n in ("b-slow", "c-mid", "a-fast")]
    write_against(tmp_path / "out", result)
    assert (tmp_path / "out" / "vs_rate.png").stat().st_size > 0
