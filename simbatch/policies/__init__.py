"""Batching policies, selected by ``policy.kind`` in a scenario.

A built-in policy is a class (with a ``Params`` dataclass) listed in
:mod:`simbatch.policies.registry`'s ``BUILTIN``; a user's own policy is registered from Python
(:func:`register_policy`) or from a file (:func:`load_policy_file`, the CLI's
``--policy-file``). docs/policies.md, "Writing a policy", walks through one.
"""

from __future__ import annotations

from dataclasses import dataclass

from simbatch.core.params import parse_params
from simbatch.errors import SimbatchError
from simbatch.policies.base import Policy
from simbatch.policies.registry import POLICIES, load_policy_file, register_policy


def policy_class(spec: dict, where: str = "policy") -> type[Policy]:
    """The class named by ``spec['kind']``."""
    kind = (spec or {}).get("kind")
    if not isinstance(kind, str) or kind not in POLICIES:
        raise SimbatchError(f"{where}.kind", f"unknown policy {kind!r}; allowed: {', '.join(POLICIES)} "
                                             f"(or your own, from --policy-file FILE.py)")
    return POLICIES[kind]


def kind_is(kind, base: type) -> bool:
    """Whether policy ``kind``'s class is ``base`` or a subclass of it (capabilities follow the
    class, never the name); False for a kind this process has not registered."""
    cls = POLICIES.get(kind) if isinstance(kind, str) else None
    return cls is not None and issubclass(cls, base)


def parse_policy(spec: dict, where: str = "policy"):
    """Check a ``policy:`` section; return ``(class, params)``."""
    cls = policy_class(spec, where)
    return cls, parse_params(cls.Params, spec, where, ignore=("kind",))


@dataclass(frozen=True)
class PolicySpec:
    """A parsed ``policy:`` section: the policy class, its checked parameters, and the
    scenario field (``policy``, ``cluster.replicas[1].policy``, ...) it was read from."""

    cls: type[Policy]
    params: object
    field: str = "policy"

    @property
    def kind(self) -> str:
        return self.cls.kind


def parse_policy_spec(spec: dict, source: str, field_path: str = "policy",
                      max_context: int | None = None) -> PolicySpec:
    """:func:`parse_policy` on the mapping at ``field_path`` of scenario file ``source``; with
    the model's context window ``max_context``, parameters whose defaults depend on the model
    (a ``for_model(max_context)`` method, e.g. ``continuous``'s step budget) are resolved."""
    cls, params = parse_policy(spec, f"{source}: {field_path}")
    if max_context is not None and hasattr(params, "for_model"):
        params = params.for_model(max_context)
    return PolicySpec(cls, params, field_path)


__all__ = ["POLICIES", "Policy", "PolicySpec", "kind_is", "load_policy_file", "parse_policy", "parse_policy_spec",
           "policy_class", "register_policy"]
