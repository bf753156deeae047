"""Online control: knobs stay in bounds, runs stay exact and deterministic, laws do what they say."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbatch.api import run
from simbatch.cli import main
from simbatch.engine.simulation import simulate
from simbatch.metrics import request_table
from simbatch.scenario.spec import from_dict, load_scenario

ROOT = Path(__file__).resolve().parents[1]


def scenario(kind: str, control: dict | None, rate: float = 4.0, n: int = 400, seed: int = 0,
             slo: dict | None = None, **policy):
    base = {"continuous": {"max_num_seqs": 64},
            "chunked_prefill": {"max_num_seqs": 64, "chunk_size": 4096, "max_num_batched_tokens": 2048},
            "dynamic": {"max_batch_size": 16, "preferred_batch_sizes": [8], "max_queue_delay_us": 200_000}}
    data = {
        "workload": {"synthetic": {
            "num_requests": n, "arrival": {"kind": "gamma", "rate": rate, "cv": 2.0},
            "prompt": {"kind": "lognormal", "median": 700, "sigma": 0.9, "max": 3000},
            "output": {"kind": "lognormal", "median": 120, "sigma": 0.8, "max": 800}}},
        "model": "llama-2-7b", "hardware": "a100-80gb", "cost_model": {"kind": "roofline"},
        "policy": {"kind": kind, **base[kind], **policy},
        "slo": slo or {"ttft_ms": 2000, "tpot_ms": 50}, "seed": seed,
    }
    if control is not None:
        data["control"] = control
    return from_dict(data)


CONTROLS = {
    "continuous": {"kind": "slo", "interval_s": 0.5, "window_s": 3, "min_value": 4, "max_value": 96},
    "chunked_prefill": {"kind": "slo", "interval_s": 0.5, "window_s": 3, "min_value": 128, "max_value": 3000},
    "dynamic": {"kind": "adaptive_delay", "interval_s": 0.5, "window_s": 3, "max_value": 150_000},
}


@settings(max_examples=12, deadline=None)
@given(kind=st.sampled_from(sorted(CONTROLS)), seed=st.integers(0, 1000), rate=st.sampled_from([1.0, 5.0]))
def test_knobs_stay_in_bounds_and_fast_path_stays_exact(kind, seed, rate):
    sc = scenario(kind, CONTROLS[kind], rate=rate, n=150, seed=seed)
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    rows = fast.log.control_rows
    lo, hi = CONTROLS[kind].get("min_value", 0), CONTROLS[kind]["max_value"]
    assert len(rows) > 1
    assert all(lo <= r["value"] <= hi for r in rows)
    # decisions fall on step boundaries at or after each interval, the same in both engines
    assert rows == slow.log.control_rows
    assert request_table(fast.log, fast.workload).equals(request_table(slow.log, slow.workload))


def test_runs_with_a_controller_are_deterministic():
    sc = scenario("chunked_prefill", CONTROLS["chunked_prefill"])
    a, b = run(sc), run(sc)
    assert a.result.log.control_rows == b.result.log.control_rows
    assert a.requests.equals(b.requests)


def test_slo_controller_brings_an_oversized_budget_inside_the_tpot_target():
    # A 4096-token budget makes every step with a prefill chunk long: TPOT p90 over 50 ms.
    fixed = run(scenario("chunked_prefill", None, rate=5.0, max_num_batched_tokens=4096, n=1500)).summary
    ctl = run(scenario("chunked_prefill", {**CONTROLS["chunked_prefill"], "max_value": 4096},
                       rate=5.0, max_num_batched_tokens=4096, n=1500))
    assert fixed["tpot_ms"]["p90"] > 50
    assert ctl.summary["tpot_ms"]["p90"] < fixed["tpot_ms"]["p90"]
    assert ctl.summary["slo_attainment"] > fixed["slo_attainment"]
    assert ctl.summary["control"]["min"] < 4096 and ctl.summary["control"]["decisions"] > 10


def test_adaptive_delay_is_small_at_low_load_and_large_near_saturation():
    def mean_delay(rate):
        # a window long against one request's service time (~2 s alone), so it sees the idle gaps
        out = run(scenario("dynamic", {**CONTROLS["dynamic"], "window_s": 30}, rate=rate, n=300))
        values = [r["value"] for r in out.result.log.control_rows[1:]]
        return np.mean(values) / CONTROLS["dynamic"]["max_value"]

    assert mean_delay(0.05) < 0.2
    assert mean_delay(8.0) > 0.8


def test_compare_drops_the_controller_for_a_policy_it_cannot_drive():
    sc = scenario("continuous", CONTROLS["continuous"])
    assert "control" not in sc.with_policy("static").data
    assert sc.with_policy("chunked_prefill").data["control"] == CONTROLS["continuous"]
    assert run(sc.with_policy("static")).summary["control"] is None


def test_run_writes_the_trajectory(tmp_path, capsys):
    assert main(["run", str(ROOT / "scenarios" / "slo_control.yaml"), "--set", "workload.synthetic.num_requests=300",
                 "--out", str(tmp_path / "o")]) == 0
    control = pd.read_csv(tmp_path / "o" / "control.csv")
    assert list(control.columns[:5]) == ["time_s", "replica", "knob", "value", "action"]
    assert (control["knob"] == "max_num_batched_tokens").all()
    assert (tmp_path / "o" / "control.png").stat().st_size > 10_000
    assert main(["report", str(tmp_path / "o")]) == 0
    html = (tmp_path / "o" / "report.html").read_text()
    assert "Online control" in html and (tmp_path / "o" / "report_files" / "control-o.png").is_file()


@pytest.mark.parametrize("setting, where", [
    ("control.kind=pid", "control.kind"),
    ("control.min_value=500", "control.min_value"),
    ("control.decrease=1.5", "control.decrease"),
    ("policy.kind=static", "control.kind"),
])
def test_bad_control_settings_are_one_line_errors(setting, where, capsys):
    argv = ["run", str(ROOT / "scenarios" / "slo_control.yaml"), "--set", setting]
    if setting.startswith("control.min"):
        argv += ["--set", "control.max_value=100"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and where in err[0]


def test_shipped_scenario_loads():
    assert load_scenario(ROOT / "scenarios" / "slo_control.yaml").data["control"]["kind"] == "slo"


def test_terminal_summary_names_the_features_a_run_used():
    from simbatch.report.table import feature_lines

    assert feature_lines({"prefix_cache": None, "control": None}) == []
    lines = feature_lines({
        "prefix_cache": {"token_hit_rate": 0.169, "request_hit_rate": 0.999, "tokens_saved": 3363888},
        "control": {"kind": "slo", "knob": "max_num_batched_tokens", "start": 4096, "final": 1280,
                    "mean": 480.6, "decisions": 781},
        "disaggregation": {"prefill": {"replicas": 2, "busy_frac": 0.306}, "decode": {"replicas": 2, "busy_frac": 0.994},
                           "transfer_ms": {"mean": 1.99}, "link": {"name": "nvlink3"}},
    })
    assert lines[0].startswith("prefix cache  16.9 % of prompt tokens hit")
    assert "4,096 -> 1,280" in lines[1]
    assert "2 prefill (30.6 % busy) + 2 decode (99.4 % busy)" in lines[2] and "nvlink3" in lines[2]
