"""A policy written in one file, outside the package: registered, run, and right on the fast path.

The example is docs/examples/tgi_policy.py (TGI's router rule), the file docs/policies.md's
"Writing a policy" walks through.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from simbatch.cli import main
from simbatch.engine.simulation import simulate
from simbatch.errors import SimbatchError
from simbatch.metrics import request_table
from simbatch.core.plan import StepPlan
from simbatch.policies import POLICIES, load_policy_file, register_policy
from simbatch.policies import registry
from simbatch.policies.continuous import ContinuousParams, ContinuousPolicy
from simbatch.policies.iteration import IterationPolicy
from simbatch.scenario.spec import from_dict
from simbatch.core.sequence import RUNNING

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tgi_policy.py"


@pytest.fixture(autouse=True)
def clean_registry():
    """Each test starts from the built-in policies and leaves them so."""
    saved, loaded = dict(POLICIES), dict(registry._LOADED)
    yield
    POLICIES.clear()
    POLICIES.update(saved)
    registry._LOADED.clear()
    registry._LOADED.update(loaded)


def scenario(policy: dict, rate: float = 20.0, seed: int = 1, utilization: float = 0.36) -> object:
    return from_dict({
        "workload": {"synthetic": {
            "num_requests": 150, "arrival": {"kind": "gamma", "rate": rate, "cv": 2.0},
            "prompt": {"kind": "lognormal", "median": 300, "sigma": 0.8, "max": 1500},
            "output": {"kind": "lognormal", "median": 60, "sigma": 0.9, "max": 400}}},
        "model": "llama-2-7b", "hardware": "a100-40gb", "cost_model": {"kind": "roofline"},
        # by default a small cache, so that runs preempt too
        "kv_cache": {"gpu_memory_utilization": utilization},
        "policy": policy, "seed": seed,
    })


def same_run(a, b) -> None:
    ta, tb = a.log.step_table(), b.log.step_table()
    for col in ta:
        assert np.array_equal(ta[col], tb[col]), col
    assert request_table(a.log, a.workload).equals(request_table(b.log, b.workload))


def count_schedules(cls, monkeypatch) -> list:
    calls = []
    original = cls.schedule
    monkeypatch.setattr(cls, "schedule", lambda self, now: calls.append(now) or original(self, now))
    return calls


class PlainPolicy(IterationPolicy):
    """The issue's case: an iteration-level policy written the obvious way (per-step API only).
    Admits whole prompts only into an empty or half-empty batch, decodes otherwise."""

    kind = "plain_half_refill"
    Params = ContinuousParams

    def schedule(self, now):
        decodes = []
        for seq in list(self.running):
            if seq.status == RUNNING and self.may_grow(seq, 1):
                decodes.append(seq)
        prefills = []
        if len(self.running) <= self.params.max_num_seqs // 2:
            prefills = [s for s, _ in self.admit_queue(self.params.max_num_batched_tokens, now)]
        slots = decodes + prefills
        if not slots:
            return None
        return StepPlan(request_ids=[s.id for s in slots],
                        num_new_tokens=[1] * len(decodes) + [s.num_remaining for s in prefills],
                        num_context_tokens=[s.num_computed for s in slots], num_decode_slots=len(decodes))

    def admission_tokens(self, seq, hit, budget):
        remaining = seq.num_tokens - hit
        return remaining if remaining <= budget else 0


def test_a_policy_with_only_the_per_step_api_is_right_under_the_default_fast_path(monkeypatch):
    register_policy(PlainPolicy)
    sc = scenario({"kind": "plain_half_refill", "max_num_seqs": 32})
    calls = count_schedules(PlainPolicy, monkeypatch)
    fast = simulate(sc)  # the default: fast_forward on
    steps = len(fast.log.step_table()["start_s"])
    assert len(calls) >= steps  # asked at every step: nothing restated its rules
    same_run(fast, simulate(sc, fast_forward=False))
    assert np.isfinite(fast.log.finish_s).all()


def test_fast_path_is_declared_per_class_never_inherited():
    class Renamed(ContinuousPolicy):
        kind = "renamed"

    class Vouched(ContinuousPolicy):
        kind = "vouched"
        fast_path = True

    assert ContinuousPolicy.fast_path and Vouched.fast_path
    assert not Renamed.fast_path and not PlainPolicy.fast_path
    assert all(POLICIES[k].fast_path for k in ("static", "dynamic", "continuous", "chunked_prefill"))


def test_example_file_registers_its_policy_once():
    (cls,) = load_policy_file(EXAMPLE)
    assert cls.kind == "tgi" and POLICIES["tgi"] is cls
    assert load_policy_file(str(EXAMPLE)) == [cls]  # the same file again: nothing new
    assert str(EXAMPLE.resolve()) in registry.loaded_files()


def test_example_policy_matches_the_step_by_step_engine_and_is_asked_every_step(monkeypatch):
    (cls,) = load_policy_file(EXAMPLE)
    sc = scenario({"kind": "tgi", "max_num_seqs": 48})
    calls = count_schedules(cls, monkeypatch)
    fast = simulate(sc)
    assert len(calls) >= len(fast.log.step_table()["start_s"])
    same_run(fast, simulate(sc, fast_forward=False))


def test_example_policy_without_its_rule_is_continuous_batching_exactly():
    # waiting_served_ratio 0: the minimum batch is 0, so it admits whenever vLLM v0 would.
    load_policy_file(EXAMPLE)
    for rate in (2.0, 20.0):
        tgi = simulate(scenario({"kind": "tgi", "waiting_served_ratio": 0.0, "max_num_batched_tokens": 8192}, rate))
        same_run(tgi, simulate(scenario({"kind": "continuous", "max_num_batched_tokens": 8192}, rate)))


def test_example_policy_admits_in_bursts_under_load():
    # With room in KV memory (where memory binds, both admit whatever fits as it frees).
    load_policy_file(EXAMPLE)
    prefill_steps = {}
    for kind in ("continuous", "tgi"):
        sc = scenario({"kind": kind, "max_num_seqs": 48, "max_num_batched_tokens": 4096}, utilization=0.9)
        t = simulate(sc).log.step_table()
        prefill = t["prefill_tokens"] > 0
        prefill_steps[kind] = (int(prefill.sum()), float(t["prefill_tokens"][prefill].mean()))
    # fewer interruptions of the decodes, each prefilling more requests' prompts
    assert prefill_steps["tgi"][0] < 0.5 * prefill_steps["continuous"][0]
    assert prefill_steps["tgi"][1] > 1.5 * prefill_steps["continuous"][1]


def test_cli_runs_a_policy_from_a_file(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["run", "classroom", "--policy-file", str(EXAMPLE), "--set", "policy.kind=tgi",
            "--set", "policy.max_waiting_tokens=5", "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"]["kind"] == "tgi" and summary["policy"]["max_waiting_tokens"] == 5
    assert summary["completed"] == 4


def test_compare_runs_a_policy_from_a_file_in_worker_processes(tmp_path):
    argv = ["compare", "classroom", "--policy-file", str(EXAMPLE), "--policies", "continuous,tgi",
            "--jobs", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert (tmp_path / "tgi" / "summary.json").exists()


@pytest.mark.parametrize("source, where, cause", [
    (None, "missing.py", "policy file not found"),
    ("x = (\n", "bad.py:1", "SyntaxError"),
    ("import math\nraise ValueError('boom')\n", "bad.py:2", "ValueError: boom"),
    ("X = 1\n", "bad.py", "defines no policy class"),
    ("from simbatch.policies.continuous import ContinuousPolicy\n"
     "class C(ContinuousPolicy):\n    kind = 'continuous'\n", "policy class 'C'", "is a built-in policy"),
    ("from simbatch.policies.continuous import ContinuousPolicy\n"
     "class C(ContinuousPolicy):\n    kind = 'my policy'\n", "policy class 'C'", "a Python identifier"),
    ("from simbatch.policies.base import Policy\n"
     "class C(Policy):\n    kind = 'c'\n", "policy class 'C'", "needs a `Params` dataclass"),
])
def test_bad_policy_files_are_one_line_errors(tmp_path, capsys, source, where, cause):
    path = tmp_path / ("missing.py" if source is None else "bad.py")
    if source is not None:
        path.write_text(source)
    out = tmp_path / "o"
    assert main(["run", "classroom", "--policy-file", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and where in err and cause in err, err
    assert not out.exists()
    with pytest.raises(SimbatchError):
        load_policy_file(path)


FALSE_PROMISE = '''
from simbatch.policies.continuous import ContinuousPolicy


class FalsePromise(ContinuousPolicy):
    """Admits with the whole budget but tells the steady check a quarter of it."""

    kind = "false_promise"
    fast_path = True

    def prefill_room(self):
        return self.params.max_num_batched_tokens // 4

    def schedule(self, now):
        prefills = self.admit_prefills(self.params.max_num_batched_tokens, now)
        return self.plan([] if prefills else self.grow_decodes(), prefills)
'''


def test_check_fast_path_passes_a_kept_promise_and_catches_a_broken_one(tmp_path, capsys):
    base = ["run", "chat", "--set", "workload.synthetic.num_requests=300", "--check-fast-path"]
    assert main(base) == 0
    assert "fast path: identical" in capsys.readouterr().out
    path = tmp_path / "false_promise.py"
    path.write_text(FALSE_PROMISE)
    with pytest.raises(SystemExit) as exc:
        main(base + ["--policy-file", str(path), "--set", "policy.kind=false_promise"])
    assert exc.value.code == 1
    assert "fast path: DIFFERS from the step-by-step engine" in capsys.readouterr().err


def test_example_policy_is_driven_by_the_slo_controller_as_continuous_batching_is():
    """Capabilities follow the class (issue 34): the TGI example, a subclass of continuous
    batching, was refused by the SLO controller, which accepted `continuous` by name. It now
    inherits continuous batching's knob (max_num_seqs) and the controller turns it."""
    (cls,) = load_policy_file(EXAMPLE)
    data = {**scenario({"kind": "tgi", "max_num_seqs": 128}).data,
            "slo": {"ttft_ms": 2000, "tpot_ms": 20},
            "control": {"kind": "slo", "interval_s": 0.5, "window_s": 2.0, "min_value": 8, "max_value": 128}}
    sc = from_dict(data)
    assert sc.control is not None and sc.policy.cls is cls
    log = simulate(sc).log
    assert {row["knob"] for row in log.control_rows} == {"max_num_seqs"}
    assert min(row["value"] for row in log.control_rows) < 128  # the tight TPOT target cut the cap
    assert {"decrease", "increase"} <= {row["action"] for row in log.control_rows}
    assert not [m for m in log.messages if "cannot drive" in m]


def test_example_policy_verifies_speculative_drafts():
    """Speculative decoding refused every kind but `continuous` and `chunked_prefill` by name; the
    TGI example is iteration-level by class, so its decode steps verify drafts."""
    load_policy_file(EXAMPLE)
    data = scenario({"kind": "tgi"}).data
    plain = simulate(from_dict(data))
    spec = simulate(from_dict({**data, "speculative": {"method": "eagle", "num_speculative_tokens": 3,
                                                       "acceptance_rate": 0.8}}))
    stats = spec.log.speculation
    assert stats["verify_steps"] > 0 and stats["accepted"] > 0
    assert len(spec.log.step_table()["start_s"]) < len(plain.log.step_table()["start_s"])


def test_a_padded_batch_subclass_is_still_refused_by_speculative_decoding():
    """The rule is the class, not a list of names: a subclass of the static batcher stays padded."""
    from simbatch.policies.static import StaticPolicy

    class Padded(StaticPolicy):
        kind = "padded_example"

    register_policy(Padded)
    data = {**scenario({"kind": "padded_example"}).data,
            "speculative": {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.8}}
    with pytest.raises(SimbatchError, match="iteration-level policy .* not padded_example"):
        from_dict(data)
