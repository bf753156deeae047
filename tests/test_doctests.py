"""Every ``>>>`` example in simbatch's docstrings runs, and gives what it says (issue 34: they
never ran). Modules are found by scanning the package, so a new example is run too."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "simbatch"


def modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>> " in path.read_text(encoding="utf-8"):
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_there_are_examples():
    assert {"simbatch.api", "simbatch.sweep", "simbatch.capacity"} <= set(modules_with_examples())


@pytest.mark.parametrize("name", modules_with_examples())
def test_the_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # bundled names resolve anywhere; nothing lands in the checkout
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"{name}: {result.failed} of {result.attempted} failed"
