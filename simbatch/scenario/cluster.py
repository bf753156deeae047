"""The scenario's ``cluster:`` section: replica groups, parallelism, and the expert layout
they give a mixture-of-experts model (docs/scenarios.md, "cluster").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from simbatch.catalog.models import ModelSpec
from simbatch.catalog.parallelism import EXPERT_DISPATCHES, SLICED, ExpertLayout
from simbatch.core.params import MAX_MICRO_BATCHES, MAX_REPLICAS, parse_params, require
from simbatch.costmodel.pipeline import SCHEDULES
from simbatch.errors import SimbatchError
from simbatch.policies.routers import ROUTERS
from simbatch.scenario.autoscale import AutoscaleParams
from simbatch.scenario.dotted import set_dotted  # noqa: F401  (re-exported: --set, sweep grids)

if TYPE_CHECKING:
    pass


GROUP_FIELDS = ("hardware", "tensor_parallel", "policy", "cost_model")  # a group may override these


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
    # (docs/cost_models.md, "Expert parallelism"); the scenario's ExpertLayout (expert_layout).
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
    # A fleet that grows and shrinks with its load (simbatch.scenario.autoscale): then
    # ``replicas`` is its largest size (every replica is built) and ``autoscale.initial``
    # how many are ready at t = 0. None: a fixed fleet.
    autoscale: AutoscaleParams | None = None

    def __post_init__(self):
        # Sizes bounded where simbatch.core.params says why (replicas built up front; micro-batches
        # beyond the sequences a step holds); redundant experts by the layout (expert_layout).
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
                                               "redundant_experts, autoscale")
    if values.get("autoscale") is not None:
        return _autoscaled(values, where)
    values.pop("autoscale", None)
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


def _autoscaled(values: dict, where: str) -> ClusterParams:
    """A cluster with ``autoscale``: one group of ``autoscale.max`` replicas, of which
    ``replicas`` (default ``autoscale.min``) are ready at t = 0."""
    scale = parse_params(AutoscaleParams, values.pop("autoscale"), f"{where}.autoscale")
    if isinstance(values.get("replicas"), list):
        raise SimbatchError(f"{where}.replicas", "a list of replica groups cannot autoscale yet: give a count "
                                                 "(the replicas ready at t = 0)")
    if values.get("data_parallel_attention"):
        raise SimbatchError(f"{where}.autoscale", "not with data_parallel_attention, whose ranks are fixed")
    initial = values.get("replicas", scale.min)
    cluster = parse_params(ClusterParams, values, where)  # checks replicas like any count
    if not scale.min <= initial <= scale.max:
        raise SimbatchError(f"{where}.replicas", f"{initial} replicas ready at t = 0 is outside autoscale's "
                                                 f"min {scale.min} and max {scale.max}")
    return replace(cluster, replicas=scale.max, groups=(ReplicaGroup(scale.max),),
                   autoscale=replace(scale, initial=initial))


def expert_layout(model: ModelSpec, cluster: ClusterParams, disaggregation, source: str) -> ExpertLayout:
    """The cluster's expert layout for ``model`` (``expert_parallel``, ``expert_dispatch``, EPLB,
    data-parallel attention), after checking that every layout in the scenario fits: a mixture
    of experts whose experts every expert-parallel replica's tensor-parallel degree (the
    cluster's, each group's, each pool's) splits evenly. A disaggregated pool may set its own
    layout (:func:`pool_layout`)."""
    dis = disaggregation if disaggregation is not None and disaggregation.enabled else None
    if (cluster.eplb or cluster.redundant_experts) and not cluster.expert_parallel:
        field_name = "eplb" if cluster.eplb else "redundant_experts"
        raise SimbatchError(f"{source}: cluster.{field_name}", "applies with cluster.expert_parallel: true")
    if cluster.redundant_experts and not cluster.eplb:
        raise SimbatchError(f"{source}: cluster.redundant_experts", "applies with cluster.eplb: true")
    balance = {"eplb": True, "redundant_experts": cluster.redundant_experts} if cluster.eplb else {}
    if cluster.data_parallel_attention and cluster.expert_parallel:
        return _data_parallel_attention(model, cluster, disaggregation, source, balance)
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
        return SLICED
    if cluster.eplb:
        check_redundant_experts(model, cluster.redundant_experts, max(tp for tp, _ in degrees.values()), source)
    return ExpertLayout(expert_parallel=True, expert_dispatch=cluster.expert_dispatch, **balance)


def check_redundant_experts(model: ModelSpec, redundant: int, gpus: int, source: str) -> None:
    """Refuse more redundant experts than ``gpus`` (the largest expert-parallel group) can use:
    with a copy of every expert on every GPU, one more copy balances nothing. The check comes
    before EPLB's placement, which deals every copy to a GPU one by one (1e9 of them hung)."""
    most = model.num_experts * (gpus - 1)
    if redundant > most:
        raise SimbatchError(f"{source}: cluster.redundant_experts",
                            f"must be at most {most:,} for {model.name}'s {model.num_experts} experts over {gpus} "
                            f"GPUs (a copy of every expert on every GPU: {model.num_experts} x ({gpus} - 1)), "
                            f"got {redundant:,}")


def pool_layout(layout: ExpertLayout, cluster: ClusterParams, disaggregation, pool: str) -> ExpertLayout:
    """The scenario's expert ``layout`` as disaggregated pool ``pool`` serves it (its own
    ``expert_parallel`` / ``expert_dispatch``, else the cluster's; checked by
    :func:`expert_layout`)."""
    ep, dispatch = disaggregation.pool_experts(pool, cluster)
    if (ep, dispatch) == (layout.expert_parallel, layout.expert_dispatch):
        return layout
    # EPLB (the cluster's) balances expert-parallel pools only
    eplb = ep and cluster.eplb
    return replace(layout, expert_parallel=ep, expert_dispatch=dispatch, eplb=eplb,
                   redundant_experts=cluster.redundant_experts if eplb else 0)


def _data_parallel_attention(model: ModelSpec, cluster: ClusterParams, disaggregation, source: str,
                             balance: dict) -> ExpertLayout:
    """The layout of data-parallel attention for ``model``: the cluster's replicas are the ranks,
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
    check_redundant_experts(model, balance.get("redundant_experts", 0), gpus, source)
    return ExpertLayout(expert_parallel=True, expert_dispatch="all2all", attention_data_parallel=cluster.replicas,
                        **balance)
