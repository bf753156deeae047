"""The predicted side's cost model: the ``profile`` model calibrated on this machine for this model.

A profile applies when it was measured for this model's shapes, in the
backend's dtype, on this machine: the identity fields of
:mod:`simbatch.catalog.machine` (CPU model and cores, instruction-set extensions,
torch threads and version; on a GPU its name, memory, compute capability and
CUDA version) must agree with the backend's. :func:`find_profile` looks for
``calibration/profiles/<device>-<model>-<dtype>-tp1`` (``simbatch calibrate``'s
default folder) under the working directory and the source tree; when none
applies, :func:`predicting_cost_model` says why and calibrates one first
(quick mode) into a new folder, which validate then writes beside its
results. A profile named with ``--profile`` is always used, with a warning
when it was measured on another machine.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from simbatch.catalog.hardware import GPUSpec
from simbatch.catalog.machine import difference, machine_differences, machine_notes
from simbatch.catalog.models import ModelSpec
from simbatch.catalog.profiles import read_profile
from simbatch.costmodel import build_cost_model
from simbatch.errors import SimbatchError

SCRATCH_PREFIX = "simbatch-validate-"  # the temporary folder of a profile calibrated for a validation

SOURCE_TREE = Path(__file__).resolve().parents[2]


@dataclass
class ProfileChoice:
    """The profile the predictions use and how it was chosen (``validation.json``'s
    ``profile_machine``)."""

    cost_model: object
    path: Path
    calibrated_now: bool
    differences: list[str] = field(default_factory=list)  # identity fields that differ (given profiles)
    notes: list[str] = field(default_factory=list)        # recorded-only fields that differ
    rejected: dict[str, list[str]] = field(default_factory=dict)  # profiles found but not applicable
    calibrate_s: float | None = None

    def as_json(self) -> dict:
        """What ``validation.json`` records of the choice."""
        return {"matches": not self.differences, "differences": self.differences, "notes": self.notes,
                "rejected": self.rejected, "calibrate_s": self.calibrate_s}


def profile_mismatch(path: Path, model: ModelSpec, dtype: str, here: dict) -> list[str]:
    """Why the profile in ``path`` does not apply here (empty: it applies)."""
    try:
        header = read_profile(path).header
    except (SimbatchError, OSError, ValueError) as exc:
        return [f"unreadable: {exc}"]
    return header_mismatch(header, model, dtype, here)


def header_mismatch(header: dict, model: ModelSpec, dtype: str, here: dict) -> list[str]:
    """:func:`profile_mismatch` of a profile header already read."""
    wanted = (("model", (header.get("model") or {}).get("name"), model.name),
              ("dtype", header.get("dtype"), dtype),
              ("tensor_parallel", int(header.get("tensor_parallel") or 1), 1))
    out = [difference(key, theirs, mine) for key, theirs, mine in wanted if theirs != mine]
    return out + machine_differences(header.get("device") or {}, here)


def find_profile(model: ModelSpec, dtype: str, here: dict) -> tuple[Path | None, dict[str, list[str]]]:
    """(the first applicable profile in the default folders or None, {profile: why not} for
    those found that do not apply)."""
    name = Path("calibration") / "profiles" / f"{here['kind']}-{model.name}-{dtype}-tp1"
    rejected = {}
    for root in dict.fromkeys((Path.cwd().resolve(), SOURCE_TREE)):  # once where they are one folder
        path = root / name
        if not (path / "profile.yaml").is_file():
            continue
        why = profile_mismatch(path, model, dtype, here)
        if not why:
            return path, rejected
        rejected[str(path)] = why
    return None, rejected


def predicting_cost_model(model: ModelSpec, gpu: GPUSpec, device: str, dtype: str, threads: int,
                          given: Path | None, seed: int, progress: Callable[[str], None],
                          here: dict) -> ProfileChoice:
    """The cost model the predictions use, from ``given``, a matching profile, or one calibrated
    now; ``here`` is the backend's machine (:attr:`TorchBackend.facts`)."""
    if given is not None:
        header = read_profile(given).header
        choice = ProfileChoice(None, Path(given), False, header_mismatch(header, model, dtype, here),
                               machine_notes(header.get("device") or {}, here))
        if choice.differences:
            progress(f"warning: --profile {given} was measured elsewhere ({'; '.join(choice.differences)}); "
                     "its predictions are for that machine, not this one")
    else:
        path, rejected = find_profile(model, dtype, here)
        choice = ProfileChoice(None, path, False, rejected=rejected)
        if path is None:
            choice.path, choice.calibrate_s = _calibrate_here(model, device, dtype, threads, seed, rejected,
                                                              progress)
            choice.calibrated_now = True
    choice.cost_model = build_cost_model({"kind": "profile", "path": str(Path(choice.path).resolve())},
                                         model, gpu, 1, where="--profile")
    return choice


def _calibrate_here(model, device, dtype, threads, seed, rejected, progress) -> tuple[Path, float]:
    from simbatch.calibrate.runner import calibrate

    for path, why in rejected.items():
        progress(f"{path} does not match this machine ({'; '.join(why)})")
    progress(f"no {device} profile for {model.name} ({dtype}, {threads} threads) measured on this machine: "
             "calibrating (quick mode)")
    path = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX)) / "profile"
    start = time.perf_counter()
    calibrate(model, device, dtype, quick=True, out=path, seed=seed, threads=threads,
              progress=lambda m: progress(f"calibrate: {m}"))
    took = time.perf_counter() - start
    progress(f"calibrated in {took:.0f} s")
    return path, round(took, 1)
