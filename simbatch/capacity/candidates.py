"""Candidate configurations, and the one run (probe) a capacity search is made of.

A candidate is a policy on a GPU with a model, a tensor-parallel degree,
pipeline stages and a replica count, colocated or split into prefill and
decode pools (each with its own layout); every combination of the lists given
is one candidate. A
probe runs the scenario as that candidate with its workload replayed at
``scale`` x the recorded rate and with one seed, and returns a small flat
record (not the run itself: records travel back from worker processes).
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from simbatch.capacity.slo import SLOSpec, flat_metrics
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import Scenario, from_dict

MIDDLE_TRIM = 0.1  # the keep-up check looks at the middle 80 % of requests (see middle_rates)


@dataclass(frozen=True)
class PoolShape:
    """One side of a ``--splits`` item: ``count`` replicas of the pool per unit, each of
    ``tp`` x ``pp`` GPUs when given (None: the scenario's pool's own, else the candidate's)."""

    count: int
    tp: int | None = None
    pp: int | None = None


@dataclass(frozen=True)
class Candidate:
    """One configuration. ``hardware`` / ``model`` None: the scenario's own (a mapping).

    A replica runs ``tp`` x ``pp`` GPUs (``pp`` pipeline stages of ``tp`` each). ``split``
    (prefill, decode) makes it prefill/decode disaggregated: each of its ``replicas`` units
    is ``prefill`` prefill replicas plus ``decode`` decode replicas, so sizing scales both
    pools together, in that ratio; ``pools`` holds each pool's (tp, pp) when they are not
    both (``tp``, ``pp``).
    """

    policy: str
    hardware: str | None
    model: str | None
    tp: int
    replicas: int
    split: tuple[int, int] | None = None
    pp: int = 1
    pools: tuple[tuple[int, int], tuple[int, int]] | None = None

    @property
    def pool_layouts(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(tp, pp) of a prefill and of a decode replica (the candidate's own unless ``pools``)."""
        return self.pools or ((self.tp, self.pp), (self.tp, self.pp))

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one replica (one unit of a split candidate: every replica of both pools,
        each tensor parallel x pipeline stages)."""
        if not self.split:
            return self.tp * self.pp
        return sum(n * tp * pp for n, (tp, pp) in zip(self.split, self.pool_layouts))

    @property
    def layout_name(self) -> str:
        """``tp2`` or ``tp8pp2``: a replica's layout; empty for a split whose pools differ
        from it (its :attr:`split_name` names both)."""
        return "" if self.pools else _layout(self.tp, self.pp)

    @property
    def split_name(self) -> str:
        """``2P+2D`` for a split candidate (``1P(tp2)+3D(tp1pp2)`` when its pools have their
        own layouts), ``colocated`` otherwise."""
        if not self.split:
            return "colocated"
        if not self.pools:
            return f"{self.split[0]}P+{self.split[1]}D"
        (p, d), (lp, ld) = self.split, self.pools
        return f"{p}P({_layout(*lp)})+{d}D({_layout(*ld)})"

    def label(self, gpu_name: str | None = None) -> str:
        """``continuous on a100-80gb tp1 x2`` (``... x2 of 1P+3D`` when split)."""
        model = f" {self.model}" if self.model else ""
        layout = f" {self.layout_name}" if self.layout_name else ""
        split = f" of {self.split_name}" if self.split else ""
        return f"{self.policy} on {self.hardware or gpu_name or 'custom'}{model}{layout} x{self.replicas}{split}"

    def with_replicas(self, n: int) -> Candidate:
        """The same configuration with ``n`` replicas."""
        return replace(self, replicas=n)


def _layout(tp: int, pp: int) -> str:
    """``tp2``, or ``tp2pp2`` with pipeline stages."""
    return f"tp{tp}" + (f"pp{pp}" if pp > 1 else "")


@dataclass(frozen=True)
class Probe:
    """One run: ``candidate`` at ``scale`` x the recorded rate with ``seed``."""

    scenario: Scenario
    candidate: Candidate
    scale: float
    seed: int
    slo: SLOSpec


def expand(scenario: Scenario, policies: list[str], hardware: list[str] | None, models: list[str] | None,
           tps: list[int] | None, replicas: list[int] | None,
           splits: list | None = None, pps: list[int] | None = None) -> list[Candidate]:
    """Every combination of the lists; a list left None takes the scenario's value (``splits``:
    colocated only). A ``splits`` item is None (colocated), (prefill, decode) replica counts, or
    two :class:`PoolShape`; a pool's layout is its shape's, else the scenario's pool's own
    (``disaggregation.<pool>.tensor_parallel`` / ``pipeline_parallel``), else the candidate's.
    A split whose pools both fix a layout is one candidate whatever ``tps`` / ``pps`` say."""
    d = scenario.data
    hardware = hardware or [_preset_name(d["hardware"])]
    models = models or [_preset_name(d["model"])]
    tps = tps or [scenario.cluster.tensor_parallel]
    pps = pps or [scenario.cluster.pipeline_parallel]
    replicas = replicas or [scenario.cluster.replicas]
    for name, values in (("--tp", tps), ("--pp", pps), ("--replicas", replicas)):
        bad = [v for v in values if v < 1]
        if bad:
            raise SimbatchError(name, f"expected positive integers, got {bad[0]}")
    out: dict[tuple, Candidate] = {}
    for p, h, m, t, q, r, sp in itertools.product(policies, hardware, models, tps, pps, replicas, splits or [None]):
        cand = _candidate(scenario, Candidate(p, h, m, t, r, pp=q), sp)
        key = (p, h, m, r, cand.split, cand.pool_layouts) if cand.split else cand
        out.setdefault(key, cand)
    return list(out.values())


def _candidate(scenario: Scenario, base: Candidate, split) -> Candidate:
    """``base`` as split ``split`` says (None: colocated), its pools' layouts resolved."""
    if split is None:
        return base
    shapes = [s if isinstance(s, PoolShape) else PoolShape(int(s)) for s in split]
    section = scenario.data.get("disaggregation") or {}
    layouts = []
    for name, shape in zip(("prefill", "decode"), shapes):
        own = section.get(name) if isinstance(section.get(name), dict) else {}
        layouts.append((shape.tp or own.get("tensor_parallel") or base.tp,
                        shape.pp or own.get("pipeline_parallel") or base.pp))
    pools = tuple(layouts)
    return replace(base, split=(shapes[0].count, shapes[1].count),
                   pools=None if pools == ((base.tp, base.pp),) * 2 else pools)


def _preset_name(value) -> str | None:
    """A preset name as given in the scenario; None for a mapping (which stays in the scenario)."""
    return value if isinstance(value, str) else None


def default_seeds(scenario: Scenario, count: int = 3) -> list[int]:
    """The scenario's seed and the next ``count - 1`` when its workload is random (synthetic, or a
    trace with an arrival process); the scenario's seed alone for a fixed trace or inline requests."""
    w = scenario.data["workload"]
    is_random = isinstance(w, dict) and ("synthetic" in w or ("trace" in w and "arrival" in w))
    return [scenario.seed + i for i in range(count if is_random else 1)]


def candidate_scenario(scenario: Scenario, cand: Candidate, scale: float, seed: int,
                       slo: SLOSpec | None = None) -> Scenario:
    """``scenario`` as ``cand``, replayed at ``scale`` x its rate (composed with its own
    ``rate_scale``), with ``seed``; per-request targets of ``slo`` become its ``slo:``."""
    data = copy.deepcopy(scenario.data)
    if cand.hardware:
        data["hardware"] = cand.hardware
    if cand.model:
        data["model"] = cand.model
    data["cluster"] = {**(data.get("cluster") or {}), "tensor_parallel": cand.tp, "replicas": cand.replicas,
                       "pipeline_parallel": cand.pp}
    dis = data.get("disaggregation")
    if cand.split:  # the scenario's link and pool settings, these sizes and layouts
        dis = dict(dis or {"link": "nvlink"})
        for pool, count, (tp, pp) in zip(("prefill", "decode"), cand.split, cand.pool_layouts):
            dis[pool] = {**(dis.get(pool) or {}), "replicas": count * cand.replicas, "tensor_parallel": tp,
                         "pipeline_parallel": pp}
        data["disaggregation"] = {**dis, "enabled": True}
    elif dis is not None:
        data["disaggregation"] = {**dis, "enabled": False}  # a colocated candidate is colocated
    workload = data["workload"]
    workload["rate_scale"] = float(workload.get("rate_scale", 1.0)) * scale
    data["seed"] = seed
    if slo is not None and slo.request_targets:
        data["slo"] = dict(slo.request_targets)
    return from_dict(data, scenario.source, scenario.base_dir).with_policy(cand.policy)


def run_probe(probe: Probe) -> dict:
    """Simulate one probe; its flat record (rates, throughputs, every latency stat)."""
    from simbatch.api import run

    sc = candidate_scenario(probe.scenario, probe.candidate, probe.scale, probe.seed, probe.slo)
    out = run(sc)
    s, req = out.summary, out.requests
    offered, sustained = middle_rates(req["arrival_s"].to_numpy(), req["finish_s"].to_numpy())
    return {
        "num_requests": s["num_requests"],
        "completed": s["completed"],
        "offered_rate": offered_rate(out.result.workload.arrival_s),
        "request_throughput": s["request_throughput"],
        "middle_offered_rate": offered,
        "middle_throughput": sustained,
        "slo_attainment": s["slo_attainment"],
        **flat_metrics(s),
    }


def offered_rate(arrival_s) -> float:
    """(n - 1) / (last arrival - first arrival): the rate a workload offers (req/s); 0 when
    every request arrives at once."""
    n = len(arrival_s)
    span = float(arrival_s[-1] - arrival_s[0]) if n else 0.0
    return (n - 1) / span if span > 0 else 0.0


def middle_rates(arrival_s, finish_s, trim: float = MIDDLE_TRIM) -> tuple[float, float]:
    """Arrival and completion rates (req/s) over the middle of the run, by order statistics.

    With a = sorted arrivals, f = sorted finishes (unfinished ones last) and
    i, j the ``trim`` and ``1 - trim`` quantile indices, the rates are
    (j - i) / (a[j] - a[i]) and (j - i) / (f[j] - f[i]). A system that keeps
    up finishes requests as fast as they come, so the two agree (f tracks a,
    shifted by about the mean latency); an overloaded one finishes at its
    service rate. Leaving out the first and last ``trim`` of requests drops
    the start-up and the drain, which on a short trace would otherwise make
    even an idle system look slower than its load. A rate is ``inf`` when its
    span is 0, and the completion rate 0 when f[j] never finished.
    """
    a = np.sort(np.asarray(arrival_s, dtype=float))
    f = np.sort(np.nan_to_num(np.asarray(finish_s, dtype=float), nan=np.inf))
    n = len(a)
    if n < 2:
        return math.inf, math.inf
    i, j = int(trim * (n - 1)), math.ceil((1 - trim) * (n - 1))

    def rate(lo: float, hi: float) -> float:
        if hi == math.inf:  # a request in the window never finished
            return 0.0
        return (j - i) / (hi - lo) if hi > lo else math.inf

    return rate(a[i], a[j]), rate(f[i], f[j])
