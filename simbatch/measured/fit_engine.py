"""Fit a serving engine's overhead terms on measured runs (``simbatch calibrate --from-log``).

The terms of :mod:`simbatch.catalog.servers` (``step_s``, ``per_seq_s``,
``per_token_s``, ``request_s``) are not visible in a per-request log one by
one, so they are fitted through the simulator itself: each candidate set is
simulated on every fitting log's exact workload and scored by the squared log
ratio of predicted to measured TTFT p50 / p90 and TPOT p50 / p90, plus, when
the scenario has an ``slo:``, the SLO attainment's difference, summed over the
logs. The two kinds are weighed by the fidelity targets' tolerances (15 % on a
latency, 0.08 on attainment): an attainment 0.08 off costs what a latency
15 % off does. One set of terms serves every log: nothing depends on a file or a
rate. The search is deterministic and needs no gradient: a coordinate descent
in log space (each term in turn tries a few multiples of its value and zero,
the step narrowing when nothing improves), then a Nelder-Mead simplex in log
space, which follows the valley where a per-step and a per-sequence cost trade
off against each other (logs at several loads tell them apart). A simulated
loss is rugged, so the whole search runs from three fixed starting points and
the best wins: about 600 simulations of a few hundred requests each.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simbatch.catalog.servers import FITTED_TERMS
from simbatch.measured.replay import replay_scenario
from simbatch.measured.run import MeasuredRun
from simbatch.metrics.table_metrics import side_values
from simbatch.scenario.spec import Scenario

METRICS = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")
# An attainment this far off weighs as much as a latency off by LATENCY_TOLERANCE.
LATENCY_TOLERANCE, ATTAINMENT_TOLERANCE = 0.15, 0.08
ATTAINMENT_WEIGHT = (math.log1p(LATENCY_TOLERANCE) / ATTAINMENT_TOLERANCE) ** 2
# A term at zero restarts from this scale (seconds): a step, a sequence, a token, a request.
SCALES = {"step_s": 1e-3, "per_seq_s": 1e-4, "per_token_s": 1e-6, "request_s": 1e-2}
STARTS = [SCALES, {k: 4 * v for k, v in SCALES.items()}, {k: v / 4 for k, v in SCALES.items()}]
ROUNDS = ((0.25, 0.5, 2.0, 4.0), (0.7, 1.4))
SIMPLEX_EVALUATIONS = 120  # budget of the Nelder-Mead stage


@dataclass
class EngineFit:
    """The fitted terms, the loss they reach, and how many simulations the search ran."""

    terms: dict[str, float]
    loss: float
    evaluations: int


def measured_metrics(run: MeasuredRun, slo: dict | None = None) -> dict[str, float]:
    """TTFT and TPOT percentiles (ms) of a measured run's completed requests, and its SLO
    attainment under ``slo`` (``{ttft_ms: .., tpot_ms: ..}``) when given."""
    return _metrics(run.requests(), slo)


def predicted_metrics(scenario: Scenario, run: MeasuredRun, engine: dict | None = None,
                      slo: dict | None = None) -> dict[str, float]:
    """The same, simulated: ``scenario`` (with ``engine`` if given) on ``run``'s workload."""
    from simbatch.api import run as simulate

    return _metrics(simulate(replay_scenario(scenario, run, engine)).requests, slo)


def _metrics(req, slo: dict | None) -> dict[str, float]:
    """:data:`METRICS` (and ``attainment`` with an ``slo``) by the same definitions as
    ``validate --against`` (:func:`simbatch.metrics.table_metrics.side_values`)."""
    values = side_values(req, slo)
    out = {m: values[f"{m}_ms"] for m in METRICS}
    if slo:
        out["attainment"] = values["attainment"]
    return out


def unmeasured(measured: dict[str, float | None]) -> list[str]:
    """The :data:`METRICS` a log does not give (a log whose completed outputs are all one token
    long has no TPOT, vLLM's definition), which the fit leaves out for that log."""
    return [m for m in METRICS if measured[m] is None]


def loss(predicted: list[dict], measured: list[dict]) -> float:
    """Sum over logs of ln(predicted / measured) squared over the :data:`METRICS` each log
    measured (:func:`unmeasured`), plus the attainment's difference squared times
    :data:`ATTAINMENT_WEIGHT` where both have one."""
    total = 0.0
    for p, q in zip(predicted, measured):
        total += sum(math.log(p[m] / q[m]) ** 2 for m in METRICS if q[m] is not None)
        if "attainment" in p and "attainment" in q:
            total += ATTAINMENT_WEIGHT * (p["attainment"] - q["attainment"]) ** 2
    return total


