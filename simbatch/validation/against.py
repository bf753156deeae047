"""Validation against measured runs of real servers: replay each log's workload, compare.

For every log (read by :func:`simbatch.measured.read_measured`), the scenario
(model, hardware, cluster or disaggregated pools, policy, engine settings,
cost model) is simulated on that log's exact workload: the same arrival times
and the same prompt and output lengths, request for request. The predicted
run is then set against what the real server did.

Error definitions (``validation.json``'s ``against`` entries), each signed,
``predicted / measured - 1`` (None where either side is missing or measured is 0):

* ``ttft_p50_err``, ``ttft_p90_err``, ``ttft_p99_err``, ``tpot_p50_err``,
  ``tpot_p90_err``, ``e2el_p50_err``: percentiles over each side's completed
  requests, ``np.percentile``'s default (linear) method as in ``summary.json``.
  Latencies use vLLM's definitions on both sides (docs/metrics.md): TPOT is
  (E2EL - TTFT) / (output tokens - 1), undefined for one-token outputs.
* ``throughput_err``: request throughput, computed the same way on both sides
  as completed requests / (last finish - first arrival). (This is not the
  summary's ``request_throughput``, whose span ends at the last step: a log
  has no steps.)
* ``attainment_measured`` / ``attainment_predicted``: the share of all the
  log's requests that completed and met every target of the scenario's
  ``slo:`` (computed by the same function as the summary's
  ``slo_attainment``: a one-token output has no TPOT and passes it); None
  without an ``slo:`` section.

Each entry also holds ``log`` (its path), ``num_requests``, ``offered_rate``
(requests/s the client sent) and the absolute values behind each error,
``<metric>_measured`` and ``<metric>_predicted`` (ms; req/s for throughput),
``kv_implied_tokens``: the most tokens the server held while requests waited
(the KV capacity the log implies, :mod:`simbatch.measured.capacity`; None
when nothing waited) beside ``kv_capacity_tokens``, the scenario's pool, with
``kv_implied`` holding its figures and a one-line verdict,
and ``steps_vs_other_logs``: how much longer (+) this log's decode windows ran
than a step model read from the other logs' own timestamps predicts
(:mod:`simbatch.measured.speed`; None with one log, where the log's load lies
outside the others', or for a disaggregated scenario). Logs of one server in one state agree within a few percent; one
set of engine terms cannot match logs that do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simbatch.errors import SimbatchError
from simbatch.measured.replay import replay_scenario
from simbatch.measured.run import MeasuredRun

# One definition of the compared values for both sides (and for the engine fit).
from simbatch.metrics.table_metrics import LATENCIES, inflight_tokens, side_values
from simbatch.runs.one import RunOutput
from simbatch.runs.one import run as simulate_run
from simbatch.scenario.spec import Scenario
from simbatch.validation.compare import signed_error

METRICS = tuple(f"{name}_{p}_ms" for name, _, ps in LATENCIES for p in ps) + ("throughput",)
ERROR_KEYS = tuple(f"{m.removesuffix('_ms')}_err" for m in METRICS)
VALUE_KEYS = tuple(f"{m}_{side}" for m in METRICS for side in ("measured", "predicted"))
ENTRY_KEYS = ("log", "num_requests", "offered_rate", *ERROR_KEYS,
              "attainment_measured", "attainment_predicted", *VALUE_KEYS,
              "inflight_tokens_p99_measured", "inflight_tokens_p99_predicted", "kv_capacity_tokens",
              "kv_implied_tokens", "kv_implied", "steps_vs_other_logs")
PAIR_COLUMNS = ("id", "arrival_s", "prompt", "output",
                *(f"{col}_{side}" for _, col, _ in LATENCIES for side in ("measured", "predicted")))


@dataclass
class LogValidation:
    """One log: what the server did, what the simulator predicted, per-request pairs, the errors."""

    name: str  # unique file stem among the logs, for pairs/<name>.csv and cdfs/<name>.png
    measured: MeasuredRun
    predicted: RunOutput
    pairs: pd.DataFrame  # PAIR_COLUMNS, one row per request in arrival order
    errors: dict  # ENTRY_KEYS, the log's entry of validation.json


@dataclass
class AgainstResult:
    """``validate_against``'s result: the scenario and one :class:`LogValidation` per log."""

    scenario: Scenario
    logs: list[LogValidation]

    @property
    def cost_model(self) -> dict:
        """The cost model's description (as in ``summary.json``) from the first predicted run."""
        return self.logs[0].predicted.summary.get("cost_model") or {} if self.logs else {}

    def as_json(self) -> dict:
        """``validation.json``: the scenario, the cost model and the ``against`` list."""
        return {"scenario": describe_scenario(self.scenario), "cost_model": self.cost_model,
                "against": [v.errors for v in self.logs]}


