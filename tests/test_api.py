"""The Python API on the bundled scenarios: they load, run, and runs are reproducible."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from simbatch.api import run
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def small(path: Path) -> list[str]:
    """Overrides that shrink a scenario to a quick run."""
    workload = yaml.safe_load(path.read_text())["workload"]
    if "rate_curve" in workload:  # the curve decides the count: cut its first requests
        return ["workload.num_requests=150"]
    if "synthetic" in workload:
        return ["workload.synthetic.num_requests=150"]
    if "trace" in workload:
        return ["workload.num_requests=150"]
    return []


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_bundled_scenario_runs_under_its_policies(path):
    data = yaml.safe_load(path.read_text())
    trace = data["workload"].get("trace")
    if trace and not (path.parent / trace).exists():
        pytest.skip(f"{trace} not present: needs ../shared beside the repo")
    sc = load_scenario(path, small(path))
    for kind in data.get("policies") or [data["policy"]["kind"]]:
        out = run(sc.with_policy(kind))
        assert out.summary["completed"] == out.summary["num_requests"] > 0, (path.stem, kind, out.messages)


def test_same_scenario_and_seed_same_run():
    args = ["workload.synthetic.num_requests=200"]
    a = run(load_scenario(ROOT / "scenarios" / "chat.yaml", args))
    b = run(load_scenario(ROOT / "scenarios" / "chat.yaml", args))
    c = run(load_scenario(ROOT / "scenarios" / "chat.yaml", args + ["seed=1"]))
    assert a.summary == b.summary
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    assert not np.array_equal(a.requests["prompt_tokens"], c.requests["prompt_tokens"])


def test_classroom_static_batch_idles_the_short_requests_slot():
    out = run(load_scenario(ROOT / "scenarios" / "classroom.yaml"))
    steps = out.steps
    # first batch (128/32 with 256/64): 32 decode steps carry one finished slot;
    # second batch (512/256 with 64/16): 240 more
    assert int((steps["padded_tokens"] == 1).sum()) == 32 + 240
    cont = run(load_scenario(ROOT / "scenarios" / "classroom.yaml", ["policy.kind=continuous",
                                                                     "policy.max_num_seqs=2"]))
    assert cont.summary["padding_waste_frac"] == 0
    assert cont.summary["duration_s"] < out.summary["duration_s"]


def test_one_static_batch_uses_the_share_of_its_slots_the_outputs_fill():
    """The classic picture: a static batch computes every slot until its longest request
    is done, so it uses sum(outputs) / (batch x longest output) of them (the prefill step
    emits each request's first token with every slot live, the other steps decode)."""
    out = run(load_scenario(ROOT / "scenarios" / "one_batch.yaml"))
    outputs = [32, 64, 256, 16]
    assert out.summary["slot_use_frac"] == pytest.approx(sum(outputs) / (4 * max(outputs)), rel=1e-12)
    assert out.summary["slot_use_frac"] < 0.36
    cont = run(load_scenario(ROOT / "scenarios" / "one_batch.yaml", ["policy.kind=continuous"]))
    assert cont.summary["slot_use_frac"] == 1.0  # iteration-level: no padding rows


def test_bundled_scenarios_load_by_name_and_the_folder_is_public(tmp_path, monkeypatch):
    import simbatch

    folder = simbatch.scenarios_dir()
    assert (folder / "chat.yaml").is_file()
    assert simbatch.load_scenario("chat").name == "chat"
    # a file of that name in the working directory is not shadowed (only bare names resolve)
    monkeypatch.chdir(tmp_path)
    assert simbatch.load_scenario("classroom").source.endswith("classroom.yaml")


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_bundled_request_fits_its_models_window(path):
    """A bundled scenario never relies on requests its model cannot hold: they are refused under
    every policy (issue 34 §8), and prefix_cache / mooncake_conv sent 32k-token Mooncake requests
    to Llama-3-70B's 8k window (896 of 1,750 refused) until they named Llama-3.1-70B."""
    try:
        sc = load_scenario(path)
        workload = sc.build_workload()
    except SimbatchError as exc:
        if "trace file not found" in str(exc):
            pytest.skip(f"{path.name} replays a trace from ../shared, which is absent")
        raise
    beyond = (workload.prompt_tokens + workload.output_tokens) > sc.model.max_context
    assert not beyond.any(), f"{int(beyond.sum())} of {len(workload)} beyond {sc.model.max_context:,} tokens"
