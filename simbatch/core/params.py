"""Typed parameter sections: a dict from YAML becomes a checked dataclass.

Every section of a scenario that holds knobs (a policy, the KV cache, the
cluster) is a small dataclass; :func:`parse_params` fills one from a dict and
turns every mistake into a one-line :class:`SimbatchError` naming the field and
what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import typing

from simbatch.errors import SimbatchError

MAX_INTEGER = 2**53  # the largest integer knob accepted (floats hold every integer up to it)
# Bounds on a cluster's sizes, checked by simbatch.scenario.cluster.ClusterParams (and its replica
# groups) and simbatch.scenario.disaggregation.PoolParams, which both read them here:
# - replicas: every replica's engine is built before the first step (a million took minutes
#   and gigabytes with nothing simulated); 10,000 is ten times capacity's search limit.
# - micro_batches: a micro-batch holds at least one sequence, and no engine steps more than
#   1,024 (vLLM V1's largest default max_num_seqs); past that each extra one only re-reads its
#   stage's weights, so a step's seconds grow without meaning (a million: a TTFT of 433,000 s).
MAX_REPLICAS = 10_000
MAX_MICRO_BATCHES = 1024


def _coerce(value, typ, where: str):
    """Check ``value`` against a simple annotation (int, float, bool, str, list[int], Optional)."""
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        return _coerce_union(value, [a for a in args if a is not type(None)], where)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise SimbatchError(where, f"expected a list, got {value!r}")
        items = [_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if typ is bool:
        if not isinstance(value, bool):
            raise SimbatchError(where, f"expected true or false, got {value!r}")
        return value
    if typ is int:
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (isinstance(value, float) and not math.isfinite(value)) or int(value) != value):
            raise SimbatchError(where, f"expected an integer, got {value!r}")
        if abs(value) > MAX_INTEGER:  # no knob means that much; beyond it counts overflow int64 and C longs
            raise SimbatchError(where, f"expected an integer of at most 2**53, got {value!r}")
        return int(value)
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SimbatchError(where, f"expected a number, got {value!r}")
        if not math.isfinite(value):  # NaN passes no range check, inf makes a knob meaningless
            raise SimbatchError(where, f"expected a finite number, got {value!r}")
        return float(value)
    if typ is str:
        if not isinstance(value, str):
            raise SimbatchError(where, f"expected a string, got {value!r}")
        return value
    if typ is dict or origin is dict:
        if not isinstance(value, dict):
            raise SimbatchError(where, f"expected a mapping, got {value!r}")
        return value
    return value


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a mapping",
          list: "a list", tuple: "a list"}


def _coerce_union(value, types: list, where: str):
    """``value`` as the first of ``types`` it fits (``str | dict``: a preset name or a mapping),
    else one error naming them all."""
    if len(types) == 1:
        return _coerce(value, types[0], where)
    for typ in types:
        try:
            return _coerce(value, typ, where)
        except SimbatchError:
            continue
    kinds = " or ".join(_KINDS.get(typing.get_origin(t) or t, getattr(t, "__name__", str(t))) for t in types)
    raise SimbatchError(where, f"expected {kinds}, got {value!r}")


def parse_params(cls, values: dict | None, where: str, ignore: tuple[str, ...] = ()):
    """Build dataclass ``cls`` from ``values``; unknown keys and bad types are user errors.

    ``cls.__post_init__`` may raise :class:`ValueError` with ``"field: cause"``;
    it is reported at ``where.field``.
    """
    if values is not None and not isinstance(values, dict):
        raise SimbatchError(where, f"expected a mapping of fields, got {values!r}")
    values = dict(values or {})
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if key in ignore:
            continue
        if key not in names:
            allowed = ", ".join(names) or "(none)"
            raise SimbatchError(f"{where}.{key}", f"unknown field; allowed: {allowed}")
        kwargs[key] = _coerce(value, hints[key], f"{where}.{key}")
    try:
        return cls(**kwargs)
    except ValueError as exc:
        field, _, cause = str(exc).partition(": ")
        raise SimbatchError(f"{where}.{field}", cause or str(exc)) from None


def require(condition: bool, field: str, cause: str) -> None:
    """For ``__post_init__`` checks: raise ``ValueError("field: cause")`` unless ``condition``."""
    if not condition:
        raise ValueError(f"{field}: {cause}")