def describe_scenario(scenario: Scenario) -> dict:
    """What was replayed: name, file, model, hardware, layout, policy and SLO."""
    d = scenario.data
    return {"name": scenario.name, "source": scenario.source, "model": d.get("model"),
            "hardware": d.get("hardware"),
            "layout": "disaggregated" if scenario.is_disaggregated else "colocated",
            "policy": d.get("policy"), "slo": scenario.slo.as_dict() or None}


def log_names(paths: list[str | Path]) -> list[str]:
    """Each log's file stem, made unique with ``-2``, ``-3``... (two folders may hold equal names)."""
    names, seen = [], {}
    for path in paths:
        stem = Path(path).stem
        seen[stem] = seen.get(stem, 0) + 1
        names.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return names


def validate_against(scenario: Scenario, logs: list[str | Path], format: str | None = None,
                     columns: dict | None = None) -> AgainstResult:
    """Replay each measured log's workload through ``scenario`` and measure the errors.

    ``format`` / ``columns`` go to :func:`simbatch.measured.read_measured` for
    every log. All logs are read before anything is simulated, so a bad log
    fails fast. A log the scenario cannot serve (a request larger than a
    replica's KV cache) is a :class:`SimbatchError` naming the log.
    """
    from simbatch.measured import read_measured

    if not logs:
        raise SimbatchError("--against", "no measured log given")
    runs = [read_measured(path, format=format, columns=columns) for path in logs]
    return validate_runs(scenario, runs, [str(p) for p in logs])


def validate_runs(scenario: Scenario, runs: list[MeasuredRun], labels: list[str] | None = None) -> AgainstResult:
    """:func:`validate_against` on runs already read (``labels``: each run's ``log``; default its source)."""
    labels = labels or [r.source for r in runs]
    names = log_names(labels)
    for run in runs:  # before any simulation: a log of failures only compared as every error None
        run.check_completed("compare with")
    logs = [validate_run(scenario, run, label, name) for run, label, name in zip(runs, labels, names)]
    for v, speed in zip(logs, log_speeds(scenario, runs)):
        v.errors["steps_vs_other_logs"] = speed
    return AgainstResult(scenario, logs)


def log_speeds(scenario: Scenario, runs: list[MeasuredRun]) -> list[float | None]:
    """Each log's own step speed against the others' (:func:`simbatch.measured.speed.
    comparable_speeds`): None with one log, for a log whose load lies outside the others'
    (an extrapolation, not a comparison), or where the check does not apply (a disaggregated
    scenario: :func:`simbatch.measured.speed.applies_to`)."""
    from simbatch.measured.speed import applies_to, comparable_speeds

    if len(runs) < 2 or not applies_to(scenario):
        return [None] * len(runs)
    return [None if not np.isfinite(s) else float(s) for s in comparable_speeds(runs)]


def check_window(scenario: Scenario, run: MeasuredRun, label: str) -> None:
    """A logged request longer than the scenario model's context window: the server held it, so
    the scenario's model is not the server's (a replay would refuse it, issue 34 §8, and compare
    different request sets); one line naming the first such request."""
    measured = run.requests()
    total = (measured["prompt_tokens"] + measured["output_tokens"]).to_numpy()
    window = scenario.model.max_context
    beyond = np.flatnonzero(total > window)
    if beyond.size:
        i = int(beyond[0])
        raise SimbatchError(label, f"request {i} (prompt {int(measured['prompt_tokens'].iloc[i]):,} + output "
                                   f"{int(measured['output_tokens'].iloc[i]):,} tokens) is longer than "
                                   f"{scenario.model.name}'s context window ({window:,} tokens; {beyond.size} such "
                                   f"request(s)): the server held it, so the scenario's model is not the "
                                   f"server's; name the server's model, or set model.max_context")


