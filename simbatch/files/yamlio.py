"""Reading the YAML files users give simbatch: one loader, every refusal a one-line error.

Text files first, through the one loader of user files
(:func:`simbatch.files.textfile.read_text`: a folder, a device such as ``/dev/null``,
a file the user may not read or one that is not UTF-8 is refused with its
cause). YAML then (:func:`load_yaml`, or :func:`parse_yaml` for text in hand),
through PyYAML's safe loader with three checks of the composed document before
anything is built from it:

- **duplicate keys**: YAML says a mapping's keys are unique, PyYAML keeps
  the last silently (a second ``policy:`` line would quietly replace the
  first); refused with both line numbers;
- **alias expansion**: a few lines of nested aliases can stand for billions
  of nodes (the "billion laughs"); anything that walks the document would
  hang, so a document whose aliases expand beyond :data:`MAX_NODES` nodes is
  refused;
- **depth**: documents nested deeper than the composer's recursion can
  follow are refused with one line.

Numbers are read as YAML 1.2 reads them: PyYAML follows YAML 1.1, where a
float needs a dot, so ``1e30`` or ``5E-3`` would be the *strings* ``'1e30'``
and ``'5E-3'`` and a rate written that way would be refused as "not a number".
:class:`Loader` adds YAML 1.2's core-schema float pattern (dot optional).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from simbatch.errors import SimbatchError
from simbatch.files.textfile import read_text  # noqa: F401  (re-exported: scenario.py reads through it)

MAX_NODES = 1_000_000  # nodes a document may expand to, aliases followed


class Loader(yaml.SafeLoader):
    """PyYAML's safe loader, with YAML 1.2 floats (module docstring)."""


# YAML 1.2 core schema, float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, here only the
# forms that are not integers: YAML 1.1 takes an exponent only with a dot before it and a sign
# after it (1.5e+3), and a signed fraction only with a digit before the dot, so 1e30, 1.5e3 and
# -.5 stayed strings.
Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                             re.compile(r"^[-+]?((\.[0-9]+|[0-9]+\.[0-9]*)([eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)$"),
                             list("-+.0123456789"))


def safe_load(text: str):
    """``yaml.safe_load`` with :class:`Loader` (for one-line values such as ``--set``'s)."""
    return yaml.load(text, Loader=Loader)


def compose(text: str, source: str) -> yaml.Node | None:
    """The checked node graph of a YAML document (None for an empty one)."""
    try:
        loader = Loader(text)  # its reader refuses control characters here, before parsing
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise SimbatchError(f"{source}:{line}", f"invalid YAML: character U+{exc.character:04X} is not allowed "
                                                f"(a control character; is this a text file?)") from None
    try:
        node = loader.get_single_node()
    except RecursionError:
        raise SimbatchError(source, "YAML nested too deeply to read") from None
    except yaml.YAMLError as exc:
        raise yaml_error(exc, source) from None
    finally:
        loader.dispose()
    if node is not None:
        check_node(node, source)
    return node


def load_yaml(path: str | Path, what: str = "file"):
    """The Python value of the YAML file at ``path``, after :func:`read_text` and :func:`compose`."""
    return parse_yaml(read_text(path, what), str(path))


def parse_yaml(text: str, source: str):
    """The Python value of YAML ``text`` read from ``source``, checked by :func:`compose`."""
    node = compose(text, source)
    if node is None:
        return None
    loader = Loader("")
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, source) from None
    finally:
        loader.dispose()


def yaml_error(exc: yaml.YAMLError, source: str) -> SimbatchError:
    """PyYAML's error as one line, ``source:line`` where it has a position."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark:
        return SimbatchError(f"{source}:{exc.problem_mark.line + 1}", f"invalid YAML: {exc.problem}")
    return SimbatchError(source, "invalid YAML: " + " ".join(str(exc).split()))  # one line


def check_node(root: yaml.Node, source: str) -> None:
    """Refuse duplicate keys and alias bombs (module docstring); iterative, so any depth the
    composer accepted is walked without recursion."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if not done:
            if id(node) in visiting:
                raise SimbatchError(f"{source}:{node.start_mark.line + 1}",
                                    "a YAML alias refers to a value that contains it (recursive)")
            visiting.add(id(node))
            if isinstance(node, yaml.MappingNode):
                _check_duplicates(node, source)
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        visiting.discard(id(node))
        size = 1 + sum(sizes.get(id(c), 1) for c in children)
        if size > MAX_NODES:
            raise SimbatchError(f"{source}:{node.start_mark.line + 1}",
                                f"YAML aliases here expand to more than {MAX_NODES:,} nodes; "
                                "write the values out or use fewer nested aliases")
        sizes[id(node)] = size


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_duplicates(node: yaml.MappingNode, source: str) -> None:
    seen: dict[str, int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        line = key.start_mark.line + 1
        if key.value in seen:
            raise SimbatchError(f"{source}:{line}", f"duplicate key '{key.value}' (first at line "
                                                    f"{seen[key.value]}); a key may appear once")
        seen[key.value] = line
