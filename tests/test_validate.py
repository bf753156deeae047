"""``simbatch validate`` end to end on the tiny model on CPU, and its pieces without torch."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from simbatch.cli import main
from simbatch.core.plan import StepPlan
from simbatch.scenario.spec import load_scenario
from simbatch.validation.compare import end_to_end_errors, signed_error, step_kind

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "calibration" / "profiles" / "cpu-tiny-float32-tp1"
SCENARIO = """\
name: validate_test
workload:
  requests:
    - {prompt: 40, output: 6, arrival_s: 0.0}
    - {prompt: 90, output: 4, arrival_s: 0.0}
    - {prompt: 20, output: 9, arrival_s: 0.05}
    - {prompt: 60, output: 3, arrival_s: 0.1}
model: tiny
hardware: a100-80gb
policy: {kind: continuous, max_num_seqs: 4, max_num_batched_tokens: 512}
policies:
  static: {batch_size: 2, max_wait_s: 0.0}
  chunked_prefill: {max_num_seqs: 4, chunk_size: 32}
seed: 0
"""


def write_scenario(tmp_path: Path, text: str = SCENARIO) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return path


def test_step_kinds_and_signed_errors():
    assert step_kind(StepPlan([0, 1], [1, 1], [5, 5], num_decode_slots=2)) == "decode_only"
    assert step_kind(StepPlan([0, 1], [1, 64], [5, 0], num_decode_slots=1)) == "prefill_heavy"
    assert step_kind(StepPlan([0, 1, 2, 3], [1, 1, 1, 2], [5, 5, 5, 0], num_decode_slots=3)) == "mixed"
    assert signed_error(110.0, 100.0) == pytest.approx(0.1)
    assert signed_error(None, 1.0) is None and signed_error(1.0, 0.0) is None
    m = {"ttft_ms": {"median": 100.0, "p99": 200.0}, "output_throughput": 50.0}
    p = {"ttft_ms": {"median": 90.0, "p99": 220.0}, "output_throughput": 60.0}
    e = end_to_end_errors(m, p)
    assert e["ttft_p50_err"] == pytest.approx(-0.1) and e["ttft_p99_err"] == pytest.approx(0.1)
    assert e["throughput_err"] == pytest.approx(0.2) and e["e2el_p50_err"] is None


def test_validate_end_to_end(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    code = main(["validate", str(write_scenario(tmp_path)), "--device", "cpu", "--threads", "1",
                 "--policies", "static,chunked_prefill", "--profile", str(PROFILE), "--noise-repeats", "2",
                 "--out", str(out)])
    assert code == 0
    printed, err = capsys.readouterr()
    assert "static" in printed and "chunked_prefill" in printed
    # progress: each policy numbered, an ETA from the second on
    assert "static (policy 1/2): running 4 requests" in err
    assert re.search(r"chunked_prefill \(policy 2/2, ETA \d+:\d\d\): running 4 requests", err)
    report = json.loads((out / "validation.json").read_text())
    assert set(report["policies"]) == {"static", "chunked_prefill"}
    steps = pd.read_csv(out / "steps.csv")
    for kind, entry in report["policies"].items():
        assert {"step_ape", "ttft_p50_err", "ttft_p99_err", "e2el_p50_err", "e2el_p99_err",
                "throughput_err"} <= set(entry)
        assert entry["step_ape"]["median"] >= 0 and entry["step_ape"]["p90"] >= entry["step_ape"]["median"]
        # the machine-speed probe: the shipped profile predates it, so there is no ratio
        speed = entry["machine_speed"]
        assert speed["probe_ms_calibration"] is None and speed["before_over_calibration"] is None
        measured = json.loads((out / kind / "measured" / "summary.json").read_text())
        predicted = json.loads((out / kind / "predicted" / "summary.json").read_text())
        assert measured["completed"] == predicted["completed"] == 4
        assert measured["cost_model"]["kind"] == "torch" and predicted["cost_model"]["kind"] == "profile"
        # every measured step is paired, and the pairs hold exactly the measured run's tokens
        mine = steps[steps["policy"] == kind]
        measured_steps = pd.read_csv(out / kind / "measured" / "steps.csv")
        assert len(mine) == len(measured_steps) == entry["step_ape"]["steps"]
        assert mine["prefill_tokens"].sum() == measured_steps["prefill_tokens"].sum()
        assert (mine["measured_s"] > 0).all() and (mine["predicted_s"] > 0).all()
    # static pads: its steps compute padded tokens for real
    assert steps.loc[steps["policy"] == "static", "padded_tokens"].sum() > 0
    assert (out / "step_scatter.png").stat().st_size > 0 and (out / "latency_cdfs.png").stat().st_size > 0
    # the noise floor: sampled steps executed again, beside the step errors
    noise = pd.read_csv(out / "noise.csv")
    for kind, entry in report["policies"].items():
        mine = noise[noise["policy"] == kind]
        floor = entry["noise_ape"]
        assert floor["steps"] == mine["step"].nunique() > 0
        assert (mine.groupby("step")["sample"].count() == 3).all()  # the original and 2 replays
        assert floor["median"] == pytest.approx(mine["noise_ape"].median())
        assert entry["step_ape_over_noise"] == pytest.approx(entry["step_ape"]["median"] / floor["median"])
        # the replayed plans are the recorded ones: same tokens as the measured steps they sample
        sampled = steps[(steps["policy"] == kind) & steps["step"].isin(mine["step"])]
        assert len(sampled) == floor["steps"]
    # the shipped profile names its machine; on another one validate says it was measured elsewhere
    machine = report["profile_machine"]
    assert machine["matches"] == (not machine["differences"])
    if not machine["matches"]:
        assert "measured elsewhere" in err


@pytest.mark.parametrize("args, text, message", [
    (["--policies", "greedy"], SCENARIO, "unknown policy"),
    (["--profile", "no/such/dir"], SCENARIO, "no profile at"),
    (["--set", "cluster.replicas=2"], SCENARIO, "one replica"),
    (["--noise-repeats", "-1"], SCENARIO, "--noise-repeats: must be >= 0"),
    ([], SCENARIO.replace("prompt: 90", "prompt: 3000"), "context window"),
], ids=["policy", "profile", "replicas", "noise", "context"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, args, text, message):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    code = main(["validate", str(write_scenario(tmp_path, text)), "--threads", "1", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["scenario.yaml"]


def test_bundled_cpu_scenario_loads():
    scenario = load_scenario(REPO / "scenarios" / "validate_cpu.yaml")
    assert scenario.data["model"] == "tiny"
    assert set(scenario.data["policies"]) == {"static", "dynamic", "continuous", "chunked_prefill"}


def test_simbatch_validate_is_the_api_function():
    import simbatch
    import simbatch.validation
    from simbatch import api, validate

    assert validate is api.validate and simbatch.validate is api.validate  # not the package
    assert callable(validate) and not hasattr(validate, "__path__")
    assert simbatch.validation.format_table.__module__ == "simbatch.validation.report"


def test_a_profile_calibrated_for_a_validation_is_kept_in_its_output_only(tmp_path, monkeypatch, capsys):
    # No profile matches: validate calibrates one in a scratch folder, writes a copy to --out
    # (named in validation.json and the wrote-line) and removes the scratch folder.
    pytest.importorskip("torch")
    import tempfile

    import simbatch.validation.profile as vp

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(vp, "find_profile", lambda model, dtype, here: (None, {}))
    out = tmp_path / "out"
    assert main(["validate", str(write_scenario(tmp_path)), "--device", "cpu", "--threads", "1",
                 "--policies", "continuous", "--noise-repeats", "0", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "profile/ (calibrated here" in printed
    assert json.loads((out / "validation.json").read_text())["profile"] == "profile"
    assert (out / "profile" / "profile.yaml").is_file()
    assert not any(p.name.startswith(vp.SCRATCH_PREFIX) for p in scratch.iterdir())
