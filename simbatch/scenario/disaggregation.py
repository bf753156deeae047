"""The scenario's ``disaggregation:`` section, checked (see docs/scenarios.md).

```yaml
disaggregation:
  prefill: {replicas: 2, tensor_parallel: 1, hardware: h100-sxm, policy: {...}, cost_model: {...}, router: ...}
  decode:  {replicas: 2, tensor_parallel: 1, pipeline_parallel: 2, policy: {kind: continuous, max_num_seqs: 256}}
  link: nvlink | pcie | infiniband | {bandwidth_gbps: 200, latency_us: 5}
  transfer: push               # or pull, or {mode: pull, max_waiting_share: 0.05} (DistServe)
  router: round_robin          # both pools, unless a pool names its own
  enabled: true                # false: the scenario's `cluster` serves (colocated)
  layouts: [colocated, disaggregated]   # what `simbatch compare` puts side by side
```
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from simbatch.catalog.links import Link, get_link
from simbatch.catalog.parallelism import EXPERT_DISPATCHES
from simbatch.core.params import MAX_MICRO_BATCHES, MAX_REPLICAS, parse_params, require
from simbatch.costmodel.pipeline import SCHEDULES
from simbatch.errors import SimbatchError
from simbatch.policies import PolicySpec, kind_is, parse_policy_spec
from simbatch.policies.continuous import ContinuousPolicy
from simbatch.policies.iteration import IterationPolicy
from simbatch.policies.routers import ROUTERS

LAYOUTS = ("colocated", "disaggregated")
TRANSFER_MODES = ("push", "pull")
POOLS = ("prefill", "decode")
# A pool's pipeline fields; each left out falls back to the ``cluster`` field of that name.
PIPELINE_FIELDS = ("pipeline_parallel", "micro_batches", "pipeline_schedule", "pipeline_link")


@dataclass(frozen=True)
class PoolParams:
    """One pool: ``replicas`` alike replicas; a field left out (None) falls back to the
    scenario's top level (``hardware``, ``cluster.tensor_parallel``, ``policy``,
    ``cost_model``, ``disaggregation.router``, and ``cluster``'s pipeline fields).

    A replica of the pool runs ``tensor_parallel`` x ``pipeline_parallel`` GPUs:
    ``pipeline_parallel`` stages (:mod:`simbatch.costmodel.pipeline`), each on
    ``tensor_parallel`` GPUs, with ``micro_batches``, ``pipeline_schedule`` and
    ``pipeline_link`` as the ``cluster`` fields of those names."""

    replicas: int = 1
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    micro_batches: int | None = None
    pipeline_schedule: str | None = None
    pipeline_link: str | None = None
    hardware: object = None
    policy: object = None
    cost_model: object = None
    router: str | None = None
    # The pool's own expert layout (cluster.expert_parallel / expert_dispatch when None): DeepSeek
    # serves prefill and decode with different expert-parallel layouts.
    expert_parallel: bool | None = None
    expert_dispatch: str | None = None

    def __post_init__(self):
        require(self.replicas >= 1, "replicas", "must be >= 1")
        require(self.replicas <= MAX_REPLICAS, "replicas", f"must be at most {MAX_REPLICAS:,} (every replica's engine "
                                                           f"is built before the first step), got {self.replicas:,}")
        require(self.expert_dispatch in (None, *EXPERT_DISPATCHES), "expert_dispatch",
                f"unknown dispatch {self.expert_dispatch!r}; allowed: {', '.join(EXPERT_DISPATCHES)}")
        require(self.tensor_parallel is None or self.tensor_parallel >= 1, "tensor_parallel", "must be >= 1")
        require(self.pipeline_parallel is None or self.pipeline_parallel >= 1, "pipeline_parallel", "must be >= 1")
        require(self.micro_batches is None or self.micro_batches >= 0, "micro_batches",
                "must be >= 0 (0: one per pipeline stage)")
        require(self.micro_batches is None or self.micro_batches <= MAX_MICRO_BATCHES, "micro_batches",
                f"must be at most {MAX_MICRO_BATCHES:,} (a micro-batch holds at least one of the sequences a step "
                f"runs), got {self.micro_batches!r}")
        require(self.pipeline_schedule in (None, *SCHEDULES), "pipeline_schedule",
                f"unknown schedule {self.pipeline_schedule!r}; allowed: {', '.join(SCHEDULES)}")
        require(self.policy is None or isinstance(self.policy, dict), "policy",
                "must be a mapping, e.g. {kind: continuous, max_num_seqs: 64}")
        require(self.router is None or self.router in ROUTERS, "router",
                f"unknown router {self.router!r}; allowed: {', '.join(ROUTERS)}")


@dataclass(frozen=True)
class TransferParams:
    """How a prompt's KV reaches the decode pool (docs/policies.md, "Push or pull").

    ``push``: the prefill replica sends it as soon as the first token is out, over its link,
    while the decode replica goes on stepping (Splitwise, vLLM's KV connectors). ``pull``:
    the decode replica takes finished prefills between its own steps, while the prompt blocks
    waiting in its queue are under ``max_waiting_share`` of its blocks and the head's blocks
    are free, and waits for each copy before its next step (DistServe's decode instance;
    ``distserve/decoding_stage_scheduler.py``, ``waiting_block_prop_threshold`` 0.05).
    """

    mode: str = "push"
    max_waiting_share: float = 0.05

    def __post_init__(self):
        require(self.mode in TRANSFER_MODES, "mode",
                f"unknown mode {self.mode!r}; allowed: {', '.join(TRANSFER_MODES)}")
        require(0 < self.max_waiting_share <= 1, "max_waiting_share", "must be in (0, 1]")

    def describe(self) -> dict:
        """For ``summary.json``."""
        return {"mode": self.mode, **({"max_waiting_share": self.max_waiting_share} if self.mode == "pull" else {})}


@dataclass(frozen=True)
class DisaggregationParams:
    """The checked section; ``prefill`` / ``decode`` are :class:`PoolParams`, ``link`` a :class:`Link`."""

    enabled: bool = True
    router: str = "round_robin"
    layouts: list[str] = field(default_factory=list)
    prefill: PoolParams = field(default_factory=PoolParams)
    decode: PoolParams = field(default_factory=PoolParams)
    link: Link | None = None
    transfer: TransferParams = field(default_factory=TransferParams)
    # Each pool's parsed policy (its own, else the scenario's; filled when enabled).
    policies: dict[str, PolicySpec] = field(default_factory=dict)

    def __post_init__(self):
        require(self.router in ROUTERS, "router", f"unknown router {self.router!r}; allowed: {', '.join(ROUTERS)}")
        for name in self.layouts:
            require(name in LAYOUTS, "layouts", f"unknown layout {name!r}; allowed: {', '.join(LAYOUTS)}")

    def pool(self, name: str) -> PoolParams:
        """``prefill`` or ``decode``."""
        return getattr(self, name)

    def pool_pipeline(self, name: str, cluster) -> int:
        """Pipeline stages of a replica of pool ``name``: its own, else ``cluster``'s."""
        own = self.pool(name).pipeline_parallel
        return cluster.pipeline_parallel if own is None else own

    def pool_experts(self, name: str, cluster) -> tuple[bool, str]:
        """(expert_parallel, expert_dispatch) of pool ``name``: its own, else ``cluster``'s."""
        pool = self.pool(name)
        ep = cluster.expert_parallel if pool.expert_parallel is None else pool.expert_parallel
        own = pool.expert_dispatch
        return ep, (own if own is not None else cluster.expert_dispatch if cluster.expert_parallel else "allreduce")

    def pool_router(self, name: str) -> str:
        """The router that spreads requests over pool ``name``."""
        return self.pool(name).router or self.router

    def policy_spec(self, name: str, base: dict) -> dict:
        """Pool ``name``'s ``policy:`` section given the scenario's ``base`` one (merged when it
        names the same kind or none, replaced otherwise, as a replica group's)."""
        own = self.pool(name).policy
        if own is None:
            spec = dict(base)
        elif own.get("kind", base.get("kind")) == base.get("kind"):
            spec = {**base, **own}
        else:
            spec = dict(own)
        # (an unknown kind is refused where the spec is parsed)
        if name == "decode" and kind_is(spec.get("kind"), ContinuousPolicy):
            # Decision: a transferred request's one token to compute joins the running decodes'
            # step (vLLM v1 and DistServe decode instances batch them together); prefill-first
            # would give every arrival a step of its own and pause every decode for it.
            spec.setdefault("mix_prefill_decode", True)
        return spec


def parse_disaggregation(values, base_policy: dict, source: str,
                         max_context: int | None = None) -> DisaggregationParams | None:
    """Check scenario file ``source``'s ``disaggregation:`` section (None when absent); errors
    name the file and the field. ``max_context``: the model's window, for policy defaults."""
    where = f"{source}: disaggregation"
    if values is None:
        return None
    if not isinstance(values, dict):
        raise SimbatchError(where, f"expected a mapping like {{prefill: {{replicas: 1}}, decode: {{replicas: 1}}, "
                                   f"link: nvlink}}, got {values!r}")
    values = dict(values)
    pools = {}
    for name in POOLS:
        spec = values.pop(name, None)
        if spec is not None and not isinstance(spec, dict):
            raise SimbatchError(f"{where}.{name}", f"expected a mapping like {{replicas: 2}}, got {spec!r}")
        pools[name] = parse_params(PoolParams, spec, f"{where}.{name}")
    if "link" not in values:
        raise SimbatchError(f"{where}.link", "missing (required): a preset (nvlink, pcie, infiniband, ...) "
                                             "or {bandwidth_gbps, latency_us}")
    link = get_link(values.pop("link"), f"{where}.link")
    transfer = values.pop("transfer", None)
    if isinstance(transfer, str):
        transfer = {"mode": transfer}
    if transfer is not None and not isinstance(transfer, dict):
        raise SimbatchError(f"{where}.transfer", f"expected push, pull or {{mode: pull, max_waiting_share: 0.05}}, "
                                                 f"got {transfer!r}")
    transfer = parse_params(TransferParams, transfer, f"{where}.transfer")
    params = parse_params(DisaggregationParams, values, where)
    params = DisaggregationParams(params.enabled, params.router, params.layouts, pools["prefill"],
                                  pools["decode"], link, transfer)
    if params.enabled:
        params = replace(params, policies=pool_policies(params, base_policy, source, max_context))
    return params


def pool_policies(params: DisaggregationParams, base_policy: dict, source: str,
                  max_context: int | None = None) -> dict[str, PolicySpec]:
    """Each pool's policy, parsed and checked to be iteration-level; errors name the pool's
    policy, or the scenario's ``policy`` when the pool inherits it."""
    out = {}
    for name in POOLS:
        own = params.pool(name).policy is not None
        at = f"disaggregation.{name}.policy" if own else "policy"
        out[name] = parse_policy_spec(params.policy_spec(name, base_policy), source, at, max_context)
        # Pools need iteration-level admission: a padded batch cannot take a request whose
        # prompt is already computed, nor hand one over at its first token.
        if not issubclass(out[name].cls, IterationPolicy):
            raise SimbatchError(f"{source}: {at}.kind", f"a disaggregated {name} pool runs an iteration-level "
                                                        f"policy (continuous, chunked_prefill or a subclass of "
                                                        f"theirs), not {out[name].kind!r}")
    return out
