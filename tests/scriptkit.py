"""Loading the repository's scripts (calibration/, benchmarks/) as modules, for the tests that
check what they fit or print."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def load_script(path: Path, name: str):
    """The script at ``path`` imported as module ``name`` (registered in ``sys.modules``, so
    its dataclasses and pickles resolve)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
