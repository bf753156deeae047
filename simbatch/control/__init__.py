"""Online controllers: turn a policy's knob during the run from what the replica measures.

``control: {kind: slo | adaptive_delay, ...}`` in a scenario (see
:class:`ControlParams` and docs/control.md). A controller is consulted at the
first step boundary after each ``interval_s`` (the same boundary whether the
engine fast-forwards or not, so results stay a function of scenario and seed),
sees the replica's recent latencies or busy time, and replaces one field of the
policy's parameters. Its decisions are logged as the run's control trajectory.
"""

from __future__ import annotations

from simbatch.control.delay import AdaptiveDelay
from simbatch.control.params import ControlParams, controller_knob, parse_control
from simbatch.control.slo import SLOController

__all__ = ["AdaptiveDelay", "ControlParams", "SLOController", "attach_controller", "controller_knob", "parse_control"]

CONTROL_COLUMNS = ("time_s", "replica", "knob", "value", "action", "ttft_ms", "tpot_ms", "busy")


def attach_controller(replica, params: ControlParams | None, slo: dict) -> None:
    """Give ``replica`` the controller of the scenario's parsed ``control:`` section
    (``params``; None when absent or disabled: nothing). A policy the controller cannot
    drive (a replica group's own, or another kind under ``compare``) runs without it, and
    the run log says so."""
    policy = replica.policy
    if params is None:
        return
    knob = controller_knob(params.kind, type(policy))
    if knob is None:
        if replica.index == 0:
            replica.log.note(f"control: a {params.kind} controller cannot drive a {policy.kind} policy; "
                             f"ran without it")
        return
    if params.kind == "slo":
        controller = SLOController(params, policy, knob, slo, replica.log, replica.index)
        replica.window = controller.window
    else:
        controller = AdaptiveDelay(params, policy, knob, replica.log, replica.index)
    replica.controller = controller
    replica.control_interval = params.interval_s
    replica.control_at = params.interval_s
    replica.log.control_rows.append(row(0.0, replica.index, knob, controller_value(controller), "start"))


def controller_value(controller) -> float:
    """The knob's current value."""
    return getattr(controller.policy.params, controller.knob)


def row(time_s: float, replica: int, knob: str, value, action: str, **measured) -> dict:
    """One trajectory record (:data:`CONTROL_COLUMNS`)."""
    return {"time_s": time_s, "replica": replica, "knob": knob, "value": value, "action": action,
            "ttft_ms": measured.get("ttft_ms"), "tpot_ms": measured.get("tpot_ms"),
            "busy": measured.get("busy")}


def control_tick(replica, now: float) -> None:
    """Run ``replica``'s controller at a step boundary ``now`` >= its next control time."""
    c = replica.controller
    out = c.update(now)
    value = out.pop("value")
    action = out.pop("action")
    replica.log.control_rows.append(row(now, replica.index, c.knob, value, action, **out))
    k = int(now // replica.control_interval) + 1  # next point of the fixed grid after now
    replica.control_at = k * replica.control_interval
