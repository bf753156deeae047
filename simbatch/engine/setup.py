"""What every simulated run is built from, colocated or disaggregated: replica groups, their
GPU, cost model and KV capacity, the checks that requests fit, the run's result, and the
accounting of requests left unfinished. Below both builders (:mod:`simbatch.engine.simulation`,
:mod:`simbatch.engine.disaggregation.build`), which import it and never each other's internals."""

from __future__ import annotations

from dataclasses import dataclass, field

from simbatch.catalog.hardware import GPUSpec, get_gpu
from simbatch.catalog.kv_budget import KVBudget, size_budget
from simbatch.catalog.links import get_link
from simbatch.catalog.models import ModelSpec
from simbatch.catalog.parallelism import ExpertLayout
from simbatch.core.eventlog import EventLog
from simbatch.core.kvcache import reserved_tokens
from simbatch.core.sequence import FINISHED, Sequence
from simbatch.costmodel import build_cost_model
from simbatch.costmodel.model_terms import check_tensor_parallel, linear_rate
from simbatch.costmodel.pipeline import largest_stage_share
from simbatch.engine.replica import Replica
from simbatch.errors import SimbatchError
from simbatch.policies.routers import StepClock
from simbatch.scenario.spec import Scenario
from simbatch.scenario.speculative import describe as describe_speculative
from simbatch.scenario.speculative import drafter_memory
from simbatch.workload import Workload


@dataclass
class ReplicaGroupSetup:
    """One replica group as built: its GPU, TP degree, cost model, policy and KV capacity."""

    index: int  # group number, in the order of cluster.replicas
    count: int
    gpu: GPUSpec
    tensor_parallel: int
    backend: object
    policy_cls: type
    policy_params: object
    kv_blocks: int
    pipeline_parallel: int = 1
    kv_budget: KVBudget | None = None  # how one GPU of a replica splits its memory (simbatch.catalog.kv_budget)

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica of this group runs on (tensor parallel x pipeline stages)."""
        return self.tensor_parallel * self.pipeline_parallel

    def describe(self) -> dict:
        """What a replica of this group is, for the summary's per-replica section."""
        out = {"group": self.index, "hardware": self.gpu.name, "tensor_parallel": self.tensor_parallel,
               "policy": self.policy_cls.kind, "kv_blocks": self.kv_blocks}
        if self.pipeline_parallel > 1:
            out["pipeline_parallel"] = self.pipeline_parallel
        return out


def build_group_replicas(env, group: ReplicaGroupSetup, log: EventLog, seqs: list, fast_forward: bool,
                         router_cls: type, first_index: int, make_kv, replica_cls: type = Replica,
                         on_built=None) -> list:
    """The one replica builder, colocated and disaggregated: ``group``'s replicas of
    ``replica_cls``, numbered from ``first_index``, each with its own KV cache (``make_kv()``)
    and policy, sharing the group's cost model (behind a :class:`StepClock` only where the
    router reads the step in flight: it costs a call a step). ``on_built(replica)`` runs right
    after each one is made, before the next (controllers start their SimPy process there, so
    the processes keep the order of the replicas)."""
    members = []
    for i in range(group.count):
        policy = group.policy_cls(group.policy_params, make_kv(), note=log.note)
        backend = StepClock(group.backend, env) if router_cls.needs_step_clock else group.backend
        members.append(replica_cls(env, first_index + i, policy, backend, log, seqs, fast_forward))
        if on_built is not None:
            on_built(members[-1])
    return members


