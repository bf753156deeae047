"""The ``control:`` section of a scenario: which online controller runs, and its bounds."""

from __future__ import annotations

from dataclasses import dataclass

from simbatch.core.params import parse_params, require
from simbatch.errors import SimbatchError

KINDS = ("slo", "adaptive_delay")


def controller_knob(controller: str, policy_cls) -> str | None:
    """The knob controller ``controller`` turns on policy class ``policy_cls``: the class's own
    ``knobs`` (inherited by its subclasses, such as the TGI example from continuous batching),
    when its ``Params`` has that field; None when this controller cannot drive it."""
    knob = getattr(policy_cls, "knobs", {}).get(controller)
    fields = getattr(getattr(policy_cls, "Params", None), "__dataclass_fields__", {})
    return knob if knob in fields else None


def drivable(controller: str) -> list[str]:
    """The registered policy kinds ``controller`` can drive (for messages)."""
    from simbatch.policies.registry import POLICIES

    return [kind for kind, cls in POLICIES.items() if controller_knob(controller, cls)]


@dataclass(frozen=True)
class ControlParams:
    """Knobs of the online controllers (see docs/control.md for the control laws).

    ``slo``: every ``interval_s`` look at the last ``window_s`` of requests and
    move the policy's batch cap (continuous: ``max_num_seqs``; chunked prefill:
    ``max_num_batched_tokens``) inside ``[min_value, max_value]``: cut it by
    ``decrease`` when the ``percentile`` TPOT nears its target, grow it by
    ``increase`` when both TTFT and TPOT are comfortably inside. Targets default
    to the scenario's ``slo``.
    ``adaptive_delay``: a dynamic batcher's ``max_queue_delay_us`` follows the
    replica's recent busy fraction, from 0 when idle up to ``max_value``.
    """

    kind: str = "slo"
    interval_s: float = 1.0
    window_s: float = 10.0
    percentile: float = 90.0
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    min_value: float | None = None
    max_value: float | None = None
    decrease: float = 0.8
    increase: float | None = None
    margin: float = 0.1
    busy_floor: float = 0.3

    def __post_init__(self):
        require(self.kind in KINDS, "kind", f"unknown controller {self.kind!r}; allowed: {', '.join(KINDS)}")
        require(self.interval_s > 0, "interval_s", "must be > 0")
        require(self.window_s >= self.interval_s, "window_s", "must be >= interval_s")
        require(0 < self.percentile < 100, "percentile", "must be in (0, 100)")
        for name in ("ttft_ms", "tpot_ms", "min_value", "max_value", "increase"):
            v = getattr(self, name)
            require(v is None or v > 0, name, "must be > 0")
        require(0 < self.decrease < 1, "decrease", "must be in (0, 1)")
        require(0 <= self.margin < 0.5, "margin", "must be in [0, 0.5)")
        require(0 <= self.busy_floor < 1, "busy_floor", "must be in [0, 1)")
        if self.min_value is not None and self.max_value is not None:
            require(self.min_value <= self.max_value, "min_value", "must be <= max_value")


def parse_control(spec: dict | None, policy_cls, slo: dict, where: str) -> ControlParams | None:
    """The checked ``control:`` section (None when absent or ``enabled: false``), for a policy
    of class ``policy_cls``."""
    if spec is None:
        return None
    spec = dict(spec)
    if not spec.pop("enabled", True):
        return None
    params = parse_params(ControlParams, spec, where)
    if controller_knob(params.kind, policy_cls) is None:
        allowed = "; ".join(f"{k} with {' or '.join(drivable(k)) or 'none'}" for k in KINDS)
        raise SimbatchError(f"{where}.kind", f"{params.kind!r} cannot drive a {policy_cls.kind} policy; "
                                             f"allowed: {allowed}")
    if params.kind == "slo" and not (params.ttft_ms or params.tpot_ms or slo.get("ttft_ms") or slo.get("tpot_ms")):
        raise SimbatchError(where, "an slo controller needs a TTFT or TPOT target (control.ttft_ms / tpot_ms or slo:)")
    return params

