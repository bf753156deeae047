"""Scenarios: one YAML file says what to simulate; ``--set`` overrides any field.

A scenario is checked as a whole when it is loaded, so a typo fails before
anything runs, with the file and the dotted field in the message.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from simbatch.control.params import KNOBS, ControlParams, parse_control
from simbatch.scenario.disaggregation import DisaggregationParams, parse_disaggregation
from simbatch.policies.routers import ROUTERS
from simbatch.catalog.servers import EngineParams, parse_engine, with_engine_defaults
from simbatch.scenario.dotted import set_dotted  # noqa: F401  (re-exported: --set, sweep grids)
from simbatch.costmodel.pipeline import SCHEDULES
from simbatch.errors import SimbatchError
from simbatch.catalog.hardware import GPUSpec, get_gpu
from simbatch.catalog.models import EXPERT_DISPATCHES, ModelSpec, get_model
from simbatch.scenario.quantization import apply_quantization
from simbatch.scenario.speculative import SpeculativeParams, drafter_model, parse_speculative
from simbatch.core.params import MAX_MICRO_BATCHES, MAX_REPLICAS, parse_params, require
from simbatch.policies import PolicySpec, parse_policy, parse_policy_spec
from simbatch.files.yamlio import compose, load_yaml, read_text, safe_load

if TYPE_CHECKING:
    from simbatch.workload import Workload

TOP_LEVEL = ("name", "description", "workload", "model", "quantization", "hardware", "cluster", "policy",
             "policies", "cost_model", "kv_cache", "slo", "seed", "sweep", "control", "disaggregation",
             "variants", "engine", "speculative")


GROUP_FIELDS = ("hardware", "tensor_parallel", "policy", "cost_model")  # a group may override these
MAX_GPU_BLOCKS = 10**9  # kv_cache.num_gpu_blocks: 16 billion tokens at 16 a block, past any GPU


@dataclass(frozen=True)
class ReplicaGroup:
    """``count`` alike replicas; a field left out (None) falls back to the scenario's top level.

    ``hardware`` and ``cost_model`` are specs checked when the run is built;
    ``policy`` is merged onto the scenario's policy when it names the same kind
    (or none), and replaces it when it names another (as ``--set policy.kind`` does).
    """

    count: int = 1
    hardware: object = None
    tensor_parallel: int | None = None
    policy: object = None
    cost_model: object = None

    def __post_init__(self):
        require(self.count >= 1, "count", "must be >= 1")
        require(self.count <= MAX_REPLICAS, "count", f"must be at most {MAX_REPLICAS:,} (every replica's engine is "
                                                     f"built before the first step), got {self.count:,}")
        require(self.tensor_parallel is None or self.tensor_parallel >= 1, "tensor_parallel", "must be >= 1")
        require(self.policy is None or isinstance(self.policy, dict), "policy",
                "must be a mapping, e.g. {kind: continuous, max_num_seqs: 64}")

    def policy_spec(self, base: dict) -> dict:
        """This group's ``policy:`` section given the scenario's ``base`` one."""
        if self.policy is None:
            return dict(base)
        if self.policy.get("kind", base.get("kind")) == base.get("kind"):
            return {**base, **self.policy}
        return dict(self.policy)


@dataclass(frozen=True)
class ClusterParams:
    """Replicas, each a tensor-parallel group of GPUs, and the router that spreads requests over them.

    ``replicas`` is the total count. ``groups`` lists the replica groups: one
    group of ``replicas`` identical replicas when the scenario gives a number,
    else one per entry of its ``replicas:`` list. ``routers`` are what
    ``simbatch compare`` puts side by side (empty: it compares policies).
    """

    replicas: int = 1
    tensor_parallel: int = 1
    router: str = "round_robin"
    routers: list[str] = field(default_factory=list)
    groups: tuple[ReplicaGroup, ...] = ()
    # Pipeline stages per replica (each on tensor_parallel GPUs), the micro-batches a step is
    # cut into (0: one per stage) and their schedule (simbatch.costmodel.pipeline).
    pipeline_parallel: int = 1
    micro_batches: int = 0
    pipeline_schedule: str = "overlap"
    pipeline_link: str = ""  # a simbatch.catalog.links preset between stages ("": the GPU's own link)
    # Mixtures of experts: each routed expert whole on one GPU of a replica's tensor-parallel
    # group (vLLM's --enable-expert-parallel), and how the MoE layers communicate then
    # (docs/cost_models.md, "Expert parallelism"); applied to the model by apply_expert_layout.
    expert_parallel: bool = False
    expert_dispatch: str = "allreduce"
    # DeepSeek-style data-parallel attention: each replica is a data-parallel rank (attention
    # and dense layers on its own requests) and the routed experts are spread over all the
    # replicas' GPUs, with all-to-all dispatch (docs/cost_models.md, "Data-parallel attention").
    data_parallel_attention: bool = False
    # DeepSeek's expert-parallel load balancer (vLLM's --enable-eplb, num_redundant_experts):
    # experts placed, and the hottest copied into redundant slots, to even the GPUs' loads.
    eplb: bool = False
    redundant_experts: int = 0

    def __post_init__(self):
        # Sizes bounded where simbatch.core.params says why (replicas built up front; micro-batches
        # beyond the sequences a step holds); redundant experts by the model (apply_expert_layout).
        require(self.replicas >= 1, "replicas", "must be >= 1")
        require(self.replicas <= MAX_REPLICAS, "replicas", f"must be at most {MAX_REPLICAS:,} (every replica's engine "
                                                           f"is built before the first step), got {self.replicas:,}")
        require(self.redundant_experts >= 0, "redundant_experts", "must be >= 0")
        require(self.tensor_parallel >= 1, "tensor_parallel", "must be >= 1")
        require(self.pipeline_parallel >= 1, "pipeline_parallel", "must be >= 1")
        require(self.micro_batches >= 0, "micro_batches", "must be >= 0 (0: one per pipeline stage)")
        require(self.micro_batches <= MAX_MICRO_BATCHES, "micro_batches", f"must be at most {MAX_MICRO_BATCHES:,} (a "
                f"micro-batch holds at least one of the sequences a step runs), got {self.micro_batches:,}")
        require(self.pipeline_schedule in SCHEDULES, "pipeline_schedule",
                f"unknown schedule {self.pipeline_schedule!r}; allowed: {', '.join(SCHEDULES)}")
        require(self.expert_dispatch in EXPERT_DISPATCHES, "expert_dispatch",
                f"unknown dispatch {self.expert_dispatch!r}; allowed: {', '.join(EXPERT_DISPATCHES)}")
        allowed = ", ".join(ROUTERS)
        require(self.router in ROUTERS, "router", f"unknown router {self.router!r}; allowed: {allowed}")
        for name in self.routers:
            require(name in ROUTERS, "routers", f"unknown router {name!r}; allowed: {allowed}")
        if not self.groups:
            object.__setattr__(self, "groups", (ReplicaGroup(self.replicas),))
        require(sum(g.count for g in self.groups) == self.replicas, "replicas", "does not match the groups' counts")

    @property
    def is_grouped(self) -> bool:
        """True when the scenario listed replica groups (rather than a count)."""
        return len(self.groups) > 1 or any(getattr(self.groups[0], f) is not None for f in GROUP_FIELDS)

    def group_of_replica(self) -> list[int]:
        """Group index of each replica, in replica order (groups are numbered in file order)."""
        return [i for i, g in enumerate(self.groups) for _ in range(g.count)]


def parse_cluster(values, where: str) -> ClusterParams:
    """The ``cluster:`` section: ``replicas`` is a count or a list of groups (see :class:`ReplicaGroup`)."""
    if values is not None and not isinstance(values, dict):
        raise SimbatchError(where, f"expected a mapping like {{replicas: 2}}, got {values!r}")
    values = dict(values or {})
    if "groups" in values:  # filled from a replicas list, never written by hand
        raise SimbatchError(f"{where}.groups", "unknown field; allowed: replicas, tensor_parallel, router, routers, "
                                               "pipeline_parallel, micro_batches, pipeline_schedule, pipeline_link, "
                                               "expert_parallel, expert_dispatch, data_parallel_attention, eplb, "
                                               "redundant_experts")
    spec = values.get("replicas")
    if not isinstance(spec, list):
        return parse_params(ClusterParams, values, where)
    if not spec:
        raise SimbatchError(f"{where}.replicas", "an empty list; give a count or at least one group")
    groups = []
    for i, item in enumerate(spec):
        if not isinstance(item, dict):
            raise SimbatchError(f"{where}.replicas[{i}]",
                                f"expected a mapping like {{count: 2, hardware: h100-sxm}}, got {item!r}")
        groups.append(parse_params(ReplicaGroup, item, f"{where}.replicas[{i}]"))
    cluster = parse_params(ClusterParams, {**values, "replicas": 1}, where)
    return replace(cluster, replicas=sum(g.count for g in groups), groups=tuple(groups))


@dataclass(frozen=True)
class KVCacheParams:
    """KV-cache sizing and reservation mode (see :mod:`simbatch.core.kvcache`)."""

    block_size: int = 16
    mode: str = "paged"
    gpu_memory_utilization: float = 0.9
    reserve: str = "oracle"  # what mode max_length reserves: oracle | pow2 | max (simbatch.core.kvcache)
    prefix_caching: bool = False  # share cached prompt prefixes (simbatch.core.prefix_cache)
    hash_block_size: int = 512  # tokens per trace hash_id (Mooncake: 512)
    # The server's own block count (vLLM's num_gpu_blocks_override, or the "# GPU blocks" /
    # "GPU KV cache size" line of its start-up log): replaces the engine's memory rule.
    num_gpu_blocks: int | None = None

    def __post_init__(self):
        require(self.block_size >= 1, "block_size", "must be >= 1")
        require(self.num_gpu_blocks is None or 1 <= self.num_gpu_blocks <= MAX_GPU_BLOCKS, "num_gpu_blocks",
                f"must be a whole number of blocks from 1 to {MAX_GPU_BLOCKS:,}")
        require(self.hash_block_size >= 1, "hash_block_size", "must be >= 1")
        require(self.mode in ("paged", "max_length"), "mode",
                f"unknown mode {self.mode!r}; allowed: paged, max_length")
        require(self.reserve in ("oracle", "pow2", "max"), "reserve",
                f"unknown reserve {self.reserve!r}; allowed: oracle, pow2, max")
        require(self.reserve == "oracle" or self.mode == "max_length", "reserve",
                f"{self.reserve!r} applies to mode max_length (paged caches reserve nothing ahead)")
        require(0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization", "must be in (0, 1]")


@dataclass(frozen=True)
class SLOParams:
    """Latency targets in milliseconds; a request attains the SLO when it meets every one given."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def __post_init__(self):
        for name in ("ttft_ms", "tpot_ms", "e2el_ms"):
            v = getattr(self, name)
            require(v is None or v > 0, name, "must be > 0")

    def as_dict(self) -> dict[str, float]:
        """Only the targets that are set."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class Scenario:
    """A checked scenario, parsed once into typed, frozen specs that the engine reads.

    ``data`` is the resolved YAML mapping, kept for reports, run ids and re-runs;
    every ``with_*`` change and ``--set`` override goes through :func:`from_dict`
    again, so the specs never disagree with it. The workload section stays a
    mapping until :meth:`build_workload` (building it reads the trace)."""

    data: dict
    source: str  # file name, used in error messages
    base_dir: Path  # paths inside the scenario are relative to it
    model: ModelSpec
    gpu: GPUSpec  # the top-level hardware (a replica group or pool may name its own)
    policy: PolicySpec  # the top-level policy
    group_policies: tuple[PolicySpec, ...] = ()  # one per replica group, in cluster.groups order
    control: ControlParams | None = None  # None: no controller (absent or disabled)
    cluster: ClusterParams = field(default_factory=ClusterParams)
    kv_cache: KVCacheParams = field(default_factory=KVCacheParams)
    slo: SLOParams = field(default_factory=SLOParams)
    disaggregation: DisaggregationParams | None = None  # None: no such section
    engine: EngineParams = field(default_factory=EngineParams)  # the serving engine's overhead and memory
    speculative: SpeculativeParams | None = None  # None: no speculative decoding
    drafter: ModelSpec | None = None  # the model whose passes propose drafts (None: none, or n-gram)
    # Where the top-level policy's knobs came from (:func:`policy_knobs`): "policy",
    # "policies.<kind>" or "defaults", plus any "--set policy.<knob>"; printed by `simbatch run`.
    policy_source: str = field(default="policy", compare=False)

    def build_workload(self, seed: int | None = None) -> Workload:
        """The scenario's requests (``seed``: the scenario's unless given)."""
        from simbatch.workload import build_workload  # pandas, only when a run needs it

        return build_workload(self.data["workload"], base_dir=self.base_dir,
                              seed=self.seed if seed is None else seed, where=self.where("workload"))

    @property
    def is_disaggregated(self) -> bool:
        """True when a prefill pool and a decode pool serve (the section is present and enabled)."""
        return self.disaggregation is not None and self.disaggregation.enabled

    @property
    def layouts(self) -> list[str]:
        """Layouts ``simbatch compare`` puts side by side (``disaggregation.layouts``; empty: none)."""
        return list(self.disaggregation.layouts) if self.disaggregation is not None else []

    @property
    def name(self) -> str:
        return str(self.data.get("name", Path(self.source).stem))

    @property
    def seed(self) -> int:
        return int(self.data.get("seed", 0))

    def where(self, field_path: str) -> str:
        """``"<file>: <field>"`` for error messages."""
        return f"{self.source}: {field_path}"

    def with_policy(self, kind: str) -> "Scenario":
        """The same scenario under policy ``kind``, its knobs chosen by :func:`policy_knobs`
        (``policies.<kind>``, the current policy's when it is already ``kind``, else the defaults)."""
        data = copy.deepcopy(self.data)
        old = data["policy"].get("kind")
        params, origin = policy_knobs(data, kind)
        data["policy"] = {**params, "kind": kind}
        groups = (data.get("cluster") or {}).get("replicas")
        for group in groups if isinstance(groups, list) else []:
            # A group's own policy stays only if it is of this kind (its knobs may not fit another).
            if isinstance(group, dict) and isinstance(group.get("policy"), dict) \
                    and group["policy"].get("kind", old) != kind:
                del group["policy"]
        control = data.get("control")
        if isinstance(control, dict):  # a controller that cannot drive this policy is dropped
            if (control.get("kind", "slo"), kind) not in KNOBS:
                del data["control"]
        for name in ("prefill", "decode"):  # a disaggregated pool's own policy: the same rule
            pool = (data.get("disaggregation") or {}).get(name)
            if isinstance(pool, dict) and isinstance(pool.get("policy"), dict) \
                    and pool["policy"].get("kind", old) != kind:
                del pool["policy"]
        return replace(from_dict(data, self.source, self.base_dir), policy_source=origin)

    def with_router(self, router: str) -> "Scenario":
        """The same scenario with ``cluster.router`` set to ``router``."""
        data = copy.deepcopy(self.data)
        data["cluster"] = {**(data.get("cluster") or {}), "router": router}
        return from_dict(data, self.source, self.base_dir)

    @property
    def variants(self) -> list[str]:
        """Names of the scenario's ``variants`` (see :mod:`simbatch.scenario.variants`; empty: none)."""
        return list(self.data.get("variants") or {})

    def with_variant(self, name: str) -> "Scenario":
        """The scenario with variant ``name``'s fields applied (and no variants of its own)."""
        from simbatch.scenario.variants import variant_data

        overrides = (self.data.get("variants") or {}).get(name)
        if overrides is None:
            raise SimbatchError(self.where("variants"), f"no variant {name!r}; defined: {', '.join(self.variants)}")
        return from_dict(variant_data(self.data, overrides, self.where(f"variants.{name}")),
                         self.source, self.base_dir)

    def with_layout(self, layout: str) -> "Scenario":
        """The same scenario served ``colocated`` (by ``cluster``) or ``disaggregated`` (by the
        ``disaggregation`` pools): sets ``disaggregation.enabled``."""
        data = copy.deepcopy(self.data)
        data["disaggregation"] = {**(data.get("disaggregation") or {}), "enabled": layout == "disaggregated"}
        return from_dict(data, self.source, self.base_dir)


def parse_value(text: str):
    """A ``--set`` value: YAML scalar or flow syntax (``8``, ``true``, ``[1, 2]``, ``{a: 1}``)."""
    try:
        return safe_load(text)
    except yaml.YAMLError:
        return text


def policy_knobs(data: dict, kind) -> tuple[dict, str]:
    """The knobs policy ``kind`` runs with in scenario ``data``, and where they come from.

    The one rule for every change of policy kind (``compare``'s rows, ``--set policy.kind``,
    sweep grids, capacity candidates): the scenario's ``policies.<kind>`` section, else the
    current ``policy`` when it is already ``kind``, else none (the kind's defaults). Returns
    ``(knobs without kind, "policies.<kind>" | "policy" | "defaults")``.
    """
    policies = data.get("policies")
    own = policies.get(kind) if isinstance(policies, dict) and isinstance(kind, str) else None
    if isinstance(own, dict):
        return dict(own), f"policies.{kind}"
    current = data.get("policy")
    if isinstance(current, dict) and current.get("kind") == kind:
        return {k: v for k, v in current.items() if k != "kind"}, "policy"
    return {}, "defaults"


def apply_overrides(data: dict, overrides: list[str], source: str = "--set") -> dict:
    """Apply ``key.path=value`` overrides. A new ``policy.kind`` takes its knobs by
    :func:`policy_knobs` (``policies.<kind>``, else the defaults), never the old policy's."""
    return override(data, overrides)[0]


def override(data: dict, overrides: list[str]) -> tuple[dict, str]:
    """:func:`apply_overrides`, and where the top-level policy's knobs then come from
    (:attr:`Scenario.policy_source`: ``"policies.chunked_prefill, --set policy.chunk_size"``)."""
    data = copy.deepcopy(data)
    pairs = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SimbatchError(f"--set {item}", "expected KEY=VALUE, e.g. policy.kind=static")
        pairs.append((key.strip(), parse_value(value)))
    origin, extra = "policy", []
    for key, value in sorted(pairs, key=lambda kv: kv[0] != "policy.kind"):
        current = data.get("policy")
        if key == "policy.kind" and not (isinstance(current, dict) and current.get("kind") == value):
            data["policy"], origin = policy_knobs(data, value)
        elif key == "policy":
            origin, extra = "--set policy", []
        elif key.startswith("policy.") and key != "policy.kind":
            extra.append(f"--set {key}")
        set_dotted(data, key, value, f"--set {key}")
    return data, ", ".join([origin, *extra])


def read_yaml(path: Path) -> dict:
    """Read a scenario file through :func:`simbatch.files.yamlio.load_yaml`: unreadable files,
    invalid YAML, duplicate keys and alias bombs become ``file:line`` messages."""
    data = load_yaml(path, "scenario file")
    if not isinstance(data, dict):
        raise SimbatchError(str(path), "a scenario must be a YAML mapping (key: value lines)")
    return data


def from_dict(data: dict, source: str = "<scenario>", base_dir: Path | None = None) -> Scenario:
    """Check a scenario mapping and return a :class:`Scenario`."""
    for key in data:
        if key not in TOP_LEVEL:
            raise SimbatchError(f"{source}: {key}", f"unknown field; allowed: {', '.join(TOP_LEVEL)}")
    for key in ("workload", "model", "hardware", "policy"):
        if data.get(key) is None:
            raise SimbatchError(f"{source}: {key}", "missing (required)")
    if not isinstance(data["policy"], dict):
        raise SimbatchError(f"{source}: policy", "must be a mapping with a kind, e.g. {kind: continuous}")
    check_name(data, source)
    model = get_model(data["model"], f"{source}: model", base_dir=base_dir)  # config: paths are relative
    gpu = get_gpu(data["hardware"], f"{source}: hardware")
    # An engine release's scheduler defaults fill the knobs the policy leaves out (vLLM V1's budget
    # and sequence cap by GPU: simbatch.catalog.servers), in the data itself, so reports show what ran.
    data = {**data, "policy": with_engine_defaults(data["policy"], data.get("engine"), gpu.name, gpu.memory_bytes)}
    policy = parse_policy_spec(data["policy"], source, max_context=model.max_context)
    policies = data.get("policies") or {}
    if not isinstance(policies, dict):
        raise SimbatchError(f"{source}: policies", f"expected a mapping of policy kind to its knobs, e.g. "
                                                   f"{{static: {{batch_size: 8}}}}, got {policies!r}")
    for kind, params in policies.items():
        if params is not None and not isinstance(params, dict):
            raise SimbatchError(f"{source}: policies.{kind}", f"expected a mapping of knobs, got {params!r}")
        parse_policy({**(params or {}), "kind": kind}, f"{source}: policies.{kind}")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SimbatchError(f"{source}: seed", f"expected a non-negative integer, got {seed!r}")
    model = apply_quantization(model, data.get("quantization"), f"{source}: quantization")
    # checked against the policy it will drive
    slo = parse_params(SLOParams, data.get("slo"), f"{source}: slo")
    control = parse_control(data.get("control"), policy.kind, slo.as_dict(), f"{source}: control")
    cluster = parse_cluster(data.get("cluster"), f"{source}: cluster")
    group_policies = tuple(
        policy if group.policy is None else
        parse_policy_spec(group.policy_spec(data["policy"]), source, f"cluster.replicas[{i}].policy",
                          model.max_context)
        for i, group in enumerate(cluster.groups))
    disaggregation = parse_disaggregation(data.get("disaggregation"), data["policy"], source, model.max_context)
    model = apply_expert_layout(model, cluster, disaggregation, source)
    speculative, drafter = _speculative(data, model, (policy, *group_policies), disaggregation, cluster, source,
                                       base_dir)
    if data.get("variants") is not None:
        from simbatch.scenario.variants import check_variants  # below this module: it is handed from_dict

        check_variants(data, source, from_dict)
    return Scenario(
        data=data, source=source, base_dir=Path(base_dir or "."),
        model=model, gpu=gpu, policy=policy, group_policies=group_policies,
        control=control, cluster=cluster,
        kv_cache=parse_params(KVCacheParams, data.get("kv_cache"), f"{source}: kv_cache"),
        slo=slo,
        disaggregation=disaggregation,
        engine=parse_engine(data.get("engine"), f"{source}: engine"),
        speculative=speculative, drafter=drafter,
    )


def apply_expert_layout(model: ModelSpec, cluster: ClusterParams, disaggregation, source: str) -> ModelSpec:
    """``model`` with the cluster's expert layout (``expert_parallel``, ``expert_dispatch``), after
    checking that every layout in the scenario fits: a mixture of experts whose experts every
    expert-parallel replica's tensor-parallel degree (the cluster's, each group's, each pool's)
    splits evenly. A disaggregated pool may set its own layout (:func:`pool_model`)."""
    dis = disaggregation if disaggregation is not None and disaggregation.enabled else None
    if (cluster.eplb or cluster.redundant_experts) and not cluster.expert_parallel:
        field_name = "eplb" if cluster.eplb else "redundant_experts"
        raise SimbatchError(f"{source}: cluster.{field_name}", "applies with cluster.expert_parallel: true")
    if cluster.redundant_experts and not cluster.eplb:
        raise SimbatchError(f"{source}: cluster.redundant_experts", "applies with cluster.eplb: true")
    if cluster.eplb:
        model = replace(model, eplb=True, redundant_experts=cluster.redundant_experts)
    if cluster.data_parallel_attention and cluster.expert_parallel:
        return _data_parallel_attention(model, cluster, disaggregation, source)
    if not cluster.expert_parallel:
        if cluster.expert_dispatch != "allreduce":
            raise SimbatchError(f"{source}: cluster.expert_dispatch", "applies with cluster.expert_parallel: true")
        if cluster.data_parallel_attention:
            raise SimbatchError(f"{source}: cluster.data_parallel_attention", "applies with cluster.expert_parallel: "
                                                                              "true (the experts span the ranks)")
    degrees = {}  # field that sets an expert-parallel TP degree -> (degree, field that turned EP on)
    if cluster.expert_parallel:
        degrees["cluster.tensor_parallel"] = (cluster.tensor_parallel, "cluster.expert_parallel")
        degrees.update((f"cluster.replicas[{i}].tensor_parallel", (g.tensor_parallel, "cluster.expert_parallel"))
                       for i, g in enumerate(cluster.groups) if g.tensor_parallel is not None)
    for name in ("prefill", "decode") if dis is not None else ():
        pool = dis.pool(name)
        ep, _ = dis.pool_experts(name, cluster)
        own = pool.expert_parallel is not None
        if pool.expert_dispatch is not None and not ep:
            raise SimbatchError(f"{source}: disaggregation.{name}.expert_dispatch",
                                f"applies with expert parallelism (set disaggregation.{name}.expert_parallel: true)")
        if ep and (own or pool.tensor_parallel is not None):
            at = f"disaggregation.{name}.tensor_parallel" if pool.tensor_parallel is not None else "cluster.tensor_parallel"
            degrees[at] = (pool.tensor_parallel or cluster.tensor_parallel,
                           f"disaggregation.{name}.expert_parallel" if own else "cluster.expert_parallel")
    for field_name, (tp, where) in degrees.items():
        if not model.is_moe:
            raise SimbatchError(f"{source}: {where}", f"applies to a mixture of experts; {model.name} is dense")
        if model.num_experts % tp:
            raise SimbatchError(f"{source}: {where}", f"{field_name} {tp} does not split {model.name}'s "
                                                      f"{model.num_experts} experts evenly over its GPUs")
    if not cluster.expert_parallel:
        return model
    if cluster.eplb:
        check_redundant_experts(model, max(tp for tp, _ in degrees.values()), source)
    return replace(model, expert_parallel=True, expert_dispatch=cluster.expert_dispatch)


def check_redundant_experts(model: ModelSpec, gpus: int, source: str) -> None:
    """Refuse more redundant experts than ``gpus`` (the largest expert-parallel group) can use:
    with a copy of every expert on every GPU, one more copy balances nothing. The check comes
    before EPLB's placement, which deals every copy to a GPU one by one (1e9 of them hung)."""
    most = model.num_experts * (gpus - 1)
    if model.redundant_experts > most:
        raise SimbatchError(f"{source}: cluster.redundant_experts",
                            f"must be at most {most:,} for {model.name}'s {model.num_experts} experts over {gpus} "
                            f"GPUs (a copy of every expert on every GPU: {model.num_experts} x ({gpus} - 1)), "
                            f"got {model.redundant_experts:,}")


def pool_model(model: ModelSpec, cluster: ClusterParams, disaggregation, pool: str) -> ModelSpec:
    """The scenario's ``model`` laid out as disaggregated pool ``pool`` serves it (its own
    ``expert_parallel`` / ``expert_dispatch``, else the cluster's; checked by
    :func:`apply_expert_layout`)."""
    ep, dispatch = disaggregation.pool_experts(pool, cluster)
    if (ep, dispatch) == (model.expert_parallel, model.expert_dispatch):
        return model
    # EPLB (the cluster's) balances expert-parallel pools only
    eplb = ep and cluster.eplb
    return replace(model, expert_parallel=ep, expert_dispatch=dispatch, eplb=eplb,
                   redundant_experts=cluster.redundant_experts if eplb else 0)


def _data_parallel_attention(model: ModelSpec, cluster: ClusterParams, disaggregation, source: str) -> ModelSpec:
    """``model`` laid out for data-parallel attention: the cluster's replicas are the ranks,
    all alike (one TP degree, one stage, no disaggregated pools), and their GPUs together hold
    the routed experts, dispatched by all-to-all (vLLM uses its all-to-all kernels whenever
    data parallelism and expert parallelism are both on)."""
    where = f"{source}: cluster.data_parallel_attention"
    if not model.is_moe:
        raise SimbatchError(where, f"applies to a mixture of experts; {model.name} is dense")
    if cluster.is_grouped or (disaggregation is not None and disaggregation.enabled):
        raise SimbatchError(where, "needs one kind of replica (the data-parallel ranks): no replica groups "
                                   "or disaggregated pools")
    if cluster.pipeline_parallel > 1:
        raise SimbatchError(where, "is not modelled with pipeline_parallel > 1")
    if cluster.expert_dispatch != "all2all":
        raise SimbatchError(f"{source}: cluster.expert_dispatch", "data-parallel attention dispatches tokens to "
                                                                  "the experts by all-to-all: set all2all")
    gpus = cluster.replicas * cluster.tensor_parallel
    if model.num_experts % gpus:
        raise SimbatchError(where, f"{cluster.replicas} replicas x tensor_parallel {cluster.tensor_parallel} = {gpus} "
                                   f"GPUs do not split {model.name}'s {model.num_experts} experts evenly")
    check_redundant_experts(model, gpus, source)
    return replace(model, expert_parallel=True, expert_dispatch="all2all", attention_data_parallel=cluster.replicas)


def _speculative(data: dict, model: ModelSpec, policies, disaggregation, cluster, source: str, base_dir):
    """The ``speculative`` section and its drafter's model (both None when absent or off)."""
    where = f"{source}: speculative"
    params = parse_speculative(data.get("speculative"), [p.kind for p in policies], where)
    if params is None:
        return None, None
    if disaggregation is not None and disaggregation.enabled:
        raise SimbatchError(where, "speculative decoding in disaggregated pools is not modelled yet; "
                                   "set speculative.enabled to false or serve colocated")
    if cluster.pipeline_parallel > 1:
        raise SimbatchError(where, "speculative decoding on a pipeline is not modelled yet; set "
                                   "cluster.pipeline_parallel to 1")
    return params, drafter_model(params, model, where, base_dir)


def check_name(data: dict, source: str) -> None:
    """``name`` names output folders (``runs/<name>-sweep``), so it must be a plain file
    name (:func:`simbatch.files.outpaths.check_path_name`); ``description`` is free text."""
    from simbatch.files.outpaths import check_path_name

    name = data.get("name")
    if name is not None:
        check_path_name(name, f"{source}: name")
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise SimbatchError(f"{source}: description", f"expected text, got {type(description).__name__}")


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read, override and check the scenario at ``path`` (or a bundled one by name, e.g. ``"chat"``)."""
    from simbatch.files.bundled import resolve_scenario_path, unknown_name

    cause = unknown_name(path)
    if cause is not None:
        raise SimbatchError(str(path), cause)
    path = resolve_scenario_path(path)
    data, origin = override(read_yaml(path), overrides or [])
    return replace(from_dict(data, str(path), path.resolve().parent), policy_source=origin)


def field_lines(path: Path) -> dict[str, int]:
    """Line (1-based) of every dotted field in a YAML file, e.g. ``{"policy.max_num_seqs": 12}``."""
    try:
        root = compose(read_text(path), str(path))
    except SimbatchError:
        return {}
    lines: dict[str, int] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = f"{prefix}.{key.value}" if prefix else str(key.value)
                lines[name] = key.start_mark.line + 1
                walk(value, name)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[f"{prefix}[{i}]"] = item.start_mark.line + 1
                walk(item, f"{prefix}[{i}]")

    try:
        walk(root, "")
    except RecursionError:  # deeper than any scenario: the lines found so far will do
        pass
    return lines


def locate(error: SimbatchError, path: Path, overrides: list[str]) -> SimbatchError:
    """Add the line of the offending field to an error about scenario ``path``.

    ``"s.yaml: policy.max_num_seqs"`` becomes ``"s.yaml:7: policy.max_num_seqs"``
    (the deepest field that has a line), or names ``--set`` when the value
    came from the command line.
    """
    prefix = f"{path}: "
    if not error.where.startswith(prefix):
        return error
    field_path = error.where[len(prefix):]
    for item in overrides:
        key = item.partition("=")[0].strip()
        if field_path == key or field_path.startswith(key + ".") or field_path.startswith(key + "["):
            return SimbatchError(f"{error.where} (from --set {key})", error.cause)
    lines = field_lines(path)
    probe = field_path
    while probe and probe not in lines:
        stripped = re.sub(r"(\.[^.\[]*|\[\d+\])$", "", probe)  # drop the last ".name" or "[i]"
        probe = "" if stripped == probe else stripped
    if not probe:
        return error
    return SimbatchError(f"{path}:{lines[probe]}: {field_path}", error.cause)
