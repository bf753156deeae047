"""Batching policies, selected by ``policy.kind`` in a scenario.

Adding a policy means writing its class (with a ``Params`` dataclass) and
listing it in :data:`POLICIES`.
"""

from __future__ import annotations

from simbatch.errors import SimbatchError
from simbatch.params import parse_params
from simbatch.policies.base import Policy
from simbatch.policies.chunked_prefill import ChunkedPrefillPolicy
from simbatch.policies.continuous import ContinuousPolicy
from simbatch.policies.dynamic import DynamicPolicy
from simbatch.policies.static import StaticPolicy

POLICIES: dict[str, type[Policy]] = {
    cls.kind: cls for cls in (StaticPolicy, DynamicPolicy, ContinuousPolicy, ChunkedPrefillPolicy)
}


def policy_class(spec: dict, where: str = "policy") -> type[Policy]:
    """The class named by ``spec['kind']``."""
    kind = (spec or {}).get("kind")
    if not isinstance(kind, str) or kind not in POLICIES:
        raise SimbatchError(f"{where}.kind", f"unknown policy {kind!r}; allowed: {', '.join(POLICIES)}")
    return POLICIES[kind]


def parse_policy(spec: dict, where: str = "policy"):
    """Check a ``policy:`` section; return ``(class, params)``."""
    cls = policy_class(spec, where)
    return cls, parse_params(cls.Params, spec, where, ignore=("kind",))


__all__ = ["POLICIES", "Policy", "parse_policy", "policy_class"]
