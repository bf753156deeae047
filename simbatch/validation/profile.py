"""The predicted side's cost model: the ``profile`` model calibrated for this device and model.

A profile applies when it was measured on this kind of device, for this
model's shapes, in the backend's dtype and (on CPU) with the same number of
torch threads: a CPU's per-operator times change a lot with the thread count.
:func:`find_profile` looks for ``calibration/profiles/<device>-<model>-<dtype>-tp1``
(``simbatch calibrate``'s default folder) under the working directory and
the source tree; when none applies, :func:`predicting_cost_model` calibrates
one first (quick mode) into a new folder, which validate then writes beside
its results.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from simbatch.costmodel import build_cost_model
from simbatch.errors import SimbatchError
from simbatch.hardware import GPUSpec
from simbatch.models import ModelSpec
from simbatch.profiles import read_profile

SOURCE_TREE = Path(__file__).resolve().parents[2]


def profile_applies(path: Path, kind: str, model: ModelSpec, dtype: str, threads: int) -> bool:
    """Whether the profile in ``path`` was measured for this device kind, model, dtype (and CPU threads)."""
    try:
        header = read_profile(path).header
    except (SimbatchError, OSError, ValueError):
        return False
    device = header.get("device") or {}
    same = (device.get("kind") == kind and header.get("dtype") == dtype
            and (header.get("model") or {}).get("name") == model.name
            and int(header.get("tensor_parallel") or 1) == 1)
    return same and (kind != "cpu" or int(device.get("threads") or 0) == threads)


def find_profile(kind: str, model: ModelSpec, dtype: str, threads: int) -> Path | None:
    """The first applicable profile in the default folders, or None."""
    name = Path("calibration") / "profiles" / f"{kind}-{model.name}-{dtype}-tp1"
    for root in (Path.cwd(), SOURCE_TREE):
        path = root / name
        if (path / "profile.yaml").is_file() and profile_applies(path, kind, model, dtype, threads):
            return path
    return None


def predicting_cost_model(model: ModelSpec, gpu: GPUSpec, device: str, dtype: str, threads: int,
                          given: Path | None, seed: int, progress: Callable[[str], None]):
    """(cost model, profile folder, whether it was calibrated now) for the predicted side."""
    from simbatch.backends.device import device_kind, resolve_device

    path, fresh = given, False
    if path is None:
        path = find_profile(device_kind(resolve_device(device)), model, dtype, threads)
    if path is None:
        from simbatch.calibrate.runner import calibrate

        progress(f"no {device} profile for {model.name} ({dtype}, {threads} threads): calibrating (quick)")
        path = Path(tempfile.mkdtemp(prefix="simbatch-validate-")) / "profile"
        calibrate(model, device, dtype, quick=True, out=path, seed=seed, threads=threads,
                  progress=lambda m: progress(f"calibrate: {m}"))
        fresh = True
    cost = build_cost_model({"kind": "profile", "path": str(Path(path).resolve())}, model, gpu, 1,
                            where="--profile")
    return cost, Path(path), fresh
