"""``--set`` overrides and the one rule for a change of policy kind (:func:`policy_knobs`).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import yaml

from simbatch.errors import SimbatchError
from simbatch.files.yamlio import safe_load
from simbatch.scenario.dotted import set_dotted  # noqa: F401  (re-exported: --set, sweep grids)

if TYPE_CHECKING:
    pass


def parse_value(text: str):
    """A ``--set`` value: YAML scalar or flow syntax (``8``, ``true``, ``[1, 2]``, ``{a: 1}``)."""
    try:
        return safe_load(text)
    except yaml.YAMLError:
        return text


def policy_knobs(data: dict, kind) -> tuple[dict, str]:
    """The knobs policy ``kind`` runs with in scenario ``data``, and where they come from.

    The one rule for every change of policy kind (``compare``'s rows, ``--set policy.kind``,
    sweep grids, capacity candidates): the scenario's ``policies.<kind>`` section, else the
    current ``policy`` when it is already ``kind``, else none (the kind's defaults). Returns
    ``(knobs without kind, "policies.<kind>" | "policy" | "defaults")``.
    """
    policies = data.get("policies")
    own = policies.get(kind) if isinstance(policies, dict) and isinstance(kind, str) else None
    if isinstance(own, dict):
        return dict(own), f"policies.{kind}"
    current = data.get("policy")
    if isinstance(current, dict) and current.get("kind") == kind:
        return {k: v for k, v in current.items() if k != "kind"}, "policy"
    return {}, "defaults"


def apply_overrides(data: dict, overrides: list[str], source: str = "--set") -> dict:
    """Apply ``key.path=value`` overrides. A new ``policy.kind`` takes its knobs by
    :func:`policy_knobs` (``policies.<kind>``, else the defaults), never the old policy's."""
    return override(data, overrides)[0]


def override(data: dict, overrides: list[str]) -> tuple[dict, str]:
    """:func:`apply_overrides`, and where the top-level policy's knobs then come from
    (:attr:`Scenario.policy_source`: ``"policies.chunked_prefill, --set policy.chunk_size"``)."""
    data = copy.deepcopy(data)
    pairs = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SimbatchError(f"--set {item}", "expected KEY=VALUE, e.g. policy.kind=static")
        pairs.append((key.strip(), parse_value(value)))
    origin, extra = "policy", []
    for key, value in sorted(pairs, key=lambda kv: kv[0] != "policy.kind"):
        current = data.get("policy")
        if key == "policy.kind" and not (isinstance(current, dict) and current.get("kind") == value):
            data["policy"], origin = policy_knobs(data, value)
        elif key == "policy":
            origin, extra = "--set policy", []
        elif key.startswith("policy.") and key != "policy.kind":
            extra.append(f"--set {key}")
        set_dotted(data, key, value, f"--set {key}")
    return data, ", ".join([origin, *extra])