@dataclass
class RunResult:
    """Everything a run produced, before metrics.

    ``gpu`` and ``cost_model`` are the first replica group's (a cluster of one
    kind has one group); ``policy_params`` are the scenario's ``policy``;
    ``groups`` holds every group, ``group_of_replica`` each replica's group.
    """

    scenario: Scenario
    workload: Workload
    log: EventLog
    model: ModelSpec
    gpu: GPUSpec
    cost_model: object
    policy_params: object
    groups: list[ReplicaGroupSetup] = field(default_factory=list)
    disaggregation: dict | None = None  # the pools and link of a disaggregated run (else None)
    fleet: object | None = None  # an autoscaled cluster's Fleet (simbatch.engine.autoscale), else None

    @property
    def group_of_replica(self) -> list[ReplicaGroupSetup]:
        """Each replica's group, in replica order."""
        return [g for g in self.groups for _ in range(g.count)]

    def replica_info(self) -> list[dict]:
        """Per replica: index, group, hardware, TP degree, policy kind, KV blocks."""
        return [{"index": r, **g.describe()} for r, g in enumerate(self.group_of_replica)]

    def _per_replica(self, figure):
        """A GPU figure (``figure(gpu)``): one number for a single-GPU-kind cluster, else one
        per replica."""
        values = [figure(g.gpu) for g in self.group_of_replica]
        return values[0] if len(set(values)) <= 1 else values

    @property
    def peak_flops(self):
        """Peak FLOP/s per GPU (a list, per replica, when the GPUs differ): the rate the linear
        layers run at, FP8 or INT8 for weights quantised to a format the GPU computes in
        (MFU is then relative to that peak, as FP8 training and serving reports state it)."""
        def peak(gpu):
            return linear_rate(self.model, gpu)

        return self._per_replica(peak) if self.groups else peak(self.gpu)

    @property
    def peak_bandwidth(self):
        """Peak HBM bytes/s per GPU (a list, per replica, when the GPUs differ)."""
        return self._per_replica(lambda gpu: gpu.hbm_bandwidth) if self.groups else self.gpu.hbm_bandwidth


def kv_budget_per_replica(scenario: Scenario, model: ModelSpec, gpu: GPUSpec,
                          tensor_parallel: int | None = None, policy_params=None,
                          pipeline_parallel: int | None = None, layout: ExpertLayout | None = None) -> KVBudget:
    """How one replica's GPU splits its memory (TP degree, pipeline stages and expert layout: the
    cluster's unless given) running a policy with ``policy_params`` (the scenario's policy's unless
    given: the engine's start-up profiling pass depends on it), and the KV pool that results
    (:mod:`simbatch.catalog.kv_budget`; ``kv_cache.num_gpu_blocks`` replaces the rule's blocks)."""
    kv = scenario.kv_cache
    tp = tensor_parallel or scenario.cluster.tensor_parallel
    stages = pipeline_parallel or scenario.cluster.pipeline_parallel
    params = scenario.policy.params if policy_params is None else policy_params
    # Pipeline stages hold their layers' weights and KV; the stage with the most layers binds.
    share = largest_stage_share(model.num_layers, stages)
    held = (scenario.experts if layout is None else layout).held_weight_bytes(model)
    weights = held * share / tp + scenario.engine.loaded_extra_bytes(model)
    per_token = model.kv_bytes_per_token_per_gpu(tp) * share
    if scenario.speculative is not None:  # the drafter's weights, and its KV beside every token's
        drafter_weights, drafter_kv = drafter_memory(scenario.speculative, scenario.drafter, tp)
        weights, per_token = weights + drafter_weights, per_token + drafter_kv
    return size_budget(total_bytes=gpu.memory_bytes, utilization=kv.gpu_memory_utilization,
                       weight_bytes=weights, bytes_per_block=kv.block_size * per_token,
                       block_size=kv.block_size, num_gpu_blocks=kv.num_gpu_blocks,
                       **scenario.engine.memory_terms(model, tp, params, gpu.memory_bytes))


def kv_blocks_per_replica(scenario: Scenario, model: ModelSpec, gpu: GPUSpec,
                          tensor_parallel: int | None = None, where: str = "hardware",
                          policy_params=None, pipeline_parallel: int | None = None) -> int:
    """KV blocks of one replica (:func:`kv_budget_per_replica`); a model that leaves no room
    for KV is a user error naming ``where``."""
    return checked_budget(scenario, model, gpu, tensor_parallel, where, policy_params, pipeline_parallel).blocks


