"""docs/policies.md cannot drift from the code silently.

Every ``simbatch/...py`` path the page mentions must exist, and every name an
"**In simbatch:**" note cites after a path (``Class``, ``function``,
``Class.method``, a module constant) must be defined in that file. External
citations (vLLM, Triton, ...) are not checked: CI has no network.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "policies.md"
PATH = re.compile(r"^simbatch/[\w/]+\.py$")
NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$")


def paragraphs(text: str) -> list[str]:
    """The page's paragraphs (blank-line separated), each joined onto one line."""
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]


def cited_names(text: str) -> list[tuple[str, str]]:
    """(path, name) for each name an "In simbatch" note cites, in order: a backticked
    ``simbatch/...py`` opens a file, the backticked identifiers after it belong to it."""
    pairs = []
    for para in paragraphs(text):
        if "**In simbatch:**" not in para:
            continue
        note = para.split("**In simbatch:**", 1)[1].split("**Differs:**", 1)[0]
        path = None
        for token in re.findall(r"`([^`]+)`", note):
            if PATH.match(token):
                path = token
            elif NAME.match(token):
                assert path is not None, f"{token!r} is cited before any simbatch file: {para[:80]}"
                pairs.append((path, token))
    return pairs


@lru_cache(maxsize=None)
def definitions(path: str) -> dict[str, set[str]]:
    """Top-level names of ``path`` (classes, functions, assignments), each class with the
    names defined in its body (methods, class attributes, dataclass fields)."""
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = set()
        elif isinstance(node, ast.ClassDef):
            names[node.name] = {n for child in node.body for n in _bound(child)}
        else:
            for n in _bound(node):
                names[n] = set()
    return names


def _bound(node: ast.stmt) -> list[str]:
    """Names a statement defines at its own level."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def is_defined(path: str, name: str) -> bool:
    """Whether ``name`` (``X`` or ``Class.member``) is defined in ``path``."""
    defs = definitions(path)
    if "." not in name:
        return name in defs
    owner, member = name.split(".")
    return member in defs.get(owner, set())


def test_cited_paths_exist():
    text = DOC.read_text()
    paths = set(re.findall(r"simbatch/[\w/]+\.py", text))
    assert len(paths) >= 15, "the page should cite the implementing files"
    missing = sorted(p for p in paths if not (ROOT / p).is_file())
    assert not missing, f"docs/policies.md names files that do not exist: {missing}"


def test_cited_names_are_defined():
    pairs = cited_names(DOC.read_text())
    assert len(pairs) >= 50, f"only {len(pairs)} names cited: the notes were not parsed"
    missing = [f"{p} {n}" for p, n in pairs if not (ROOT / p).is_file() or not is_defined(p, n)]
    assert not missing, f"docs/policies.md cites names that are not defined: {missing}"


def test_every_policy_section_says_where_it_is_implemented():
    sections = re.split(r"\n## ", DOC.read_text())[1:]
    for title in ("`static`", "`dynamic`", "`continuous`", "`chunked_prefill`", "KV memory",
                  "Clusters and routing", "Prefill/decode disaggregation", "Prefix caching",
                  "Queue order and priorities", "Two streams"):
        body = next((s for s in sections if s.startswith(title)), None)
        assert body is not None, f"no section starting {title!r}"
        assert "**In simbatch:**" in body, f"section {title!r} names no implementing code"


def test_checker_catches_a_wrong_name():
    # The check itself must be able to fail: a renamed method is reported.
    note = "**In simbatch:** `simbatch/policies/dynamic.py` `DynamicPolicy.batch_size_now`, `DynamicPolicy.gone`"
    pairs = cited_names(note)
    assert pairs == [("simbatch/policies/dynamic.py", "DynamicPolicy.batch_size_now"),
                     ("simbatch/policies/dynamic.py", "DynamicPolicy.gone")]
    assert [is_defined(p, n) for p, n in pairs] == [True, False]
