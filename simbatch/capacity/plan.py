"""Capacity planning: the highest rate each candidate sustains, and the replicas a target rate needs.

:func:`find_capacity` runs two kinds of search (:mod:`simbatch.capacity.search`)
through a :class:`Prober`, which runs every (candidate, scale, seed) at most
once. The searches run concurrently: each submits its probe's runs (one per
seed) to the executor and goes on as soon as they are all back, without
waiting for the other searches' probes (issue 15: lockstep rounds left cores
idle behind each round's slowest probe):

1. per candidate, the rate scale k at which the SLOs stop holding
   (bracket from k = 1 by doubling or halving, then bisect);
2. with a target rate R, per (policy, GPU, model, TP), the fewest replicas
   that hold at R: a first guess from linear scaling of the measured
   per-replica rate, then simulated at R and moved up or down until the
   smallest count that holds is found. A group's sizing starts as soon as
   the rate searches of its replica counts have ended.

Determinism: a search sees only its own probes' answers, so it asks the same
points and ends in the same place whatever order runs finish in; the probe
table is sorted into the order lockstep rounds made it in (phase, step of the
search, candidate, seed). The same recommendation, table and report come out
with one worker or many.

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
    drive_concurrently,
    fewest_search,
    rate_search,
)
from simbatch.capacity.slo import SLOSpec, Verdict, judge
from simbatch.errors import SimbatchError
from simbatch.report.table import fmt_duration, fmt_num
from simbatch.runs.executors import Executor, InlineExecutor
from simbatch.scenario.spec import Scenario

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


@dataclass(frozen=True)
class SearchKey:
    """One search of a capacity run: the rate search of candidate ``of`` (``phase`` RATE) or the
    sizing of group ``of`` (``phase`` SIZING); ``rank`` is its place among its phase's searches.
    (phase, the search's step, rank, seed) orders the probe table, so the table does not depend
    on the order the runs finished in."""

    phase: int
    rank: int
    of: Candidate


RATE, SIZING = 0, 1


class Prober:
    """Runs probes through an executor, each (candidate, scale, seed) once, and judges them.

    A search asks for a probe with :meth:`ask`: its runs (one per seed not run
    yet) are submitted at once. :meth:`answers` waits for runs to finish and
    hands back each search whose probe has all its seeds back, with its
    answer, so each search goes on at its own pace (no rounds). Answers depend
    only on the runs of the probe asked (and, for "halving did not help", on
    the same search's probe at twice the rate), never on what else finished
    first.
    """

    def __init__(self, scenario: Scenario, slo: SLOSpec, seeds: list[int], executor: Executor,
                 log: Log = lambda line: None, bar: Callable[[int], object] | None = None):
        self.scenario, self.slo, self.seeds = scenario, slo, seeds
        self.executor, self.log = executor, log
        # bar(n) makes a progress bar (total, update, close) over n runs; it grows as searches ask
        # more. None: no bar.
        self.bar, self.progress = bar, None
        self.records: dict[tuple[Candidate, float, int], tuple[dict, Verdict]] = {}
        self.order: dict[tuple[Candidate, float, int], tuple] = {}  # a run's place in the probe table
        self.steps: dict[SearchKey, int] = {}  # probes each search asked so far
        self.started: dict[SearchKey, float] = {}  # when each search asked its first probe
        self.asked: dict[SearchKey, tuple[Candidate, float, set]] = {}  # the probe it waits on, runs still out
        self.running: dict[object, tuple[Candidate, float, int]] = {}  # future -> its run
        self.sent: dict[object, int] = {}  # future -> submission number (a batch is handled in that order)
        self.num_sent = 0
        self.waiters: dict[tuple[Candidate, float, int], list[SearchKey]] = {}  # a run in flight -> who waits
        self.ready: list[SearchKey] = []  # searches whose probe is complete
        self.hopeless: dict[Candidate, str] = {}  # candidates whose rate search stopped early, and why

    def ask(self, key: SearchKey, cand: Candidate, scale: float) -> None:
        """Start probe (``cand``, ``scale``) for search ``key``: submit the runs not made yet."""
        step = self.steps[key] = self.steps.get(key, 0) + 1
        self.started.setdefault(key, time.perf_counter())
        out = set()
        for seed in self.seeds:
            run = (cand, scale, seed)
            # A run asked twice (sizing reusing a rate-search probe) keeps its first place.
            self.order.setdefault(run, (key.phase, step, key.rank, seed))
            if run in self.records:
                continue
            if run not in self.waiters:
                self._submit(run)
            self.waiters[run].append(key)
            out.add(run)
        self.asked[key] = (cand, scale, out)
        if not out:
            self.ready.append(key)

    def _submit(self, run: tuple[Candidate, float, int]) -> None:
        cand, scale, seed = run
        future = self.executor.submit(run_probe, Probe(self.scenario, cand, scale, seed, self.slo))
        self.running[future] = run
        self.sent[future] = self.num_sent
        self.num_sent += 1
        self.waiters[run] = []
        if self.bar is None:
            return
        if self.progress is None:
            self.progress = self.bar(1)
        else:
            self.progress.total += 1  # the bar counts runs asked so far
            self.progress.update(0)

    def answers(self) -> list[tuple[SearchKey, object]]:
        """Wait until some search's probe has every seed back; each such search with its answer."""
        while not self.ready:
            done = self.executor.wait_any(list(self.running))
            for future in sorted(done, key=self.sent.__getitem__):
                run = self.running.pop(future)
                del self.sent[future]
                record = future.result()  # re-raises the run's error
                self.records[run] = (record, judge(record, self.slo))
                if self.progress is not None:
                    self.progress.update()
                for key in self.waiters.pop(run):
                    left = self.asked[key][2]
                    left.discard(run)
                    if not left:
                        self.ready.append(key)
        ready, self.ready = self.ready, []
        return [(key, self._answer(key)) for key in ready]

    def cancel(self) -> None:
        """Drop the runs still queued (a search stopped by an error); running ones end on their own."""
        for future in self.running:
            future.cancel()
        self.running.clear()

    def close(self) -> None:
        """Close the progress bar, if one was drawn."""
        if self.progress is not None:
            self.progress.close()
            self.progress = None

    def probes_of(self, key: SearchKey) -> int:
        """How many probes search ``key`` asked."""
        return self.steps.get(key, 0)

    def _answer(self, key: SearchKey):
        """True, False, or (in a rate search) HOPELESS: it fails, and halving did not help."""
        cand, scale, _ = self.asked.pop(key)
        if self.verdict(cand, scale).holds:
            return True
        why = key.phase == RATE and self.no_better(cand, scale)
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
        """One row per run (``probes.csv``), by phase, then by each search's step, then by
        candidate (as given) and seed: the order lockstep rounds made them in, whatever
        order they finished in."""
        rows = []
        for (c, k, s), (record, v) in sorted(self.records.items(), key=lambda item: self.order[item[0]]):
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
    The searches run concurrently through ``executor``: each goes on as soon as
    its own probe is back, and a group's sizing starts as soon as the rate
    searches of its replica counts are done. The result does not depend on the
    order runs finish in. ``log`` receives one line per search as it ends;
    ``bar(n)``, if given, makes one progress bar (``total``, ``update()``,
    ``close()``; :class:`simbatch.sweep.progress.Progress`) whose total grows
    with the runs asked so far.
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
    plan = _Plan(prober, live, gpu_names, base_rate, tolerance, target_rate)
    try:
        plan.run()
    except BaseException:
        prober.cancel()
        raise
    finally:
        prober.close()
    result = CapacityResult(scenario, slo, base_rate, seed_rates,
                            [_boundary(prober, c, plan.brackets[c]) for c in live], skipped, gpu_names, target_rate)
    if target_rate is not None:
        result.sizing = plan.sizing()
    result.probes = prober.rows(base_rate, gpu_names)
    return result


class _Plan:
    """The searches of one capacity run, driven concurrently (:func:`drive_concurrently`).

    Each candidate's rate search starts at once. With a target rate, the sizing
    of a (policy, GPU, model, layout) group starts when the rate searches of all
    its replica counts have ended (its first guess needs their boundaries), not
    when every candidate's has: one slow candidate holds up only its own group.
    """

    def __init__(self, prober: Prober, live: list[Candidate], gpu_names: dict[Candidate, str],
                 base_rate: float, tolerance: float, target_rate: float | None):
        self.prober, self.gpu_names, self.base_rate = prober, gpu_names, base_rate
        self.live, self.tolerance = live, tolerance
        self.scale = target_rate / base_rate if target_rate is not None else None
        self.target_rate = target_rate
        self.groups = list(dict.fromkeys(c.with_replicas(1) for c in live))  # sizing order
        self.left = {g: sum(c.with_replicas(1) == g for c in live) for g in self.groups}
        self.brackets: dict[Candidate, Bracket] = {}
        self.guesses: dict[Candidate, int | None] = {}
        self.found: dict[Candidate, int | None] = {}

    def run(self) -> None:
        """Drive every search to its end."""
        searches = {SearchKey(RATE, i, c): rate_search(1.0, self.tolerance) for i, c in enumerate(self.live)}
        drive_concurrently(searches, self._ask, self.prober.answers, self._then)

    def _ask(self, key: SearchKey, point) -> None:
        if key.phase == RATE:
            self.prober.ask(key, key.of, point)
        else:
            self.prober.ask(key, key.of.with_replicas(point), self.scale)

    def _then(self, key: SearchKey, result) -> dict:
        """Log a search that ended; a group's sizing search once its rate searches are all done."""
        elapsed = time.perf_counter() - self.prober.started[key]
        probes = f"{self.prober.probes_of(key)} probe(s) x {len(self.prober.seeds)} seed(s) in {elapsed:.1f} s"
        if key.phase == SIZING:
            self.found[key.of] = result
            self.prober.log(f"sizing for {fmt_num(self.target_rate)} req/s done ({probes}): "
                            f"{self._sized(key.of, result)}")
            return {}
        self.brackets[key.of] = result
        self.prober.log(f"rate search {len(self.brackets)}/{len(self.live)} done ({probes}): "
                        f"{key.of.label(self.gpu_names[key.of])} {self._bracket(result)}")
        group = key.of.with_replicas(1)
        self.left[group] -= 1
        if self.scale is None or self.left[group]:
            return {}
        guess = self.guesses[group] = first_guess(
            [(c, self.brackets[c]) for c in self.live if c.with_replicas(1) == group], self.scale)
        if guess is None:
            return {}
        return {SearchKey(SIZING, self.groups.index(group), group): fewest_search(guess)}

    def _bracket(self, b: Bracket) -> str:
        """Where a rate search ended, in a few words."""
        def at(k):
            return f"{fmt_num(k * self.base_rate)} req/s (k={k:.3g})"
        if b.lo is None:
            return f"fails even at {at(b.hi)}" + ("; lower rates do not help" if b.hopeless else "")
        if b.hi is None:
            return f"holds at {at(b.lo)}, the highest scale searched"
        return f"holds at {at(b.lo)}, fails at {at(b.hi)}"

    def _sized(self, group: Candidate, n: int | None) -> str:
        """``continuous on a100-80gb tp1: 3 replica(s) (first guess 3)``."""
        g = group
        head = (f"{g.policy} on {self.gpu_names[g]}{' ' + g.model if g.model else ''}"
                f"{' ' + g.layout_name if g.layout_name else ''}{' as ' + g.split_name if g.split else ''}")
        if n is None:
            return f"{head}: still fails with {MAX_REPLICAS} replicas"
        return f"{head}: {n} {'unit(s)' if group.split else 'replica(s)'} (first guess {self.guesses[group]})"

    def sizing(self) -> dict[Candidate, Sizing]:
        """Per group (in candidate order), the fewest replicas that held, and why one fewer did not."""
        return {g: _sizing(self.prober, g, self.guesses.get(g), self.found.get(g), self.scale)
                for g in self.groups}


def first_guess(searched: list[tuple[Candidate, Bracket]], scale: float) -> int | None:
    """Replicas of one group to try first at ``scale``: linear scaling of each searched replica
    count's boundary (a candidate of r replicas holding at ``lo`` guesses ``scale x r / lo``),
    the most optimistic (smallest) of them; None when none held anywhere.

    The simulation then decides, since round-robin over n replicas is not exactly n times one.
    """
    guesses = [math.ceil(scale * c.replicas / b.lo - 1e-9) for c, b in searched if b.lo]
    return min(guesses) if guesses else None


def _sizing(prober: Prober, group: Candidate, guess: int | None, n: int | None, scale: float) -> Sizing:
    """The :class:`Sizing` of ``group``: ``n`` replicas found from first guess ``guess``."""
    if guess is None:
        return Sizing(group, None, None, None, "fails the SLOs at every rate searched")
    below = prober.verdict(group.with_replicas(n - 1), scale) if n and n > 1 else None
    note = "" if n else f"still fails with {MAX_REPLICAS} replicas (the search limit)"
    return Sizing(group.with_replicas(n or guess), n, guess, below, note)


def _boundary(prober: Prober, cand: Candidate, b: Bracket) -> Boundary:
    return Boundary(cand, b.lo, b.hi, prober.verdict(cand, b.lo), prober.verdict(cand, b.hi),
                    prober.seed_boundaries(cand), prober.hopeless.get(cand) if b.hopeless else None)


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
    from simbatch.catalog.hardware import get_gpu
    from simbatch.catalog.models import get_model

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
