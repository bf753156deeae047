"""torch is optional: the one place that imports it on demand and says how to install it.

Below every module that needs torch (:mod:`simbatch.backends`, :mod:`simbatch.calibrate`,
:mod:`simbatch.validation`), so none of them imports another just for this check."""

from __future__ import annotations

import importlib

from simbatch.errors import SimbatchError

TORCH_HINT = "needs torch: pip install torch==2.13.0 (or 'simbatch[torch]')"


def require_torch(what: str):
    """The torch module, or a one-line :class:`SimbatchError` saying that ``what`` (the command
    or feature the user asked for: ``validate``, ``calibrate``...) needs it and how to install it."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise SimbatchError(what, TORCH_HINT) from None