def fit_engine(scenario: Scenario, runs: list[MeasuredRun], terms: tuple[str, ...] = FITTED_TERMS,
               progress: Callable[[int, float], None] | None = None,
               starts: list[dict[str, float]] | None = None) -> EngineFit:
    """Fit ``terms`` of the scenario's engine on ``runs``: the best of one search per start.

    A simulated loss is rugged (every step is a discrete event), so one search can
    settle in a local minimum; each of ``starts`` (default :data:`STARTS`: the
    terms' scales, then all of them 4x and 1/4x) runs the whole search and the
    lowest loss on the fitting logs wins. The default starts are fixed, never the
    scenario's own values, so a fit is a function of the logs and the scenario's
    other settings alone: rerunning it on a preset's scenario gives the preset
    back instead of drifting from one refit to the next. The engine's other fields
    (memory, preset) stay as the scenario sets them. ``progress(evaluations,
    best_loss)`` is called after each simulation.
    """
    base = {k: v for k, v in scenario.engine.describe().items() if v is not None}
    slo = scenario.slo.as_dict() or None
    for r in runs:  # a log of failures only has nothing to fit on (a TypeError deep in the loss)
        r.check_completed("fit on")
    targets = [measured_metrics(r, slo) for r in runs]
    count, best_seen = 0, math.inf

    def score(values: dict[str, float]) -> float:
        nonlocal count, best_seen
        count += 1
        value = loss([predicted_metrics(scenario, r, {**base, **values}, slo) for r in runs], targets)
        best_seen = min(best_seen, value)
        if progress:
            progress(count, best_seen)
        return value

    fits = [_search(score, {t: float(start[t]) for t in terms}) for start in starts or STARTS]
    terms_, value = min(fits, key=lambda f: f[1])
    return EngineFit(terms_, value, count)


def _search(score: Callable[[dict[str, float]], float], current: dict[str, float]) -> tuple[dict, float]:
    """Coordinate descent in log space, then Nelder-Mead on the terms left non-zero."""
    terms = list(current)
    best = score(current)
    for factors in ROUNDS:
        improved = True
        while improved:
            improved = False
            for term in terms:
                for value in _candidates(current[term], term, factors):
                    trial = {**current, term: value}
                    got = score(trial)
                    if got < best - 1e-12:
                        best, current, improved = got, trial, True
    live = [t for t in terms if current[t] > 0]  # a term the descent set to zero stays there
    if live:
        point, best = nelder_mead(lambda x: score({**current, **dict(zip(live, np.exp(x)))}),
                                  np.log([current[t] for t in live]), best, SIMPLEX_EVALUATIONS)
        current = {**current, **dict(zip(live, np.exp(point).tolist()))}
    return current, best


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, f0: float, budget: int,
                step: float = math.log(1.5)) -> tuple[np.ndarray, float]:
    """Minimise ``f`` from ``x0`` (where it is ``f0``) with the Nelder-Mead simplex (standard
    coefficients: reflect 1, expand 2, contract 0.5, shrink 0.5) within ``budget`` calls."""
    simplex = [x0] + [x0 + step * e for e in np.eye(len(x0))]
    values = [f0] + [f(x) for x in simplex[1:]]
    calls = len(x0)
    while calls < budget:
        order = np.argsort(values, kind="stable")
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-9:
            break
        centre = np.mean(simplex[:-1], axis=0)
        reflected = centre + (centre - simplex[-1])
        fr = f(reflected)
        calls += 1
        if fr < values[0]:
            expanded = centre + 2 * (centre - simplex[-1])
            fe = f(expanded)
            calls += 1
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centre + 0.5 * (simplex[-1] - centre)
            fc = f(contracted)
            calls += 1
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink towards the best point
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
                calls += len(simplex) - 1
    i = int(np.argmin(values))
    return simplex[i], values[i]


def _candidates(value: float, term: str, factors: tuple[float, ...]) -> list[float]:
    """Multiples of ``value`` (of the term's scale when it is zero), and zero itself."""
    if value == 0.0:
        return [SCALES[term] * f for f in (0.1, 1.0, 10.0)]
    return [value * f for f in factors] + [0.0]
