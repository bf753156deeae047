"""The classroom notebooks: stored without outputs, in sync with their generator, and run top to bottom.

Executing them needs the optional extra `pip install -e ".[notebooks]"` (nbclient, nbformat,
ipykernel, and pytest to run this file); without it those tests skip with the reason. Each notebook runs in a fresh
python3 kernel with notebooks/ as its working directory, as a student would run it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
MAX_PRINTED_LINES = 40
CELL_TIMEOUT_S = 300  # per cell; each notebook takes well under a minute on two cores (notebook 6's
                      # validation cell runs a real model in wall-clock time, about 20 s, when torch is installed)
IDS = [p.stem for p in NOTEBOOKS]


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 6, f"expected the classroom notebooks in {NB_DIR}"


def test_the_notebooks_extra_has_what_these_tests_need():
    """`pip install '.[notebooks]'` then `python -m pytest tests/test_notebooks.py` (the README's check)
    lacked pytest (issue 15): every module this file imports or skips without must be in the extra."""
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["notebooks"]
    named = {re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower() for req in extra}
    needed = {"pytest"} | set(re.findall(r'importorskip\("(\w+)"', Path(__file__).read_text()))
    assert needed >= {"pytest", "nbclient", "nbformat", "ipykernel"}
    assert needed <= named, f"missing from the notebooks extra: {sorted(needed - named)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_stored_notebook_has_no_outputs(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("outputs") == [], f"{path.name} cell {i} has stored outputs"
        assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"
        assert "execution" not in cell.get("metadata", {}), f"{path.name} cell {i} has execution timings"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_opens_with_what_you_learn_and_ends_with_questions(path):
    cells = json.loads(path.read_text())["cells"]
    first, last = "".join(cells[0]["source"]), "".join(cells[-1]["source"])
    assert cells[0]["cell_type"] == "markdown" and "What you will learn" in first
    assert cells[-1]["cell_type"] == "markdown" and "Questions to try" in last


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_matches_its_generator(path):
    pytest.importorskip("nbformat", reason="nbformat not installed (pip install -e '.[notebooks]')")
    spec = importlib.util.spec_from_file_location("_make_notebooks", NB_DIR / "_make_notebooks.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    source = NB_DIR / "_cells" / f"{path.stem}.py"
    assert source.is_file(), f"{path.name} has no cell source {source.relative_to(ROOT)}"
    import nbformat

    expected = nbformat.writes(make.build(path.stem, make.load_cells(source))) + "\n"
    assert path.read_text() == expected, (
        f"{path.name} differs from notebooks/_cells/{path.stem}.py: run python notebooks/_make_notebooks.py")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_executes(path, tmp_path, monkeypatch):
    pytest.importorskip("nbformat", reason="nbformat not installed (pip install -e '.[notebooks]')")
    pytest.importorskip("nbclient", reason="nbclient not installed (pip install -e '.[notebooks]')")
    pytest.importorskip("ipykernel", reason="ipykernel not installed (pip install -e '.[notebooks]')")
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    # The kernel imports this checkout's simbatch, and whatever it writes to a temporary
    # folder lands in pytest's.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(NB_DIR)}})
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell raised\n{exc}", pytrace=False)
    wall = time.perf_counter() - start
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: {errors[0]['ename']}: {errors[0]['evalue']}"
    # A cell's printed text stays readable on a projector (issue 33: notebook 6 printed 60
    # calibration progress lines in one cell); 40 leaves room for a scenario file shown whole.
    printed = {i: sum(len(o.text.splitlines()) for o in c.outputs if o.output_type == "stream")
               for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    longest = max(printed, key=printed.get)
    assert printed[longest] <= MAX_PRINTED_LINES, f"{path.name}: cell {longest} prints {printed[longest]} lines"
    print(f"{path.name}: executed in {wall:.1f} s")