def validate_run(scenario: Scenario, run: MeasuredRun, label: str, name: str) -> LogValidation:
    """One log: simulate its workload under ``scenario``, pair the requests, compute the errors."""
    check_window(scenario, run, label)
    try:
        predicted = simulate_run(replay_scenario(scenario, run))  # simbatch.runs.one.run
    except SimbatchError as exc:
        raise SimbatchError(label, f"the scenario cannot replay this log: {exc}") from None
    measured = run.requests()
    if len(predicted.requests) != len(measured):  # ids are arrival order on both sides
        raise SimbatchError(label, f"replayed {len(predicted.requests)} requests of {len(measured)}")
    errors = log_errors(measured, predicted.requests, scenario.slo.as_dict())
    entry = {"log": label, "num_requests": len(run), "offered_rate": run.offered_rate, **errors,
             "inflight_tokens_p99_measured": inflight_tokens(measured),
             "inflight_tokens_p99_predicted": inflight_tokens(predicted.requests),
             "kv_capacity_tokens": kv_capacity_tokens(predicted.summary, scenario),
             **implied_entry(run, kv_capacity_tokens(predicted.summary, scenario)),
             "steps_vs_other_logs": None}  # set by validate_runs, which sees every log
    return LogValidation(name, run, predicted, pair_requests(measured, predicted.requests),
                         {k: entry[k] for k in ENTRY_KEYS})


def implied_entry(run: MeasuredRun, budget: int | None) -> dict:
    """The KV capacity the log implies (:mod:`simbatch.measured.capacity`): ``kv_implied_tokens``,
    the most tokens it held while requests waited (None: nothing waited, so it bounds nothing),
    and ``kv_implied``, its figures and a verdict beside the scenario's pool."""
    from simbatch.measured.capacity import engine_record, implied_capacity

    implied, own = implied_capacity(run), engine_record(run.source)
    verdict = implied.verdict(budget)
    if own.get("engine_tokens"):
        verdict = (f"the engine's own pool is {own['engine_tokens']:,} tokens (its meta.json), the scenario's "
                   f"{budget:,} ({budget / own['engine_tokens'] - 1:+.1%}); from the log alone: {verdict}")
    return {"kv_implied_tokens": implied.peak_while_waiting,
            "kv_implied": {**implied.describe(), **own, "verdict": verdict}}


def kv_capacity_tokens(summary: dict, scenario: Scenario) -> int | None:
    """KV tokens of the replica (colocated) or decode instance (disaggregated) the log's requests
    decode on: the first such replica's blocks x block size; None when the run names none."""
    rows = summary.get("replicas") or []
    if scenario.is_disaggregated:
        rows = [r for r in rows if r.get("pool") == "decode"] or rows
    blocks = rows[0].get("kv_blocks") if rows else None
    return int(blocks) * scenario.kv_cache.block_size if blocks else None


def log_errors(measured: pd.DataFrame, predicted: pd.DataFrame, slo: dict) -> dict:
    """Signed errors, attainments and absolute values (keys of ENTRY_KEYS but the log's own)."""
    m, p = side_values(measured, slo), side_values(predicted, slo)
    out = {f"{k.removesuffix('_ms')}_err": signed_error(p[k], m[k]) for k in METRICS}
    out["attainment_measured"], out["attainment_predicted"] = m["attainment"], p["attainment"]
    for k in METRICS:
        out[f"{k}_measured"], out[f"{k}_predicted"] = m[k], p[k]
    return out


def pair_requests(measured: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """One row per request: its arrival and lengths, each latency measured beside predicted."""
    cols = {"id": measured["id"].to_numpy(), "arrival_s": measured["arrival_s"].to_numpy(),
            "prompt": measured["prompt_tokens"].to_numpy(), "output": measured["output_tokens"].to_numpy()}
    for _, col, _ in LATENCIES:
        cols[f"{col}_measured"] = measured[col].to_numpy(dtype=np.float64)
        cols[f"{col}_predicted"] = predicted[col].to_numpy(dtype=np.float64)
    return pd.DataFrame(cols, columns=list(PAIR_COLUMNS))
