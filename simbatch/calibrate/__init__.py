"""Torch micro-benchmarks of one Llama-style layer, written as a profile (``docs/profiles.md``).

Only this package imports torch, and only once :func:`require_torch` has
passed: the simulator itself never needs it. ``simbatch calibrate`` (in
:mod:`simbatch.commands.calibrate`) and :func:`calibrate` run everything;
the modules split the work: ``points`` (which shapes), ``layers`` (the
tensors), ``timing`` (how to time), ``bench_*`` (each operator group),
and ``runner`` (the whole run); facts about the device are in
:mod:`simbatch.backends.device`.
"""

from __future__ import annotations

from simbatch.backends.torchdep import TORCH_HINT, require_torch


def calibrate(*args, **kwargs):
    """Run a calibration (see :func:`simbatch.calibrate.runner.calibrate`); needs torch."""
    require_torch("calibrate")
    from simbatch.calibrate.runner import calibrate as run

    return run(*args, **kwargs)


__all__ = ["TORCH_HINT", "calibrate", "require_torch"]
