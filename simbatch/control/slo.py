"""SLO-aware batch control: move a batch cap online so that TTFT and TPOT stay under their
targets while the cap (and with it throughput) is as large as they allow."""

from __future__ import annotations

import dataclasses

from simbatch.control.params import ControlParams
from simbatch.control.window import LatencyWindow


class SLOController:
    """The control law (docs/control.md), applied every ``interval_s``.

    The knob (continuous batching's ``max_num_seqs``, chunked prefill's token
    budget) trades the two targets against each other: a larger one admits
    and prefills more per step, which shortens queues (TTFT), and makes every
    step longer, which slows every running request (TPOT). So the controller
    holds TPOT just inside its target and gives TTFT everything left:

    * with a TPOT target: ``g``, the mean gap between decode steps over the last
      ``window_s`` (the TPOT of a request decoding now), is steered to
      ``(1 - margin) x target`` by a damped proportional step,
      ``knob x clip(sqrt((1 - margin) x target / g), decrease, 1 / decrease)``:
      it shrinks the knob when violation risk rises and grows it while there
      is slack;
    * with only a TTFT target: the knob grows by ``increase`` while the window's
      ``percentile`` TTFT (or the oldest queued request's age, if larger) is over
      ``(1 - margin) x target``, and holds otherwise.

    Nothing measured in the window: hold. The knob stays inside ``[min_value, max_value]``.
    """

    def __init__(self, params: ControlParams, policy, knob: str, slo: dict, log, replica: int):
        self.params = params
        self.policy = policy
        self.knob = knob
        self.ttft_s = (params.ttft_ms or slo.get("ttft_ms") or 0) / 1e3 or None
        self.tpot_s = (params.tpot_ms or slo.get("tpot_ms") or 0) / 1e3 or None
        start = policy.params.budget if knob == "max_num_batched_tokens" else getattr(policy.params, knob)
        self.low = int(params.min_value or 1)
        self.high = int(params.max_value or start)
        self.value = min(max(int(start), self.low), self.high)
        self.step = int(params.increase or max(1, round(0.05 * self.high)))
        self.window = LatencyWindow(params.window_s, log, replica)
        self.apply()

    def signals(self, now: float) -> tuple[float | None, float | None]:
        """(TTFT, TPOT) estimates in seconds at ``now`` (None: nothing to go on)."""
        w = self.window
        w.read_steps()
        w.prune(now)
        ttft = w.ttft_percentile(self.params.percentile)
        waiting = self.policy.waiting
        if waiting:
            age = now - min(s.arrival_s for s in waiting)
            ttft = age if ttft is None else max(ttft, age)
        return ttft, w.mean_itl()

    def update(self, now: float) -> dict:
        """One control decision at ``now``; returns what the trajectory records."""
        p = self.params
        ttft, tpot = self.signals(now)
        old = self.value
        line = self.window.step_time_line() if self.knob == "max_num_batched_tokens" else None
        if self.tpot_s is not None and line is not None:
            # Chunked prefill: while a prefill is under way every step is a full budget,
            # so choose the budget whose step time (the fitted line) is (1 - margin) x target.
            a, b = line
            goal = ((1 - p.margin) * self.tpot_s - a) / b
            # move towards it at most by a factor 1/decrease per decision (damping)
            goal = min(self.value / p.decrease, max(self.value * p.decrease, goal))
            self.value = min(self.high, max(self.low, int(goal)))
        elif self.tpot_s is not None:
            if tpot is not None:
                ratio = (1 - p.margin) * self.tpot_s / tpot
                factor = min(1 / p.decrease, max(p.decrease, ratio ** 0.5))
                self.value = min(self.high, max(self.low, round(self.value * factor)))
        elif ttft is not None and ttft > (1 - p.margin) * self.ttft_s:
            self.value = min(self.high, self.value + self.step)
        action = "increase" if self.value > old else "decrease" if self.value < old else "hold"
        self.apply()
        return {"value": self.value, "action": action, "ttft_ms": _ms(ttft), "tpot_ms": _ms(tpot)}

    def apply(self) -> None:
        """Give the policy the current cap (its params are frozen: replace them)."""
        self.policy.params = dataclasses.replace(self.policy.params, **{self.knob: self.value})


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3
