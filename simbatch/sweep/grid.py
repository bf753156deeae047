"""Sweep grids: ``--grid KEY=V1,V2`` and a scenario's ``sweep:`` section.

A grid is an ordered mapping from dotted scenario keys to lists of values
(YAML scalars or flow values, as in ``--set``). Its combinations are the
cartesian product in a stable order: axes in the order given (the scenario's
``sweep.grid``, then ``sweep.seeds``, then ``--grid`` flags), the first axis
varying slowest. ``--grid`` replaces a YAML axis of the same key in place.

Each combination becomes a :class:`Point`: the base scenario with the values
set (as ``--set`` would), the ``sweep`` section removed and the seed explicit.
Its run id hashes that resolved mapping, so it depends neither on key order
nor on the executor, and a resumed sweep finds the runs it already did.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field

from simbatch.errors import SimbatchError
from simbatch.policies import POLICIES
from simbatch.scenario.dotted import set_dotted
from simbatch.scenario.overrides import parse_value, policy_knobs
from simbatch.scenario.spec import Scenario

SECTION_KEYS = ("grid", "seeds")
ID_LENGTH = 12  # hex digits of sha256 kept in a run id
EXAMPLE = "e.g. --grid policy.kind=static,continuous"


@dataclass
class Grid:
    """The axes of a sweep (dotted key -> values) and, per axis, where it came from (for errors)."""

    axes: dict[str, list] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Number of combinations (1 for an empty grid)."""
        return math.prod(len(v) for v in self.axes.values())

    def combinations(self) -> list[dict]:
        """Every combination as ``{key: value}``, first axis slowest."""
        keys = list(self.axes)
        return [dict(zip(keys, values)) for values in itertools.product(*self.axes.values())]

    def merged(self, other: "Grid") -> "Grid":
        """This grid with ``other``'s axes; a key in both takes ``other``'s values, keeping its place."""
        return Grid({**self.axes, **other.axes}, {**self.labels, **other.labels})


def split_values(text: str) -> list[str]:
    """Split ``V1,V2`` on commas outside brackets and quotes: ``8,[8,16],'a,b'`` is three values."""
    pieces, depth, start, quote = [], 0, 0, None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    pieces.append(text[start:])
    return [p.strip() for p in pieces]


def check_key(key: str, label: str) -> str:
    """A dotted key with no empty part (``policy..kind`` and ``.seed`` are typos)."""
    if not key or any(not part.strip() for part in key.split(".")):
        raise SimbatchError(label, f"malformed key {key!r}; expected a dotted field such as policy.max_num_seqs")
    return key


def check_values(values: list, label: str) -> list:
    """At least one value, none repeated (a repeat would only run the same point twice)."""
    if not values:
        raise SimbatchError(label, "no values; give at least one")
    for i, v in enumerate(values):
        if v in values[:i]:
            raise SimbatchError(label, f"value {v!r} given twice")
    return values


def parse_grid_args(items: list[str]) -> Grid:
    """The axes of ``--grid KEY=V1,V2`` flags, in the order given."""
    grid = Grid()
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SimbatchError(f"--grid {item}", f"expected KEY=V1,V2,..., {EXAMPLE}")
        label = f"--grid {key}"
        check_key(key, label)
        if key in grid.axes:
            raise SimbatchError(label, "given twice; list all its values in one --grid")
        pieces = split_values(text)
        if not text.strip() or any(not p for p in pieces):
            raise SimbatchError(label, f"empty value in {text!r}; expected V1,V2,..., {EXAMPLE}")
        grid.axes[key] = check_values([parse_value(p) for p in pieces], label)
        grid.labels[key] = label
    return grid


def _as_list(values) -> list:
    # A single scalar is one value; a list is the values (so a list-valued
    # field is written as a list of lists: [[8, 16], [4, 8]]).
    return values if isinstance(values, list) else [values]


def section_grid(section, source: str) -> Grid:
    """The axes of a scenario's ``sweep: {grid: {KEY: [V1, V2]}, seeds: [0, 1]}`` section."""
    where = f"{source}: sweep"
    if section is None:
        return Grid()
    if not isinstance(section, dict):
        raise SimbatchError(where, "expected a mapping: {grid: {KEY: [V1, V2]}, seeds: [0, 1]}")
    for key in section:
        if key not in SECTION_KEYS:
            raise SimbatchError(f"{where}.{key}", f"unknown field; allowed: {', '.join(SECTION_KEYS)}")
    axes = section.get("grid") or {}
    if not isinstance(axes, dict):
        raise SimbatchError(f"{where}.grid", "expected a mapping of dotted keys to lists of values")
    grid = Grid()
    for key, values in axes.items():
        label = f"{where}.grid.{key}"
        grid.axes[check_key(str(key), label)] = check_values(_as_list(values), label)
        grid.labels[str(key)] = label
    if "seeds" in section:
        label = f"{where}.seeds"
        if "seed" in grid.axes:
            raise SimbatchError(label, "seeds given twice: here and as sweep.grid.seed")
        grid.axes["seed"] = check_values(_as_list(section["seeds"]), label)
        grid.labels["seed"] = label
    return grid


