"""Validation: run a scenario on the real (torch) backend and measure how far the predictions are.

``simbatch validate`` (:mod:`simbatch.commands.validate`) and
:func:`simbatch.validate` (:func:`simbatch.api.validate`) call
:func:`~simbatch.validation.runner.validate`. The modules follow the data:
``realtime`` (the scenario in wall-clock time on the torch backend),
``engine`` (one run from the simulator's own pieces, for both sides),
``capacity`` (the shared KV capacity), ``profile`` (the calibrated cost
model, with the backend terms the calibration measured), ``compare``
(pairing and error definitions), ``report`` and ``plots`` (outputs). Only
``realtime`` and the backend need torch, and they import it when they run.
See docs/validation.md.
"""

from __future__ import annotations

__all__ = ["format_table", "run_validation", "write_validation"]


def __getattr__(name):
    if name == "run_validation":
        from simbatch.validation.runner import validate

        return validate
    if name in ("write_validation", "format_table"):
        from simbatch.validation import report

        return getattr(report, name)
    raise AttributeError(f"module 'simbatch.validation' has no attribute {name!r}")
