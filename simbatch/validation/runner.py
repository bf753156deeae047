"""A whole validation: for each policy, measure on the torch backend, predict, pair, compare."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from simbatch.engine.setup import RunResult
from simbatch.engine.simulation import run_cluster
from simbatch.errors import SimbatchError
from simbatch.policies.registry import POLICY_ORDER
from simbatch.scenario.spec import Scenario
from simbatch.validation.compare import pair_steps, policy_validation
from simbatch.validation.noise import REPEATS, machine_speed, noise_floor, noise_stats, over_noise, probe_ms

# Torch threads of a CPU validation unless told: one thread is far steadier on a machine shared
# with other processes (docs/validation.md), and the shipped CPU profiles are measured with one.
CPU_THREADS = 1


@dataclass
class PolicyValidation:
    """One policy's measured run, predicted run, paired steps and errors."""

    measured: object    # simbatch.runs.one.RunOutput
    predicted: object   # simbatch.runs.one.RunOutput
    pairs: pd.DataFrame
    errors: dict
    wall_s: float
    noise: pd.DataFrame | None = None  # the replayed samples (simbatch.validation.noise)


@dataclass
class Validation:
    """Everything ``simbatch validate`` computed (written by :func:`simbatch.validation.report.write_validation`)."""

    scenario: Scenario
    backend: dict
    cost_model: dict
    profile: object     # simbatch.validation.profile.ProfileChoice
    kv_note: str
    policies: dict[str, PolicyValidation] = field(default_factory=dict)

    @property
    def profile_path(self) -> Path:
        """The profile folder the predictions used."""
        return self.profile.path

    @property
    def profile_fresh(self) -> bool:
        """Whether that profile was calibrated for this validation."""
        return self.profile.calibrated_now

    def discard_scratch(self) -> None:
        """Remove the scratch folder of a profile calibrated for this validation (written
        output keeps its copy, ``profile/``); the profile is gone after this."""
        from simbatch.validation.profile import SCRATCH_PREFIX

        if self.profile_fresh and self.profile_path.parent.name.startswith(SCRATCH_PREFIX):
            shutil.rmtree(self.profile_path.parent, ignore_errors=True)

    def as_json(self) -> dict:
        """``validation.json``'s content (a profile calibrated now is named as its copy, ``profile``)."""
        return {
            "scenario": self.scenario.name, "backend": self.backend, "cost_model": self.cost_model,
            "profile": "profile" if self.profile_fresh else str(self.profile_path),
            "profile_calibrated_now": self.profile_fresh,
            "profile_machine": self.profile.as_json(),
            "kv_cache": self.kv_note,
            "policies": {k: {**v.errors, "wall_s": v.wall_s} for k, v in self.policies.items()},
        }


def validate(scenario: Scenario, device: str = "cpu", policies: list[str] | None = None, *,
             profile: str | Path | None = None, dtype: str | None = None, threads: int | None = None,
             progress: Callable[[str], None] | None = None, noise_repeats: int = REPEATS) -> Validation:
    """Run ``scenario`` on the torch backend under each policy and compare with the calibrated
    cost model's predictions (see docs/validation.md). Each policy's recorded steps are
    then sampled and executed ``noise_repeats`` more times each, for the noise floor
    (0: skip it)."""
    from simbatch.calibrate import require_torch

    require_torch("validate")
    from simbatch.backends.device import default_dtype
    from simbatch.sweep.progress import format_duration
    from simbatch.validation.profile import predicting_cost_model
    from simbatch.validation.realtime import build_torch_backend, check_validatable

    progress = progress or _stderr
    kinds = _policy_kinds(policies)
    model, gpu = scenario.model, scenario.gpu
    workload = scenario.build_workload()
    check_validatable(scenario, workload, model)
    given = _profile_dir(profile) if profile is not None else None
    if threads is None and device == "cpu":
        threads = CPU_THREADS
    backend, kv_note = build_torch_backend(scenario, workload, model, gpu, device, dtype, threads, scenario.seed)
    dtype = backend.dtype_name
    choice = predicting_cost_model(model, gpu, device, dtype or default_dtype(backend.device.type),
                                   backend.threads, given, scenario.seed, progress, backend.facts)
    cost = choice.cost_model
    calibration_ms = profile_probe_ms(choice.path)
    out = Validation(scenario, backend.describe(), cost.describe(), choice, kv_note)
    started = time.perf_counter()
    for i, kind in enumerate(kinds):
        eta = (f", ETA {format_duration((time.perf_counter() - started) / i * (len(kinds) - i))}"
               if i else "")  # from the pace of the policies done
        progress(f"{kind} (policy {i + 1}/{len(kinds)}{eta}): running {len(workload)} requests on the "
                 f"torch backend ({backend.device})")
        out.policies[kind] = validate_policy(scenario.with_policy(kind), workload, backend, cost, noise_repeats,
                                             calibration_ms)
        e = out.policies[kind].errors
        progress(f"{kind}: {e['step_ape']['steps']} steps in {out.policies[kind].wall_s:.1f} s"
                 + (f"; {e['noise_ape']['steps']} of them executed {noise_repeats} more times for the noise floor"
                    if noise_repeats else ""))
    return out


