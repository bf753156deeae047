"""Capacity planning: the highest rate each candidate sustains, and the replicas a target rate needs.

:func:`find_capacity` runs two lockstep searches (:mod:`simbatch.capacity.search`)
through a :class:`Prober`, which runs every (candidate, scale, seed) at most
once, all seeds of all pending probes in one ``executor.map``:

1. per candidate, the rate scale k at which the SLOs stop holding
   (bracket from k = 1 by doubling or halving, then bisect);
2. with a target rate R, per (policy, GPU, model, TP), the fewest replicas
   that hold at R: a first guess from linear scaling of the measured
   per-replica rate, then simulated at R and moved up or down until the
   smallest count that holds is found.

A probe holds only if it holds for every seed. Rates are k x the base rate:
the rate of the workload as given (k = 1), averaged over the seeds.

Going down, the rate search stops early when halving the rate did not help:
a candidate that fails at k and at 2k only on latency targets (it keeps up
and completes every request), with no failing latency better by at least
:data:`MIN_GAIN` at k than at 2k (and attainment no more than one point
higher), fails for what the policy does to every request, not for queueing
(static batching's wait for a full batch, say), and lower rates will not
mend it. It is reported as such instead of being probed down to the floor
(1/64 x, seven probes per seed; issue 15).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from simbatch.capacity.candidates import (
    Candidate,
    Probe,
    candidate_scenario,
    offered_rate,
    run_probe,
)
from simbatch.capacity.search import (
    HOPELESS,
    MAX_REPLICAS,
    Bracket,
    drive,
    fewest_search,
    rate_search,
)
from simbatch.capacity.slo import SLOSpec, Verdict, judge
from simbatch.errors import SimbatchError
from simbatch.executors import Executor, InlineExecutor
from simbatch.report.table import fmt_duration
from simbatch.scenario import Scenario

Log = Callable[[str], None]
# Halving the rate must improve a failing latency by this much (relative) to be worth going on.
MIN_GAIN = 0.05


@dataclass
class SeedVerdict:
    """One (candidate, scale) over all seeds: holds iff every seed holds."""

    holds: bool
    failed_seeds: list[int]
    num_seeds: int
    reasons: list[str]  # the first failing seed's


@dataclass
class Boundary:
    """Where one candidate stops holding: between scales ``lo`` and ``hi`` (see :class:`Bracket`)."""

    candidate: Candidate
    lo: float | None
    hi: float | None
    at_lo: SeedVerdict | None
    at_hi: SeedVerdict | None
    seed_hi: dict[int, float | None]  # per seed, the lowest probed scale it failed at
    hopeless: str | None = None  # why the search stopped going down (lower rates do not help)


@dataclass
class Sizing:
    """Fewest replicas of one (policy, GPU, model, TP) that hold at the target rate."""

    group: Candidate  # replicas = the answer (or the guess when there is none)
    replicas: int | None
    estimate: int | None
    below: SeedVerdict | None  # verdict at replicas - 1 (why one fewer is not enough)
    note: str = ""


@dataclass
class CapacityResult:
    """Everything a capacity search found, and every run it made."""

    scenario: Scenario
    slo: SLOSpec
    base_rate: float  # req/s at k = 1: the mean over seeds of seed_rates
    seed_rates: dict[int, float]  # per seed, the rate its workload offers at k = 1
    boundaries: list[Boundary]
    skipped: dict[Candidate, str]
    gpu_names: dict[Candidate, str]
    target_rate: float | None = None
    sizing: dict[Candidate, Sizing] = field(default_factory=dict)
    probes: list[dict] = field(default_factory=list)


class Prober:
    """Runs probes through an executor, each (candidate, scale, seed) once, and judges them."""

    def __init__(self, scenario: Scenario, slo: SLOSpec, seeds: list[int], executor: Executor,
                 log: Log = lambda line: None, bar: Callable[[int], object] | None = None):
        self.scenario, self.slo, self.seeds = scenario, slo, seeds
        self.executor, self.log = executor, log
        self.bar = bar  # makes a progress bar (update, close) over a round's runs; None: no bar
        self.records: dict[tuple[Candidate, float, int], tuple[dict, Verdict]] = {}
        self.num_rounds = 0
        self.phase = "rate search"  # for the log: "rate search" or "sizing"
        self.hopeless: dict[Candidate, str] = {}  # candidates whose rate search stopped early, and why

    def holds(self, asked: list[tuple[Candidate, float]]) -> list[bool]:
        """Whether each (candidate, scale) holds for every seed (new runs in one map)."""
        todo = list(dict.fromkeys((c, k, s) for c, k in asked for s in self.seeds
                                  if (c, k, s) not in self.records))
        start = time.perf_counter()
        jobs = [Probe(self.scenario, c, k, s, self.slo) for c, k, s in todo]
        bar = self.bar(len(todo)) if self.bar and todo else None
        try:
            results = self.executor.map(run_probe, jobs, (lambda i, r: bar.update()) if bar else None)
        finally:
            if bar:
                bar.close()
        for key, record in zip(todo, results):
            self.records[key] = (record, judge(record, self.slo))
        self.num_rounds += 1
        self.log(f"{self.phase} round {self.num_rounds}: {len(asked)} probe(s) x {len(self.seeds)} seed(s): "
                 f"{len(todo)} new run(s) in {time.perf_counter() - start:.1f} s")
        return [self._answer(c, k) for c, k in asked]

    def _answer(self, cand: Candidate, scale: float):
        """True, False, or (in the rate search) HOPELESS: it fails, and halving did not help."""
        if self.verdict(cand, scale).holds:
            return True
        why = self.phase == "rate search" and self.no_better(cand, scale)
        if not why:
            return False
        self.hopeless[cand] = why
        return HOPELESS

    def no_better(self, cand: Candidate, scale: float) -> str | None:
        """Why ``cand`` failing at ``scale`` and at twice it says lower rates will not help (the
        module docstring), or None when they may."""
        keep_up = SLOSpec()  # only the completion and keep-up checks
        gains = []
        for seed in self.seeds:
            now, before = self.records.get((cand, scale, seed)), self.records.get((cand, 2 * scale, seed))
            if before is None or before[1].holds or not judge(now[0], keep_up).holds:
                return None
            rec, prev = now[0], before[0]
            for t in self.slo.percentiles:
                value, was = rec.get(t.key), prev.get(t.key)
                if value is not None and value > t.limit_ms:
                    if was is None or value < (1 - MIN_GAIN) * was:
                        return None
                    gains.append(f"{t.key} {fmt_duration(was)} -> {fmt_duration(value)}")
            if self.slo.attainment is not None:
                got, had = rec.get("slo_attainment") or 0.0, prev.get("slo_attainment") or 0.0
                if got < self.slo.attainment:
                    if got > had + 0.01:
                        return None
                    gains.append(f"attainment {100 * had:.1f} % -> {100 * got:.1f} %")
        if not gains:
            return None
        return (f"halving the rate did not help ({', '.join(dict.fromkeys(gains))}): it fails for what the policy "
                "does to each request, not for queueing, so lower rates were not searched")

    def verdict(self, cand: Candidate, scale: float | None) -> SeedVerdict | None:
        """The all-seeds verdict of a probe already run (None for scale None)."""
        if scale is None:
            return None
        per_seed = [(s, self.records[(cand, scale, s)][1]) for s in self.seeds]
        failed = [s for s, v in per_seed if not v.holds]
        reasons = next((v.reasons for _, v in per_seed if not v.holds), [])
        return SeedVerdict(not failed, failed, len(self.seeds), reasons)

    def seed_boundaries(self, cand: Candidate) -> dict[int, float | None]:
        """Per seed, the lowest scale probed for ``cand`` at which that seed failed."""
        out = {}
        for seed in self.seeds:
            fails = [k for (c, k, s), (_, v) in self.records.items() if c == cand and s == seed and not v.holds]
            out[seed] = min(fails) if fails else None
        return out

    def rows(self, base_rate: float, gpu_names: dict[Candidate, str]) -> list[dict]:
        """One row per run, in the order they were made (``probes.csv``)."""
        rows = []
        for (c, k, s), (record, v) in self.records.items():
            rows.append({"policy": c.policy, "hardware": gpu_names[c.with_replicas(1)], "model": c.model or "",
                         "tp": c.tp, "pp": c.pp, "replicas": c.replicas, "split": c.split_name, "scale": k,
                         "rate": k * base_rate, "seed": s,
                         **record, "holds": v.holds, "why_not": "; ".join(v.reasons)})
        return rows


def find_capacity(scenario: Scenario, slo: SLOSpec, candidates: list[Candidate], *, seeds: list[int],
                  tolerance: float = 0.05, target_rate: float | None = None,
                  executor: Executor | None = None, log: Log = lambda line: None,
                  bar: Callable[[int], object] | None = None) -> CapacityResult:
    """Search each candidate's highest sustainable rate, then size each for ``target_rate`` (req/s).

    Every probe runs once per seed in ``seeds`` and holds only if all hold.
    ``log`` receives one line per round of runs; ``bar(n)``, if given, makes a progress bar
    (``update()``, ``close()``) for a round of n runs (:class:`simbatch.sweep.progress.Progress`).
    """
    if not seeds:
        raise SimbatchError("--seeds", "expected at least one seed")
    if not (0 < tolerance < 1):
        raise SimbatchError("--tolerance", f"expected a fraction in (0, 1), got {tolerance:g}")
    if target_rate is not None and not (target_rate > 0 and math.isfinite(target_rate)):
        raise SimbatchError("--target-rate", f"expected a positive rate in req/s, got {target_rate:g}")
    workloads = {seed: base_workload(scenario, seed) for seed in seeds}
    seed_rates = {seed: offered_rate(w.arrival_s) for seed, w in workloads.items()}
    base_rate = sum(seed_rates.values()) / len(seed_rates)
    gpu_names, skipped = check_candidates(scenario, candidates, list(workloads.values()))
    live = [c for c in candidates if c not in skipped]
    prober = Prober(scenario, slo, seeds, executor or InlineExecutor(), log, bar)
    brackets = drive({c: rate_search(1.0, tolerance) for c in live}, prober.holds)
    result = CapacityResult(scenario, slo, base_rate, seed_rates,
                            [_boundary(prober, c, brackets[c]) for c in live], skipped, gpu_names, target_rate)
    if target_rate is not None:
        prober.phase = "sizing"
        result.sizing = size_for(prober, result.boundaries, target_rate / base_rate)
    result.probes = prober.rows(base_rate, gpu_names)
    return result


def _boundary(prober: Prober, cand: Candidate, b: Bracket) -> Boundary:
    return Boundary(cand, b.lo, b.hi, prober.verdict(cand, b.lo), prober.verdict(cand, b.hi),
                    prober.seed_boundaries(cand), prober.hopeless.get(cand) if b.hopeless else None)


def size_for(prober: Prober, boundaries: list[Boundary], scale: float) -> dict[Candidate, Sizing]:
    """Per (policy, GPU, model, TP), the fewest replicas that hold at ``scale``.

    The first guess assumes the per-replica rate scales linearly (the most
    optimistic guess over the replica counts searched); the simulation then
    decides, since round-robin over n replicas is not exactly n times one.
    """
    guesses: dict[Candidate, int | None] = {}
    for b in boundaries:
        group = b.candidate.with_replicas(1)
        guesses.setdefault(group, None)
        if b.lo:  # the boundary's scale is b.lo for b.candidate.replicas replicas
            guess = math.ceil(scale * b.candidate.replicas / b.lo - 1e-9)
            guesses[group] = min(guess, guesses[group] or guess)
    searches = {g: fewest_search(m) for g, m in guesses.items() if m is not None}
    found = drive(searches, lambda asked: prober.holds([(g.with_replicas(m), scale) for g, m in asked]))
    out = {}
    for group, guess in guesses.items():
        if guess is None:
            out[group] = Sizing(group, None, None, None, "fails the SLOs at every rate searched")
            continue
        n = found[group]
        below = prober.verdict(group.with_replicas(n - 1), scale) if n and n > 1 else None
        note = "" if n else f"still fails with {MAX_REPLICAS} replicas (the search limit)"
        out[group] = Sizing(group.with_replicas(n or guess), n, guess, below, note)
    return out


def base_workload(scenario: Scenario, seed: int):
    """The scenario's workload as given (its rate_scale) with ``seed``: what k = 1 replays."""
    w = scenario.build_workload(seed)
    if offered_rate(w.arrival_s) <= 0:
        raise SimbatchError(scenario.where("workload"), "every request arrives at once, so there is no rate "
                                                        "to scale; give an arrival process, e.g. "
                                                        "arrival: {kind: poisson, rate: 5}")
    return w


