"""Dotted field names (``policy.kind``, ``cluster.replicas[1].hardware``): how ``--set``,
sweep grids and scenario variants address one field of a scenario mapping."""

from __future__ import annotations

import re

from simbatch.errors import SimbatchError


def set_dotted(data: dict, key: str, value, label: str) -> None:
    """Set dotted ``key`` (``a.b.c``, list items as ``a.b[1].c``) in ``data`` in place,
    creating missing sections (list items must exist)."""
    steps: list[str | int] = []
    for part in key.split("."):
        m = re.fullmatch(r"([^\[\]]+)((?:\[\d+\])*)", part)
        if m is None:
            raise SimbatchError(label, f"bad field name {part!r}; use a.b.c, or a.b[1].c for a list item")
        steps.append(m.group(1))
        steps.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    node = data
    for here, step in zip(steps, steps[1:]):
        if isinstance(here, int):
            if not isinstance(node, list) or here >= len(node):
                raise SimbatchError(label, f"no list item [{here}] to set")
            node = node[here]
            continue
        if not isinstance(node, dict):
            raise SimbatchError(label, f"{here} is not inside a section")
        if node.get(here) is None:
            node[here] = [] if isinstance(step, int) else {}
        node = node[here]
        if isinstance(step, int) and not isinstance(node, list):
            raise SimbatchError(label, f"{here} is not a list")
        if isinstance(step, str) and not isinstance(node, (dict, list)):
            raise SimbatchError(label, f"{here} is not a section")
    last = steps[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise SimbatchError(label, f"no list item [{last}] to set")
    elif not isinstance(node, dict):
        raise SimbatchError(label, f"cannot set {last} here")
    node[last] = value
