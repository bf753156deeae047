"""Batching policies, selected by ``policy.kind`` in a scenario.

A built-in policy is a class (with a ``Params`` dataclass) listed in
:mod:`simbatch.policies.registry`'s ``BUILTIN``; a user's own policy is registered from Python
(:func:`register_policy`) or from a file (:func:`load_policy_file`, the CLI's
``--policy-file``). docs/policies.md, "Writing a policy", walks through one.
"""

from __future__ import annotations

from simbatch.errors import SimbatchError
from simbatch.params import parse_params
from simbatch.policies.base import Policy
from simbatch.policies.registry import POLICIES, load_policy_file, register_policy


def policy_class(spec: dict, where: str = "policy") -> type[Policy]:
    """The class named by ``spec['kind']``."""
    kind = (spec or {}).get("kind")
    if not isinstance(kind, str) or kind not in POLICIES:
        raise SimbatchError(f"{where}.kind", f"unknown policy {kind!r}; allowed: {', '.join(POLICIES)} "
                                             f"(or your own, from --policy-file FILE.py)")
    return POLICIES[kind]


def parse_policy(spec: dict, where: str = "policy"):
    """Check a ``policy:`` section; return ``(class, params)``."""
    cls = policy_class(spec, where)
    return cls, parse_params(cls.Params, spec, where, ignore=("kind",))


__all__ = ["POLICIES", "Policy", "load_policy_file", "parse_policy", "policy_class", "register_policy"]