def validate_policy(scenario: Scenario, workload, backend, cost, noise_repeats: int = REPEATS,
                    calibration_ms: float | None = None) -> PolicyValidation:
    """Measure, predict and compare one policy (``scenario`` already set to it), and measure
    the noise floor of its steps (``noise_repeats`` replays of each sampled step) and the
    machine's speed just before and after its run (the probe, against ``calibration_ms``:
    the same probe when the profile was measured, None if it was not)."""
    from simbatch.engine.realtime import run_realtime

    probe_before = probe_ms(backend)
    load_before = _load_average()
    start = time.perf_counter()
    measured = to_output(run_realtime(scenario, workload, backend))
    wall = time.perf_counter() - start
    load = {"before": load_before, "after": _load_average()}
    noise = noise_floor(backend, backend.steps, noise_repeats)
    speed = machine_speed(calibration_ms, probe_before, probe_ms(backend))
    pairs = pair_steps(backend.steps, cost)
    blocks = backend.pool.num_blocks
    predicted = to_output(run_cluster(scenario, workload=workload, backend=cost, kv_blocks=blocks)[0])
    errors = policy_validation(pairs, measured.summary, predicted.summary)
    errors["load_average_1min"] = load  # other processes on the cores: the measured side's main noise
    errors["machine_speed"] = speed  # the machine's own drift since the profile was measured
    if noise_repeats:
        errors["noise_ape"] = noise_stats(noise)
        errors["step_ape_over_noise"] = over_noise(errors["step_ape"], errors["noise_ape"])
    return PolicyValidation(measured, predicted, pairs, errors, wall, noise if noise_repeats else None)


def to_output(result: RunResult):
    """A :class:`simbatch.api.RunOutput` (summary and tables) of an engine run, by the run's own
    summariser (:func:`simbatch.runs.one.run_output`)."""
    from simbatch.runs.one import run_output

    return run_output(result)


def profile_probe_ms(path) -> float | None:
    """The profile's ``speed_probe`` (ms) if it has one (calibrations from this version on)."""
    from simbatch.catalog.profiles import read_profile

    m = read_profile(path).measurements
    rows = m[m["op"] == "speed_probe"]
    return None if rows.empty else float(rows["median_s"].iloc[0]) * 1e3


def _policy_kinds(policies: list[str] | None) -> list[str]:
    from simbatch.policies import policy_class

    kinds = list(policies or POLICY_ORDER)
    if not kinds:
        raise SimbatchError("--policies", "no policy given")
    for k in kinds:
        policy_class({"kind": k}, "--policies")
    return kinds


def _profile_dir(value) -> Path:
    path = Path(value)
    if not (path / "profile.yaml").is_file():
        raise SimbatchError("--profile", f"no profile at {path} (expected a folder with profile.yaml, "
                                         "as `simbatch calibrate` writes)")
    return path


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _stderr(message: str) -> None:
    print(f"validate: {message}", file=sys.stderr, flush=True)