def sweep_grid(scenario: Scenario, items: list[str] | None = None) -> Grid:
    """The scenario's ``sweep:`` axes with ``--grid`` flags on top; an empty grid is an error."""
    grid = section_grid(scenario.data.get("sweep"), scenario.source).merged(parse_grid_args(items or []))
    if not grid.axes:
        raise SimbatchError("--grid", f"nothing to sweep: give --grid KEY=V1,V2 or a sweep: section ({EXAMPLE})")
    return grid


@dataclass
class Point:
    """One distinct run of a sweep: its id, the grid values it applied and its resolved scenario."""

    run_id: str
    params: dict  # grid key -> value; None where the key does not apply (see expand)
    data: dict


def run_id(data: dict) -> str:
    """First 12 hex digits of sha256 over the canonical JSON (sorted keys) of a scenario mapping."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:ID_LENGTH]


def set_field(data: dict, key: str, value, label: str) -> None:
    """Set dotted ``key`` in ``data`` in place (a sweep point's value), creating sections on the way."""
    # As in `compare` and `run --set policy.kind` (simbatch.scenario.overrides.policy_knobs): a new
    # policy kind starts from the scenario's `policies.<kind>` knobs, else from that kind's
    # defaults, never from the old policy's.
    if key == "policy.kind" and (data.get("policy") or {}).get("kind") != value:
        data["policy"] = policy_knobs(data, value)[0]
    set_dotted(data, key, value, label)


def policy_fields(kind) -> set[str]:
    """Parameter names of policy ``kind`` (of every policy when ``kind`` is None)."""
    classes = [POLICIES[kind]] if kind is not None else POLICIES.values()
    return {f.name for cls in classes for f in dataclasses.fields(cls.Params)}


def applies(key: str, kind) -> bool:
    """False for a ``policy.X`` key that another policy has but ``kind`` has not (max_num_seqs under static).

    A key no policy has stays "applying", so the scenario check names it as a typo.
    """
    parts = key.split(".")
    if len(parts) != 2 or parts[0] != "policy" or parts[1] == "kind" or not isinstance(kind, str) \
            or kind not in POLICIES:
        return True
    return parts[1] not in policy_fields(None) or parts[1] in policy_fields(kind)


def resolve(base: dict, values: dict, labels: dict) -> dict:
    """``base`` with ``values`` set (``policy.kind`` first) and an explicit seed."""
    data = copy.deepcopy(base)
    for key, value in sorted(values.items(), key=lambda kv: kv[0] != "policy.kind"):
        set_field(data, key, value, labels.get(key, key))
    data.setdefault("seed", 0)
    return data


def expand(scenario: Scenario, grid: Grid) -> tuple[list[Point], list[str]]:
    """The distinct points of ``grid`` over ``scenario``, and notes on what was left out.

    A ``policy.X`` value is applied only to points whose policy has ``X``
    (``policy.max_num_seqs`` under ``static`` is left out and its column left
    empty); points that then resolve to the same scenario are one run.
    """
    base = {k: v for k, v in scenario.data.items() if k != "sweep"}
    base_kind = (base.get("policy") or {}).get("kind")
    points: dict[str, Point] = {}
    left_out: dict[str, dict] = {}  # key -> kinds it did not apply to (an ordered set)
    applied: set[str] = set()
    for combo in grid.combinations():
        kind = combo.get("policy.kind", base_kind)
        used = {k: v for k, v in combo.items() if applies(k, kind)}
        applied |= used.keys()
        for key in (k for k in combo if k not in used):
            left_out.setdefault(key, {})[kind] = None
        data = resolve(base, used, grid.labels)
        pid = run_id(data)
        points.setdefault(pid, Point(pid, {k: used.get(k) for k in combo}, data))
    notes = []
    for key, kinds in left_out.items():
        if key not in applied:
            raise SimbatchError(grid.labels[key], f"applies to no point: policy {', '.join(kinds)} has no "
                                                  f"{key.split('.')[1]}")
        notes.append(f"{grid.labels[key]}: does not apply to policy.kind={', '.join(kinds)}; "
                     f"those points run without it (empty in its column)")
    if len(points) < grid.size:
        notes.append(f"{grid.size} grid points are {len(points)} distinct runs")
    return list(points.values()), notes
