"""Torch micro-benchmarks of one Llama-style layer, written as a profile (``docs/profiles.md``).

Only this package imports torch, and only once :func:`require_torch` has
passed: the simulator itself never needs it. ``simbatch calibrate`` (in
:mod:`simbatch.commands.calibrate`) and :func:`calibrate` run everything;
the modules split the work: ``points`` (which shapes), ``layers`` (the
tensors), ``timing`` (how to time), ``bench_*`` (each operator group),
``device`` (facts about the hardware) and ``runner`` (the whole run).
"""

from __future__ import annotations

import importlib

from simbatch.errors import SimbatchError

TORCH_HINT = "needs torch: pip install torch==2.13.0 (or 'simbatch[torch]')"


def require_torch():
    """The torch module, or a one-line :class:`SimbatchError` saying how to install it."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise SimbatchError("calibrate", TORCH_HINT) from None


def calibrate(*args, **kwargs):
    """Run a calibration (see :func:`simbatch.calibrate.runner.calibrate`); needs torch."""
    require_torch()
    from simbatch.calibrate.runner import calibrate as run

    return run(*args, **kwargs)


__all__ = ["TORCH_HINT", "calibrate", "require_torch"]
