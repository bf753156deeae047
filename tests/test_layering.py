"""The package's import graph: no cycles, and the lower layers never reach up.

Every import counts, at module level or inside a function (a lazy import still ties two
modules together). ``from a.b import c`` depends on ``a.b`` (and on ``a.b.c`` when that is a
module); a package's own ``__init__`` is a module like any other, so a submodule that takes
names from its package's ``__init__`` while that ``__init__`` imports it is a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "simbatch"
# (lower layer, what it must never import): the simulator's core never reaches the real
# backends' callers, and backends (below calibrate and validation) never reach up.
FORBIDDEN = (
    ("simbatch.backends", "simbatch.calibrate"),
    ("simbatch.backends", "simbatch.validation"),
    ("simbatch.engine", "simbatch.validation"),
    ("simbatch.engine", "simbatch.calibrate"),
    ("simbatch.calibrate", "simbatch.validation"),
    ("simbatch.policies", "simbatch.engine"),
    ("simbatch.costmodel", "simbatch.engine"),
    ("simbatch.costmodel", "simbatch.calibrate"),
    # The fast path prices and logs the runs a policy describes (SteadyRun, PaddedBatch.decode_run):
    # it never needs a policy's code, so it cannot restate a rule of one.
    ("simbatch.engine.fast", "simbatch.policies"),
    # The scenario is parsed into specs the engine reads; parsing never needs the engine.
    ("simbatch.scenario", "simbatch.engine"),
)
# The bottom of the house, lowest first: a module of one of these packages imports only from its
# own layer or those below (the shared types, the file loaders, then the catalogues of models,
# GPUs and servers), whatever the package above that uses it.
BOTTOM_LAYERS = (
    ("simbatch.errors", "simbatch.version"),
    ("simbatch.core", "simbatch.files"),
    ("simbatch.catalog",),
)
# The top level is the public face only (issue 34): everything else lives in a package.
PUBLIC_FACE = {"__init__", "__main__", "api", "cli", "errors", "version"}


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def import_graph() -> dict[str, set[str]]:
    mods = module_names()
    graph = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in mods and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_is_read():
    graph = import_graph()
    assert "simbatch.engine.simulation" in graph["simbatch.runs.one"]
    assert "simbatch.engine.setup" in graph["simbatch.engine.disaggregation.build"]


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _in(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def reaching_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports by a module of :data:`BOTTOM_LAYERS` of anything not in its layer or below."""
    bad = []
    for level, packages in enumerate(BOTTOM_LAYERS):
        allowed = [p for layer in BOTTOM_LAYERS[: level + 1] for p in layer]
        bad += [(m, t) for m, targets in sorted(graph.items()) if _in(m, packages)
                for t in sorted(targets) if t != "simbatch" and not _in(t, allowed)]
    return bad


def test_the_bottom_layers_import_only_what_lies_below_them():
    assert reaching_up(import_graph()) == []


def test_the_checker_sees_a_layer_reaching_up():
    graph = {"simbatch.core.plan": {"simbatch.catalog.models", "simbatch.errors"},
             "simbatch.catalog.models": {"simbatch.core.plan", "simbatch.files.textfile"},
             "simbatch.files.yamlio": {"simbatch.policies.base"}}
    assert reaching_up(graph) == [("simbatch.core.plan", "simbatch.catalog.models"),
                                  ("simbatch.files.yamlio", "simbatch.policies.base")]


def test_the_top_level_is_the_public_face():
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    assert modules == PUBLIC_FACE and len(modules) <= 8


def test_lower_layers_never_import_upper_ones():
    graph = import_graph()
    bad = [(m, t) for m, targets in graph.items() for t in targets for low, high in FORBIDDEN
           if (m == low or m.startswith(low + ".")) and (t == high or t.startswith(high + "."))]
    assert bad == []


def test_the_architecture_page_names_every_package():
    """docs/architecture.md's tree has a line for each package of simbatch/ (a new room is drawn)."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert [p for p in packages if f"\n  {p}/ " not in page] == []
