"""Adaptive dynamic-batching delay: wait for company only when there is load to wait for."""

from __future__ import annotations

import dataclasses

from simbatch.control.params import ControlParams
from simbatch.control.window import LatencyWindow


class AdaptiveDelay:
    """Sets a dynamic batcher's ``max_queue_delay_us`` from the replica's busy fraction.

    At low load a request that waits for others mostly waits alone, so the
    delay should be near 0; near saturation a short wait fills batches and
    raises throughput. With ``rho`` the busy fraction of the last ``window_s``:
    ``delay = max_value * clip((rho - busy_floor) / (1 - busy_floor), 0, 1)``
    (never below ``min_value``): 0 below ``busy_floor``, the cap when always
    busy. Triton leaves the delay to the operator; this is an online version
    of its tuning advice (raise the delay until latency budgets bind).
    """

    def __init__(self, params: ControlParams, policy, knob: str, log, replica: int):
        self.params = params
        self.policy = policy
        self.knob = knob
        self.high = params.max_value or getattr(policy.params, knob)
        self.low = params.min_value or 0.0
        self.window = LatencyWindow(params.window_s, log, replica)
        self.set(min(max(getattr(policy.params, knob), self.low), self.high))  # start inside the bounds

    def update(self, now: float) -> dict:
        """One decision at ``now``: recompute the delay from the window's busy fraction."""
        w = self.window
        w.read_steps()
        w.prune(now)
        rho = w.busy_fraction(now)
        p = self.params
        x = min(1.0, max(0.0, (rho - p.busy_floor) / (1 - p.busy_floor)))
        value = max(self.low, self.high * x)
        self.set(value)
        return {"value": value, "action": "set", "busy": rho}

    def set(self, value: float) -> None:
        """Give the policy ``value`` (its params are frozen: replace them)."""
        self.policy.params = dataclasses.replace(self.policy.params, **{self.knob: value})
