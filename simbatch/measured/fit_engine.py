"""Fit a serving engine's overhead terms on measured runs (``simbatch calibrate --from-log``).

The terms of :mod:`simbatch.engines` (``step_s``, ``per_seq_s``,
``per_token_s``, ``request_s``) are not visible in a per-request log one by
one, so they are fitted through the simulator itself: each candidate set is
simulated on every fitting log's exact workload and scored by the squared log
ratio of predicted to measured TTFT p50 / p90 and TPOT p50 / p90, summed over
the logs. One set of terms serves every log: nothing depends on a file or a
rate. The search is deterministic and needs no gradient: a coordinate descent
in log space (each term in turn tries a few multiples of its value and zero,
the step narrowing when nothing improves), then a Nelder-Mead simplex in log
space, which follows the valley where a per-step and a per-sequence cost trade
off against each other (logs at several loads tell them apart); a few hundred
simulations of a few hundred requests each.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simbatch.engines import FITTED_TERMS
from simbatch.measured.replay import replay_scenario
from simbatch.measured.run import MeasuredRun
from simbatch.scenario import Scenario

METRICS = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")
# A term at zero restarts from this scale (seconds): a step, a sequence, a token, a request.
SCALES = {"step_s": 1e-3, "per_seq_s": 1e-4, "per_token_s": 1e-6, "request_s": 1e-2}
ROUNDS = ((0.25, 0.5, 2.0, 4.0), (0.7, 1.4))
SIMPLEX_EVALUATIONS = 120  # budget of the Nelder-Mead stage


@dataclass
class EngineFit:
    """The fitted terms, the loss they reach, and how many simulations the search ran."""

    terms: dict[str, float]
    loss: float
    evaluations: int


def measured_metrics(run: MeasuredRun) -> dict[str, float]:
    """TTFT and TPOT percentiles (ms) of a measured run's completed requests."""
    req = run.requests()
    req = req[req["completed"]]
    return _percentiles(req["ttft_ms"].to_numpy(), req["tpot_ms"].to_numpy())


def predicted_metrics(scenario: Scenario, run: MeasuredRun, engine: dict | None = None) -> dict[str, float]:
    """The same percentiles, simulated: ``scenario`` (with ``engine`` if given) on ``run``'s workload."""
    from simbatch.api import run as simulate

    out = simulate(replay_scenario(scenario, run, engine))
    req = out.requests[out.requests["completed"]]
    return _percentiles(req["ttft_ms"].to_numpy(), req["tpot_ms"].to_numpy())


def _percentiles(ttft: np.ndarray, tpot: np.ndarray) -> dict[str, float]:
    tpot = tpot[np.isfinite(tpot)]
    return {"ttft_p50": float(np.percentile(ttft, 50)), "ttft_p90": float(np.percentile(ttft, 90)),
            "tpot_p50": float(np.percentile(tpot, 50)), "tpot_p90": float(np.percentile(tpot, 90))}


def loss(predicted: list[dict], measured: list[dict]) -> float:
    """Sum over logs and :data:`METRICS` of ln(predicted / measured) squared."""
    return sum(math.log(p[m] / q[m]) ** 2 for p, q in zip(predicted, measured) for m in METRICS)


def fit_engine(scenario: Scenario, runs: list[MeasuredRun], terms: tuple[str, ...] = FITTED_TERMS,
               progress: Callable[[int, float], None] | None = None) -> EngineFit:
    """Fit ``terms`` of the scenario's engine on ``runs``, starting from the scenario's values.

    The engine's other fields (memory, preset) stay as the scenario sets them.
    ``progress(evaluations, best_loss)`` is called after each simulation batch.
    """
    base = scenario.engine.describe()
    current = {t: float(base.get(t) or 0.0) for t in terms}
    targets = [measured_metrics(r) for r in runs]
    count = 0

    def score(values: dict[str, float]) -> float:
        nonlocal count
        engine = {**{k: v for k, v in base.items() if v is not None}, **values}
        count += 1
        value = loss([predicted_metrics(scenario, r, engine) for r in runs], targets)
        if progress:
            progress(count, value)
        return value

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
    return EngineFit(current, best, count)


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
