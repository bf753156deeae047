"""Test kit: drive a policy on a replica with a simple, recording backend (no presets needed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from simbatch.costmodel.base import StepCost
from simbatch.core.eventlog import EventLog
from simbatch.engine.dispatcher import dispatch
from simbatch.engine.replica import Replica
from simbatch.core.kvcache import KVCache
from simbatch.core.params import parse_params
from simbatch.core.plan import StepPlan
from simbatch.policies import POLICIES
from simbatch.workload.request import Request, Workload


class RecordingBackend:
    """Step time = base + per_token x computed tokens; remembers every plan and KV use."""

    name = "recording"

    def __init__(self, base_s: float = 0.010, per_token_s: float = 1e-5):
        self.base_s = base_s
        self.per_token_s = per_token_s
        self.plans: list[StepPlan] = []
        self.kv_used: list[int] = []
        self.kv: KVCache | None = None

    def step_cost(self, plan: StepPlan) -> StepCost:
        self.plans.append(plan)
        if self.kv is not None:
            self.kv_used.append(self.kv.num_used)
        s = self.base_s + self.per_token_s * plan.num_batched_tokens
        return StepCost(seconds=s, breakdown={"overhead": s})

    def describe(self) -> dict:
        return {"kind": "recording"}


@dataclass
class Sim:
    """Outcome of :func:`simulate_policy`."""

    log: EventLog
    backend: RecordingBackend
    workload: Workload
    kv: KVCache
    policy: object
    seqs: list = field(default_factory=list)


def workload_of(triples) -> Workload:
    """A workload from ``(arrival_s, prompt, output)`` triples."""
    return Workload.from_requests([Request(i, a, p, o) for i, (a, p, o) in enumerate(triples)])


def simulate_policy(kind: str, params: dict, triples, kv_blocks: int = 10_000, block_size: int = 16,
                    kv_mode: str = "paged", backend: RecordingBackend | None = None) -> Sim:
    """Run ``triples`` through one replica of policy ``kind``; return the log and recorded plans."""
    workload = workload_of(triples)
    cls = POLICIES[kind]
    policy_params = parse_params(cls.Params, params, "policy")
    log = EventLog(len(workload), 1)
    env = simpy.Environment()
    kv = KVCache(kv_blocks, block_size, kv_mode)
    backend = backend or RecordingBackend()
    backend.kv = kv
    policy = cls(policy_params, kv, note=log.note)
    seqs = [None] * len(workload)
    replica = Replica(env, 0, policy, backend, log, seqs)
    env.process(dispatch(env, workload, [replica], seqs, log))
    env.run()
    return Sim(log, backend, workload, kv, policy, seqs)
