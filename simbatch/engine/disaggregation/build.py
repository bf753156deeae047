"""A disaggregated run: build the two pools, release arrivals to the prefill pool, run.

Replicas are numbered prefill pool first (0..P-1), then decode pool
(P..P+D-1); the event log, steps and token runs use those numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from simbatch.catalog.models import ModelSpec
from simbatch.core.eventlog import EventLog
from simbatch.core.prefix_cache import build_kv_cache, prefix_labels
from simbatch.core.sequence import Sequence
from simbatch.costmodel.pipeline import largest_stage_share
from simbatch.engine.disaggregation.handoff import (
    DecodeKVCache,
    DecodeReplica,
    Handoff,
    PrefillReplica,
)
from simbatch.engine.dispatcher import serve_limits, window_note
from simbatch.engine.setup import (
    ReplicaGroupSetup,
    RunResult,
    build_group_replicas,
    checked_budget,
    first_misfit,
    flush_unfinished,
    beyond_window,
    held_tokens,
    replica_backend,
)
from simbatch.errors import SimbatchError
from simbatch.policies.iteration import IterationPolicy
from simbatch.policies.routers import ROUTER_CLASSES
from simbatch.scenario.cluster import pool_layout
from simbatch.scenario.disaggregation import PIPELINE_FIELDS, POOLS
from simbatch.scenario.spec import Scenario
from simbatch.workload import Workload
from simbatch.workload.size import check_fits_in_memory

CLUSTER_FIELDS = ("tensor_parallel", *PIPELINE_FIELDS)  # a pool's fields that fall back to cluster's


@dataclass
class PoolSetup(ReplicaGroupSetup):
    """One pool as built (a replica group with a name and a router)."""

    pool: str = ""
    router: str = "round_robin"

    def describe(self) -> dict:
        return {**super().describe(), "pool": self.pool}


def pool_field(scenario: Scenario, pool: str, name: str) -> str:
    """Where pool ``pool``'s ``name`` comes from: its own field, else the top-level one
    (``cluster``'s for the parallelism fields)."""
    if getattr(scenario.disaggregation.pool(pool), name) is not None:
        return f"disaggregation.{pool}.{name}"
    return f"cluster.{name}" if name in CLUSTER_FIELDS else name


def build_pool(scenario: Scenario, model: ModelSpec, index: int, pool: str) -> PoolSetup:
    """Pool ``pool``'s GPU, TP degree, pipeline stages, cost model, KV capacity (per stage)
    and policy, checked."""
    dis = scenario.disaggregation
    layout = pool_layout(scenario.experts, scenario.cluster, dis, pool)  # the pool's own expert layout
    policy = dis.policies[pool]
    own = dis.pool(pool).policy is not None
    gpu, tp, backend = replica_backend(scenario, model, dis.pool(pool), lambda f: pool_field(scenario, pool, f),
                                       (policy.params, f"disaggregation.{pool}.policy" if own else "policy"), layout)
    stages = dis.pool_pipeline(pool, scenario.cluster)
    budget = checked_budget(scenario, model, gpu, tp, pool_field(scenario, pool, "hardware"), policy.params,
                            stages, layout)
    return PoolSetup(index, dis.pool(pool).replicas, gpu, tp, backend, policy.cls, policy.params, budget.blocks,
                     stages, budget, pool=pool, router=dis.pool_router(pool))


def check_pool_fits(workload: Workload, scenario: Scenario, pool: PoolSetup, tokens) -> None:
    """A request whose KV (``tokens`` per request) can never fit one replica of ``pool`` is a user error."""
    misfit = first_misfit(tokens, scenario.kv_cache.block_size, pool.kv_blocks)
    if misfit is not None:
        i, need, count = misfit
        raise SimbatchError(
            scenario.where("workload"),
            f"request {i} needs {need} KV blocks on the {pool.pool} pool, whose replicas hold "
            f"{pool.kv_blocks} ({count} request(s) too large); set workload.max_total_tokens "
            f"or use more memory")


def build_pools(scenario: Scenario, model: ModelSpec) -> list[PoolSetup]:
    """The prefill pool and the decode pool, built and checked (:func:`build_pool`)."""
    return [build_pool(scenario, model, i, name) for i, name in enumerate(POOLS)]


def check_pools_fit(workload: Workload, scenario: Scenario, pools: list[PoolSetup]) -> None:
    """Every request's prompt and first token fit a prefill replica, its prompt and output a
    decode replica (:func:`check_pool_fits`)."""
    prompt, max_context = workload.prompt_tokens, scenario.model.max_context
    served = ~beyond_window(workload, max_context)  # the rest are refused at arrival
    check_pool_fits(workload, scenario, pools[0], held_tokens(scenario, prompt, 1, max_context) * served)
    check_pool_fits(workload, scenario, pools[1],
                    held_tokens(scenario, prompt, workload.output_tokens, max_context) * served)


def build_replicas(env, scenario: Scenario, pools: list[PoolSetup], log: EventLog, seqs: list,
                   fast_forward: bool, max_context: int) -> tuple[list[list], list]:
    """Each pool's replicas (own KV cache and policy; :func:`build_group_replicas`) and its router:
    the prefill pool's KV caches are prefix caches where ``kv_cache.prefix_caching`` says so,
    the decode pool's hold prompts computed elsewhere (:class:`DecodeKVCache`)."""
    kv_params = scenario.kv_cache
    replicas, routers = [], []
    for pool, cls in zip(pools, (PrefillReplica, DecodeReplica)):
        if cls is PrefillReplica:
            def make_kv(pool=pool):
                return build_kv_cache(pool.kv_blocks, kv_params, pool.policy_cls, log, max_context,
                                      reforms_batch=issubclass(pool.policy_cls, IterationPolicy))
        else:
            def make_kv(pool=pool):
                return DecodeKVCache(pool.kv_blocks, kv_params.block_size, kv_params.mode, kv_params.reserve,
                                     max_context)
        router_cls = ROUTER_CLASSES[pool.router]
        first = sum(len(members) for members in replicas)
        replicas.append(build_group_replicas(env, pool, log, seqs, fast_forward, router_cls, first, make_kv, cls))
        routers.append(router_cls(replicas[-1]))
    return replicas, routers


def dispatch_prefill(env, workload: Workload, prefill: list, decode_limits: list[float], seqs: list,
                     log: EventLog, router, request_s: float = 0.0, window: int | None = None):
    """SimPy process: each arrival joins a prefill replica as a one-token request, ``request_s``
    after the client sent it (the engine's front end). A request longer than the model's context
    ``window`` is refused, as colocated (:func:`~simbatch.engine.dispatcher.window_note`); one the
    prefill pool (prompt + 1 token) or the decode pool (prompt + output) cannot serve is rejected."""
    limits = serve_limits(prefill)
    arrival, prompt = workload.arrival_s.tolist(), workload.prompt_tokens.tolist()
    output = workload.output_tokens.tolist()
    priority = workload.priority.tolist() if workload.priority is not None else [0] * len(arrival)
    ceiling = max(decode_limits)
    labels = prefix_labels(workload, prefill, log)  # None unless the prefill pool caches prefixes
    rejected = refused = 0
    log.arrival_s[:] = workload.arrival_s
    for i, t in enumerate(arrival):
        if t + request_s > env.now:
            yield env.timeout(t + request_s - env.now)
        if window is not None and prompt[i] + output[i] > window:
            refused += 1
            continue
        candidates = [r for r, lim in zip(prefill, limits) if prompt[i] + 1 <= lim]
        if not candidates or prompt[i] + output[i] > ceiling:
            rejected += 1
            continue
        seq = Sequence(i, t, prompt[i], 1, priority[i], labels[i] if labels else None)
        seqs[i] = seq
        replica = router.pick(seq, candidates if len(candidates) < len(prefill) else prefill, env.now)
        log.replica[i] = replica.index
        replica.submit(seq)
    if refused:
        log.note(window_note(refused, window))
    if rejected:
        log.note(f"{rejected} request(s) rejected: longer than a prefill replica (prompt + 1 token) or a "
                 f"decode replica (prompt + output, at most {ceiling} tokens) serves")


def gpu_share(pool: PoolSetup, num_layers: int) -> float:
    """The largest share of a replica's KV cache one of its GPUs holds: its stage's layers
    (the stage with the most) over its ``tensor_parallel`` GPUs; 1 / TP without a pipeline."""
    return largest_stage_share(num_layers, pool.pipeline_parallel) / pool.tensor_parallel


def link_lanes(prefill: list, decode: list, pools: list[PoolSetup], num_layers: int) -> dict:
    """Parallel GPU links per (prefill, decode) replica pair: the prompt's KV bytes over the
    bytes the busiest GPU at either end sends or receives, min(TP_prefill, TP_decode) without
    pipelines. Each GPU has its own link and sends (receives) the KV of its heads in its stage's
    layers, so a prefill replica at TP2 and a decode replica at TP1 x PP2 move it over two
    lanes: each prefill GPU sends half the heads of every layer, each decode stage receives
    every head of half the layers (docs/scenarios.md, "disaggregation")."""
    lanes = 1.0 / max(gpu_share(p, num_layers) for p in pools)
    if all(p.pipeline_parallel == 1 for p in pools):
        lanes = min(p.tensor_parallel for p in pools)  # the same figure, as an exact integer
    return {(p.index, d.index): lanes for p in prefill for d in decode}


def simulate_disaggregated(scenario: Scenario, fast_forward: bool = True) -> RunResult:
    """Run ``scenario`` (``scenario.is_disaggregated``) to completion; see the package docstring."""
    return run_pools(scenario, fast_forward)[0]


def run_pools(scenario: Scenario, fast_forward: bool = True) -> tuple[RunResult, list]:
    """:func:`simulate_disaggregated`, also returning every replica (prefill pool first), as
    left at the end of the run (tests read their KV caches)."""
    dis, model = scenario.disaggregation, scenario.model
    workload = scenario.build_workload()
    check_fits_in_memory(len(workload), scenario.where("workload"),
                         num_replicas=dis.prefill.replicas + dis.decode.replicas,
                         replicas_where=scenario.where("disaggregation"))
    pools = build_pools(scenario, model)
    check_pools_fit(workload, scenario, pools)

    log = EventLog(len(workload), sum(p.count for p in pools))
    log.enable_disaggregation()
    for note in workload.notes:
        log.note(note)
    env = simpy.Environment()
    seqs: list[Sequence | None] = [None] * len(workload)
    (prefill, decode), (prefill_router, decode_router) = build_replicas(env, scenario, pools, log, seqs,
                                                                        fast_forward, model.max_context)
    decode_limits = serve_limits(decode)
    handoff = Handoff(env, log, seqs, workload.output_tokens.tolist(), decode, decode_router, decode_limits,
                      dis.link, model.kv_bytes_per_token, link_lanes(prefill, decode, pools, model.num_layers),
                      dis.transfer)
    for r in prefill:
        r.handoff = handoff
    env.process(dispatch_prefill(env, workload, prefill, decode_limits, seqs, log, prefill_router,
                                 scenario.engine.request_s, model.max_context))
    env.run()
    flush_unfinished(seqs, prefill + decode, log)
    result = RunResult(scenario, workload, log, model, pools[0].gpu, pools[0].backend, scenario.policy.params, pools,
                       disaggregation=describe(dis, pools, scenario.cluster))
    return result, prefill + decode


def describe(dis, pools: list[PoolSetup], cluster) -> dict:
    """What the two pools and the link are, for ``summary.json``'s ``disaggregation`` section."""
    out = {"link": dis.link.describe(), "transfer": dis.transfer.describe(),
           "gpus": sum(p.count * p.gpus_per_replica for p in pools)}
    for p in pools:
        out[p.pool] = {"replicas": p.count, "tensor_parallel": p.tensor_parallel,
                       "pipeline_parallel": p.pipeline_parallel, "gpus_per_replica": p.gpus_per_replica,
                       "hardware": p.gpu.name, "policy": p.policy_cls.kind, "router": p.router,
                       "kv_blocks": p.kv_blocks, "kv_budget": p.kv_budget.describe()}
        ep, dispatch = dis.pool_experts(p.pool, cluster)
        if ep:
            out[p.pool].update(expert_parallel=True, expert_dispatch=dispatch)
    return out