def check_candidates(scenario: Scenario, candidates: list[Candidate], workloads: list) -> tuple[dict, dict]:
    """GPU name per candidate (replicas=1 key too), and the candidates that cannot run, with why.

    Unknown names are an error; a model that does not fit a GPU (or leaves
    too little KV memory for the longest request), a TP degree the model
    cannot split into, or a layout the scenario's other sections cannot run
    on (speculative decoding on a pipeline, experts a TP degree does not
    split) only skips that candidate, with the reason as its note.
    """
    names, skipped = {}, {}
    for c in candidates:
        names[c] = names[c.with_replicas(1)] = _gpu_name(scenario, c)  # unknown names: an error
        try:
            _check_runs(candidate_scenario(scenario, c, 1.0, scenario.seed), workloads)
        except SimbatchError as exc:
            skipped[c] = exc.cause
    if len(skipped) == len(candidates):
        c = candidates[0]
        raise SimbatchError(f"capacity: {c.label(names[c])}", f"no candidate can run: {skipped[c]}")
    return names, skipped


def _gpu_name(scenario: Scenario, c: Candidate) -> str:
    """The GPU candidate ``c`` runs on; an unknown GPU or model name is an error naming its flag."""
    from simbatch.hardware import get_gpu
    from simbatch.models import get_model

    if c.model:
        get_model(c.model, "--model")
    return get_gpu(c.hardware, "--hardware").name if c.hardware else scenario.gpu.name


def _check_runs(sc: Scenario, workloads: list) -> None:
    """Build a candidate's scenario ``sc`` as a run would (the colocated replicas, or both pools
    at their own TP and pipeline stages) and check every request of ``workloads`` fits."""
    from simbatch.engine.disaggregation.build import build_pools, check_pools_fit
    from simbatch.engine.setup import build_backend, check_requests_fit, kv_blocks_per_replica

    model = sc.model
    if sc.is_disaggregated:
        pools = build_pools(sc, model)
        for w in workloads:
            check_pools_fit(w, sc, pools)
        return
    build_backend(sc)  # the candidate's TP degree and stages are in sc.cluster
    blocks = kv_blocks_per_replica(sc, model, sc.gpu)
    for w in workloads:
        check_requests_fit(w, sc, blocks, model)