def checked_budget(scenario: Scenario, model: ModelSpec, gpu: GPUSpec, tensor_parallel: int | None = None,
                   where: str = "hardware", policy_params=None, pipeline_parallel: int | None = None,
                   layout: ExpertLayout | None = None) -> KVBudget:
    """:func:`kv_budget_per_replica`, refusing a budget without one block (a user error naming
    ``where``, or ``kv_cache.block_size`` when a smaller block would fit)."""
    budget = kv_budget_per_replica(scenario, model, gpu, tensor_parallel, policy_params, pipeline_parallel, layout)
    kv, tp = scenario.kv_cache, tensor_parallel or scenario.cluster.tensor_parallel
    if budget.blocks >= 1:
        return budget
    held = (scenario.experts if layout is None else layout).held_weight_bytes(model)
    if budget.left_bytes >= budget.bytes_per_block / kv.block_size:
        raise SimbatchError(scenario.where("kv_cache.block_size"),
                            f"{kv.block_size:,} tokens per block: one block of {model.name} needs more memory than "
                            f"{gpu.name} has left for the KV cache; use a block of 16 or 32 tokens")
    raise SimbatchError(
        scenario.where(where),
        f"{model.name} weights ({held / 2**30:.1f} GiB over {tp} GPU(s)) leave no room "
        f"for a KV cache in {gpu.name} x gpu_memory_utilization {kv.gpu_memory_utilization}; "
        f"raise cluster.tensor_parallel or pick a larger GPU")


