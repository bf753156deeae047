"""Write the classroom notebooks (01-06) without outputs.

Run from anywhere: ``python notebooks/_make_notebooks.py``. The notebooks are
generated from the cell texts in ``notebooks/_cells/`` so that they can be
reviewed as plain Python/Markdown and regenerated identically (cell ids are
fixed, outputs and execution counts are empty).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
CELLS = HERE / "_cells"


def build(name: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """A notebook from ``(kind, source)`` pairs, ``kind`` being ``md`` or ``code``."""
    nb = new_notebook()
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    stem = name.split("_")[0]
    for i, (kind, source) in enumerate(cells):
        source = source.strip("\n")
        cell = new_markdown_cell(source) if kind == "md" else new_code_cell(source)
        cell.id = f"nb{stem}-{i:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def load_cells(path: Path) -> list[tuple[str, str]]:
    """The ``CELLS`` list of one cell module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CELLS


def main(argv: list[str]) -> int:
    wanted = set(argv)
    for path in sorted(CELLS.glob("[0-9][0-9]_*.py")):
        if wanted and path.stem not in wanted:
            continue
        nb = build(path.stem, load_cells(path))
        out = HERE / f"{path.stem}.ipynb"
        text = nbformat.writes(nb) + "\n"
        if not out.is_file() or out.read_text() != text:
            out.write_text(text)
            print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
