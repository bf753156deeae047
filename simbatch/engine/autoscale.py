"""The autoscaled fleet: which replicas take requests, and the controller that resizes it.

Every replica of an autoscaled cluster is built up front (``cluster.autoscale.max``) and is in
one state at a time:

- ``ready``: the router may send it requests;
- ``starting``: provisioning (node, image, weights, engine start-up: ``provisioning_s``),
  taking no request until it is ready;
- ``draining``: chosen for scale-down: no new request, the ones it holds finish;
- ``off``: not running (and not paid for).

The controller (:func:`autoscaler`) runs every ``interval_s`` and applies the rule of
:mod:`simbatch.scenario.autoscale`. Scale-up starts the lowest-numbered replicas that are off;
scale-down first cancels replicas still starting (the newest first, as a ReplicaSet deletes
not-ready pods first), then drains the newest ready ones. Every change is recorded as a row of
``(t_s, ready, starting, draining)`` for ``replicas.csv`` and the GPU-hours.
"""

from __future__ import annotations

import math
from collections import deque

from simbatch.policies.routers import num_running
from simbatch.scenario.autoscale import AutoscaleParams

READY, STARTING, DRAINING, OFF = "ready", "starting", "draining", "off"


class Fleet:
    """The states of an autoscaled cluster's replicas (module docstring)."""

    def __init__(self, env, replicas: list, params: AutoscaleParams, provisioning_s: float):
        self.env, self.replicas, self.params = env, replicas, params
        self.provisioning_s = provisioning_s
        self.state = [READY if i < params.initial else OFF for i in range(len(replicas))]
        self.ready = list(replicas[:params.initial])  # the router's candidates, in replica order
        self.changes: list[tuple[float, int, int, int]] = []
        self.recommendations: deque[tuple[float, int]] = deque()  # (time, desired) of recent ticks
        self.scale_ups = self.scale_downs = 0
        for replica in replicas:
            replica.on_idle = self.on_idle
        self.record()

    def count(self, state: str) -> int:
        """Replicas in ``state``."""
        return self.state.count(state)

    def record(self) -> None:
        """One row of the timeline: the counts now (a later change at the same time replaces it)."""
        row = (self.env.now, self.count(READY), self.count(STARTING), self.count(DRAINING))
        if self.changes and self.changes[-1][0] == row[0]:
            self.changes[-1] = row
        else:
            self.changes.append(row)

    def desired(self, now: float) -> int:
        """What the controller asks for now, within min and max (the module docstring's rule)."""
        p = self.params
        current = self.count(READY) + self.count(STARTING)
        if p.metric == "schedule":
            wanted = p.scheduled(now)
        else:
            total = sum(map(self.load, self.ready)) / p.target
            wanted = current if current and abs(total / current - 1) <= p.tolerance else math.ceil(total)
        return min(max(wanted, p.min), p.max)

    def load(self, replica) -> float:
        """The per-replica metric of ``replica``."""
        policy, metric = replica.policy, self.params.metric
        if metric == "kv_usage":
            return policy.kv.num_used / policy.kv.num_blocks
        if metric == "waiting":
            return policy.num_waiting
        return policy.num_waiting + num_running(policy)

    def tick(self, now: float) -> None:
        """One controller period: the HPA's stabilisation of :meth:`desired` over its windows
        (scale up to the lowest recommendation of the last ``scale_up_cooldown_s``, down to the
        highest of the last ``scale_down_cooldown_s``), then the change."""
        p = self.params
        recs = self.recommendations
        recs.append((now, self.desired(now)))
        while recs[0][0] < now - max(p.scale_up_cooldown_s, p.scale_down_cooldown_s):
            recs.popleft()
        up = min(n for t, n in recs if t >= now - p.scale_up_cooldown_s)
        down = max(n for t, n in recs if t >= now - p.scale_down_cooldown_s)
        current = self.count(READY) + self.count(STARTING)
        if up > current:
            if self.start(up - current):
                self.scale_ups += 1
        elif down < current:
            self.stop(current - down)
            self.scale_downs += 1

    def start(self, k: int) -> int:
        """Provision up to ``k`` replicas that are off; how many started."""
        off = [i for i, s in enumerate(self.state) if s == OFF][:k]
        for i in off:
            self.state[i] = STARTING
            self.env.process(self._provision(i))
        if off:
            self.record()
        return len(off)

    def _provision(self, i: int):
        yield self.env.timeout(self.provisioning_s)
        if self.state[i] == STARTING:  # not cancelled meanwhile
            self.state[i] = READY
            self._refresh_ready()

    def stop(self, k: int) -> None:
        """Take ``k`` replicas out: starting ones first, then drain the newest ready."""
        for i in reversed(range(len(self.state))):
            if k and self.state[i] == STARTING:
                self.state[i], k = OFF, k - 1
        for replica in reversed(self.ready[1:] if k else []):  # never the last ready replica
            if not k:
                break
            self.state[replica.index], k = DRAINING, k - 1
            if self.idle(replica):
                self.state[replica.index] = OFF
        self._refresh_ready()

    def _refresh_ready(self) -> None:
        """The router's candidates after a change of states, and the timeline's row."""
        self.ready = [r for r in self.replicas if self.state[r.index] == READY]
        self.record()

    @staticmethod
    def idle(replica) -> bool:
        """Nothing queued or running on ``replica``."""
        return not replica.policy.num_waiting and not num_running(replica.policy)

    def on_idle(self, replica) -> None:
        """``replica`` has run out of work (its loop is about to sleep): a draining one goes off."""
        if self.state[replica.index] == DRAINING and self.idle(replica):
            self.state[replica.index] = OFF
            self.record()

    def all_idle(self) -> bool:
        """No replica holds a request."""
        return all(map(self.idle, self.replicas))


def autoscaler(env, fleet: Fleet, arrivals):
    """SimPy process: the controller, every ``interval_s`` until every request has arrived and
    been served (``arrivals``: the dispatcher's process)."""
    interval = fleet.params.interval_s
    while True:
        yield env.timeout(interval)
        if arrivals.triggered and fleet.all_idle():
            return
        fleet.tick(env.now)