def first_misfit(tokens, block_size: int, blocks: int) -> tuple[int, int, int] | None:
    """(index, blocks it needs, how many misfit) of the first request whose ``tokens`` need
    more than ``blocks`` KV blocks; None when every one fits."""
    need = -(-tokens // block_size)
    bad = need > blocks
    if not bad.any():
        return None
    i = int(bad.argmax())
    return i, int(need[i]), int(bad.sum())


def beyond_window(workload: Workload, max_context: int):
    """Which requests the model's context window cannot hold (prompt + output > ``max_context``):
    the dispatchers refuse them under every policy, so they never need KV blocks."""
    return (workload.prompt_tokens + workload.output_tokens) > max_context


def held_tokens(scenario: Scenario, prompt, output, max_context: int):
    """Tokens each request holds at most: prompt + output, or what a ``max_length`` cache
    reserves for it (``kv_cache.reserve``)."""
    kv = scenario.kv_cache
    return reserved_tokens(prompt, output, kv.reserve, max_context) if kv.mode == "max_length" else prompt + output


def check_requests_fit(workload: Workload, scenario: Scenario, blocks: int, model: ModelSpec) -> None:
    """A request whose prompt + output (or reservation) can never fit in one replica's KV cache
    (the largest, in a mixed cluster) is a user error."""
    tokens = held_tokens(scenario, workload.prompt_tokens, workload.output_tokens, model.max_context)
    tokens = tokens * ~beyond_window(workload, model.max_context)  # refused at arrival: they hold none
    misfit = first_misfit(tokens, scenario.kv_cache.block_size, blocks)
    if misfit is not None:
        i, need, count = misfit
        kv = scenario.kv_cache
        reserving = (f", reserving {int(tokens[i])} tokens (kv_cache.reserve {kv.reserve})"
                     if kv.mode == "max_length" and kv.reserve != "oracle" else "")
        raise SimbatchError(
            scenario.where("workload"),
            f"request {i} (prompt {int(workload.prompt_tokens[i])} + output "
            f"{int(workload.output_tokens[i])} tokens{reserving}) needs {need} KV blocks, but one replica of "
            f"{model.name} holds {blocks} ({count} request(s) too large); "
            f"set workload.max_total_tokens or use more memory")


def group_field(scenario: Scenario, i: int, name: str) -> str:
    """Where group ``i``'s ``name`` comes from: ``cluster.replicas[i].name`` when the group sets
    it, else the scenario's top-level field (errors then name the line to fix)."""
    if scenario.cluster.is_grouped and getattr(scenario.cluster.groups[i], name) is not None:
        return f"cluster.replicas[{i}].{name}"
    return "cluster.tensor_parallel" if name == "tensor_parallel" else name


def group_backend(scenario: Scenario, model: ModelSpec, i: int) -> tuple[GPUSpec, int, object]:
    """Group ``i``'s GPU, TP degree and cost model (its own fields, else the scenario's)."""
    return replica_backend(scenario, model, scenario.cluster.groups[i], lambda f: group_field(scenario, i, f))


def replica_backend(scenario: Scenario, model: ModelSpec, own, field,
                    policy: tuple[object, str] | None = None,
                    layout: ExpertLayout | None = None) -> tuple[GPUSpec, int, object]:
    """GPU, TP degree and cost model of replicas whose spec ``own`` may set ``hardware``,
    ``tensor_parallel``, ``cost_model`` and the pipeline fields (``pipeline_parallel``,
    ``micro_batches``, ``pipeline_schedule``, ``pipeline_link``; None or absent: the
    scenario's); ``field(name)`` is the dotted field an error about ``name`` points at (a
    group's, a pool's). ``policy``: (parameters, field) of the policy these replicas run
    (None: the scenario's and every group's), checked against a pipeline. ``layout``: their
    expert layout (None: the scenario's)."""
    gpu = scenario.gpu if own.hardware is None else get_gpu(own.hardware, scenario.where(field("hardware")))
    tp = check_tensor_parallel(own.tensor_parallel or scenario.cluster.tensor_parallel, model,
                               scenario.where(field("tensor_parallel")))
    spec = scenario.data.get("cost_model") if own.cost_model is None else own.cost_model
    c, names = scenario.cluster, ("pipeline_parallel", "micro_batches", "pipeline_schedule", "pipeline_link")
    mine = {n: getattr(own, n, None) is not None for n in names}
    stages, micro, schedule, link = (getattr(own if mine[n] else c, n) for n in names)
    where = {n: scenario.where(field(n) if mine[n] else f"cluster.{n}") for n in names}
    if stages > 1:
        _check_pipeline(scenario, model, stages, where["pipeline_parallel"], policy)
    backend = build_cost_model(spec, model, gpu, tp, scenario.where(field("cost_model")), base_dir=scenario.base_dir,
                               overhead=scenario.engine.overhead_params(), engine_where=scenario.where("engine"),
                               pipeline=(stages, micro, schedule,
                                         get_link(link, where["pipeline_link"]) if link else None),
                               layout=scenario.experts if layout is None else layout)
    return gpu, tp, backend


def _check_pipeline(scenario: Scenario, model: ModelSpec, stages: int, where: str,
                    policy: tuple[object, str] | None = None) -> None:
    """What a replica of ``stages`` pipeline stages cannot be combined with (one-line errors
    naming ``where``); ``policy``: (parameters, field) of the policy it runs (None: the
    scenario's and every group's)."""
    if stages > model.num_layers:
        raise SimbatchError(where, f"{stages} stages for {model.name}'s {model.num_layers} layers")
    params, at = policy or (None, "policy")
    runs = [params] if policy else [p.params for p in (scenario.policy, *scenario.group_policies)]
    if any(getattr(p, "streams", 1) > 1 for p in runs):
        raise SimbatchError(where, f"two-stream steps on a pipeline are not modelled; set {at}.streams to 1")


def build_backend(scenario: Scenario) -> tuple[ModelSpec, GPUSpec, object]:
    """The scenario's model, GPU and cost model (the first replica group's; every group is
    built, so every group's errors surface; they name the scenario's fields)."""
    model = scenario.model
    built = [group_backend(scenario, model, i) for i in range(len(scenario.cluster.groups))]
    gpu, _, backend = built[0]
    return model, gpu, backend


def flush_unfinished(seqs: list[Sequence | None], replicas: list[Replica], log: EventLog) -> None:
    """Record what requests that never finished did get (tokens, preemptions, open token runs)."""
    for replica in replicas:
        replica.group.sync_all()  # counters a steady decode run still owes them
    unfinished = 0
    for seq in seqs:
        if seq is None or seq.status == FINISHED:
            continue
        unfinished += 1
        log.num_emitted[seq.id] = seq.num_generated
        log.num_preemptions[seq.id] = seq.num_preemptions
        log.leave(seq.id)  # its open token run, if any
    if unfinished:
        log.note(f"{unfinished} request(s) did not finish")


def speculative_backend(scenario: Scenario, backend, gpu: GPUSpec, tp: int, tp_where: str):
    """``backend`` with the drafter's passes added when the scenario speculates (else itself):
    the drafter runs on the target's GPUs at its tensor-parallel degree
    (:mod:`simbatch.costmodel.speculative`)."""
    spec = scenario.speculative
    if spec is None:
        return backend
    from simbatch.costmodel.speculative import SpeculativeCostModel, build_drafter

    drafter = scenario.drafter
    if drafter is not None:
        check_tensor_parallel(tp, drafter, scenario.where(tp_where))
    params = getattr(backend, "params", None)
    own = build_drafter(drafter, gpu, tp, params if isinstance(params, dict) else {}, spec.draft_pass_overhead_s)
    return SpeculativeCostModel(backend, own, describe_speculative(spec, drafter))
