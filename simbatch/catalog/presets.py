"""Spec lookup shared by models and GPUs: a preset name, or a mapping (optionally on a preset)."""

from __future__ import annotations

from dataclasses import MISSING, asdict, fields
from typing import Callable

from simbatch.errors import SimbatchError


def lookup(presets: dict, name: str, what: str, where: str):
    """The preset called ``name`` (any case); unknown names list the presets."""
    spec = presets.get(str(name).strip().lower())
    if spec is None:
        raise SimbatchError(where, f"unknown {what} {name!r}; presets: {', '.join(presets)}")
    return spec


def spec_values(cls, presets: dict, value, what: str, where: str,
                check_field: Callable[[str, object, str], object]) -> dict | object:
    """Checked field values for ``cls`` from a preset name, a mapping, or an instance.

    Returns the instance itself for a preset or an instance, else a dict of
    checked fields to build one from. A mapping may name ``base: <preset>`` and
    override some fields (the result is then named ``<preset>-custom`` unless
    it sets ``name``); without a base every field without a default is needed.
    """
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        return lookup(presets, value, what, where)
    if not isinstance(value, dict):
        raise SimbatchError(where, f"expected a preset name or a mapping, got {type(value).__name__}")
    entries = dict(value)
    base = entries.pop("base", None)
    known = {f.name: f for f in fields(cls)}
    unknown = [k for k in entries if k not in known]
    if unknown:
        raise SimbatchError(f"{where}.{unknown[0]}", f"unknown field; allowed: base, {', '.join(known)}")
    if base is not None:
        values = asdict(lookup(presets, base, what, f"{where}.base"))
        values["name"] = f"{values['name']}-custom"
    else:
        values = {"name": "custom"}
    values.update(entries)
    missing = [n for n, f in known.items() if n not in values and f.default is MISSING]
    if missing:
        raise SimbatchError(where, f"missing field(s) {', '.join(missing)} (or give base: <preset>)")
    return {k: check_field(k, v, f"{where}.{k}") for k, v in values.items()}
