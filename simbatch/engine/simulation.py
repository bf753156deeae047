"""One simulated run: scenario -> workload -> replicas (policy + backend) -> event log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import simpy

from simbatch.catalog.models import ModelSpec
from simbatch.control import attach_controller
from simbatch.core.eventlog import EventLog
from simbatch.core.prefix_cache import build_kv_cache
from simbatch.core.sequence import Sequence
from simbatch.engine.autoscale import Fleet, autoscaler
from simbatch.engine.disaggregation.build import simulate_disaggregated
from simbatch.engine.dispatcher import dispatch
from simbatch.engine.replica import Replica
from simbatch.engine.setup import (
    ReplicaGroupSetup,
    RunResult,
    build_group_replicas,
    check_requests_fit,
    checked_budget,
    flush_unfinished,
    group_backend,
    group_field,
    speculative_backend,
)
from simbatch.errors import SimbatchError
from simbatch.policies.iteration import IterationPolicy
from simbatch.policies.routers import ROUTER_CLASSES
from simbatch.scenario.spec import Scenario
from simbatch.scenario.speculative import Acceptance
from simbatch.workload import Workload
from simbatch.workload.size import check_fits_in_memory


def build_groups(scenario: Scenario, model: ModelSpec) -> list[ReplicaGroupSetup]:
    """Every replica group: GPU, TP degree, cost model, KV capacity and policy, checked."""
    groups = []
    for i, group in enumerate(scenario.cluster.groups):
        gpu, tp, backend = group_backend(scenario, model, i)
        backend = speculative_backend(scenario, backend, gpu, tp, group_field(scenario, i, "tensor_parallel"))
        policy = scenario.group_policies[i]
        budget = checked_budget(scenario, model, gpu, tp, group_field(scenario, i, "hardware"), policy.params)
        groups.append(ReplicaGroupSetup(i, group.count, gpu, tp, backend, policy.cls, policy.params, budget.blocks,
                                        scenario.cluster.pipeline_parallel, budget))
    return groups


def build_replicas(env: simpy.Environment, scenario: Scenario, groups: list[ReplicaGroupSetup],
                   log: EventLog, seqs: list, fast_forward: bool, max_context: int,
                   on_free: Callable[[int], None] | None = None) -> tuple[list[Replica], object]:
    """One Replica per replica (own KV cache and policy; a group shares its cost model) and the
    router; ``on_free`` (a real backend's ``release``) hears every request whose blocks are freed."""
    router_cls = ROUTER_CLASSES[scenario.cluster.router]
    kv_params = scenario.kv_cache
    spec = scenario.speculative
    acceptance = None if spec is None else Acceptance(spec, scenario.seed)

    def extras(replica: Replica) -> None:  # speculative decoding and the SLO controller
        if acceptance is not None:
            replica.speculate(acceptance, spec.num_speculative_tokens)
        attach_controller(replica, scenario.control, scenario.slo.as_dict())

    replicas: list[Replica] = []
    for group in groups:
        def make_kv(group=group):
            kv = build_kv_cache(group.kv_blocks, kv_params, group.policy_cls, log, max_context,
                                reforms_batch=issubclass(group.policy_cls, IterationPolicy))
            kv.on_free = on_free
            return kv

        replicas += build_group_replicas(env, group, log, seqs, fast_forward, router_cls, len(replicas), make_kv,
                                         on_built=extras)
    return replicas, router_cls(replicas)


def simulate(scenario: Scenario, fast_forward: bool = True) -> RunResult:
    """Run ``scenario`` to completion in simulated time and return its event log.

    ``fast_forward=False`` takes every step through the policy (the reference
    the fast path is tested against; results are identical).
    """
    if scenario.is_disaggregated:
        if scenario.cluster.autoscale is not None:
            raise SimbatchError(scenario.where("cluster.autoscale"), "disaggregated pools cannot autoscale yet")
        return simulate_disaggregated(scenario, fast_forward)
    return run_cluster(scenario, fast_forward=fast_forward)[0]


def run_cluster(scenario: Scenario, *, workload: Workload | None = None, env: simpy.Environment | None = None,
                backend=None, kv_blocks: int | None = None, on_free: Callable[[int], None] | None = None,
                before_run: Callable[[], None] | None = None,
                fast_forward: bool = True) -> tuple[RunResult, list[Replica]]:
    """The one builder of a colocated run, for simulation and both sides of a validation:
    the scenario's replica groups, KV caches (prefix caches included), policies, controllers,
    router and front end, then the run. Returns the result and the replicas as left at the end.

    A validation overrides what differs between its sides: ``workload`` (built from the
    scenario unless given), ``env`` (a wall-clock environment for a real run), ``backend``
    (every replica's, instead of its group's cost model), ``kv_blocks`` (every replica's
    capacity), ``on_free`` (see :func:`build_replicas`) and ``before_run`` (called right
    before the clock starts).
    """
    if workload is None:
        workload = scenario.build_workload()
    check_fits_in_memory(len(workload), scenario.where("workload"), num_replicas=scenario.cluster.replicas,
                         replicas_where=scenario.where("cluster.replicas"))
    model = scenario.model
    groups = build_groups(scenario, model)
    if backend is not None or kv_blocks is not None:
        groups = [replace(g, backend=backend if backend is not None else g.backend,
                          kv_blocks=kv_blocks if kv_blocks is not None else g.kv_blocks) for g in groups]
    check_requests_fit(workload, scenario, max(g.kv_blocks for g in groups), model)

    log = EventLog(len(workload), scenario.cluster.replicas)
    for note in workload.notes:
        log.note(note)
    env = env if env is not None else simpy.Environment()
    seqs: list[Sequence | None] = [None] * len(workload)
    replicas, router = build_replicas(env, scenario, groups, log, seqs, fast_forward, model.max_context, on_free)
    scale = scenario.cluster.autoscale
    fleet = None if scale is None else Fleet(env, replicas, scale, scale.provisioning_s(model.weight_bytes))
    arrivals = env.process(dispatch(env, workload, replicas, seqs, log, router, scenario.engine.request_s,
                                    model.max_context, fleet))
    if fleet is not None:
        env.process(autoscaler(env, fleet, arrivals))
    if before_run is not None:
        before_run()
    env.run()
    flush_unfinished(seqs, replicas, log)
    if replicas and replicas[0].speculation is not None:
        log.speculation = replicas[0].speculation.stats()
    first = groups[0]
    return RunResult(scenario, workload, log, model, first.gpu, first.backend, scenario.policy.params, groups,
                     fleet=fleet), replicas
