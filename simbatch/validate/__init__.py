"""Validation: run a scenario on the real (torch) backend and measure how far the predictions are.

``simbatch validate`` (:mod:`simbatch.commands.validate`) and
:func:`simbatch.api.validate` call :func:`~simbatch.validate.runner.validate`.
The modules follow the data: ``realtime`` (the scenario in wall-clock time on
the torch backend), ``engine`` (one run from the simulator's own pieces, for
both sides), ``capacity`` (the shared KV capacity), ``profile`` (the
calibrated cost model), ``compare`` (pairing and error definitions),
``report`` and ``plots`` (outputs). Only ``realtime`` and the backend need
torch, and they import it when they run. See docs/validation.md.
"""

from __future__ import annotations

import sys
import types

__all__ = ["format_table", "validate", "write_validation"]


def __getattr__(name):
    if name == "validate":
        from simbatch.validate.runner import validate

        return validate
    if name in ("write_validation", "format_table"):
        from simbatch.validate import report

        return getattr(report, name)
    raise AttributeError(f"module 'simbatch.validate' has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    """``simbatch.validate`` is this package *and* the API function (``simbatch.validate(scenario)``):
    Python makes an imported subpackage its parent's attribute, so a plain function of the same name
    in ``simbatch/__init__.py`` would be replaced by the package on first import."""

    def __call__(self, *args, **kwargs):
        from simbatch.api import validate

        return validate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
