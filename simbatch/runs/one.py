"""One run: simulate a scenario and compute its summary and tables (:class:`RunOutput`).

Below :mod:`simbatch.api` (which re-exports these names) and :mod:`simbatch.validation`,
which both build on a run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from simbatch.engine.simulation import RunResult, simulate
from simbatch.errors import SimbatchError
from simbatch.metrics import replica_summaries, request_columns, step_columns, summarize
from simbatch.metrics.columns import Columns, names, to_frame
from simbatch.metrics.disaggregation import disaggregation_summary
from simbatch.metrics.fleet import fleet_summary, replicas_table
from simbatch.metrics.requests import token_runs
from simbatch.scenario.quantization import describe as quantization_formats
from simbatch.scenario.spec import Scenario
from simbatch.scenario.speculative import describe as describe_speculative
from simbatch.version import __version__


class RunOutput:
    """A finished run: the raw result, its summary (``summary.json``) and tables.

    ``requests`` and ``steps`` are pandas DataFrames, made on first use: the run
    keeps its tables as numpy columns (``request_columns``, ``step_columns``), so
    running and summarising a run never import pandas. Built from a
    :class:`RunResult`, the summary and the two tables, each given as columns
    (a dict of arrays) or as a DataFrame.
    """

    __slots__ = ("result", "summary", "_requests", "_steps")

    def __init__(self, result: RunResult, summary: dict, requests, steps):
        self.result = result
        self.summary = summary
        self._requests = requests
        self._steps = steps

    @property
    def requests(self):
        """One row per request (:func:`simbatch.metrics.request_table`), a pandas DataFrame."""
        if isinstance(self._requests, dict):
            self._requests = to_frame(self._requests)
        return self._requests

    @property
    def steps(self):
        """One row per engine step (:func:`simbatch.metrics.steps_table`), a pandas DataFrame."""
        if isinstance(self._steps, dict):
            self._steps = to_frame(self._steps)
        return self._steps

    @property
    def request_columns(self) -> Columns:
        """The request table as named numpy arrays (no pandas needed)."""
        return _as_columns(self._requests)

    @property
    def step_columns(self) -> Columns:
        """The step table as named numpy arrays (no pandas needed)."""
        return _as_columns(self._steps)

    @property
    def messages(self) -> list[str]:
        """Remarks the run made (cut batches, rejected requests, sorted traces...)."""
        return self.result.log.messages

    @property
    def control(self):
        """The online controller's decisions, a pandas DataFrame (one row each; empty without a
        controller)."""
        import pandas as pd

        from simbatch.control import CONTROL_COLUMNS

        return pd.DataFrame(self.result.log.control_rows, columns=list(CONTROL_COLUMNS))

    def write(self, out_dir: str | Path, format: str = "auto") -> list[Path]:
        """Write ``summary.json``, ``requests.csv``, ``steps.csv`` and ``run.log`` (all or nothing),
        and with a controller its trajectory, ``control.csv`` and ``control.png``. ``format``:
        the two tables as ``csv``, ``parquet`` (``requests.parquet``, ``steps.parquet``) or
        ``auto``, Parquet when a table has more rows than a spreadsheet holds
        (:func:`simbatch.report.outputs.table_format`). Returns the written paths."""
        from simbatch.report import write_run

        extra = {}
        if self.result.log.control_rows:
            from simbatch.control.plot import plot_control

            control = self.control
            targets = {f"{k}": v for k, v in (self.summary.get("slo") or {}).items()
                       if k in ("ttft_ms", "tpot_ms")}
            extra = {"control.csv": lambda p: control.to_csv(p, index=False),
                     "control.png": lambda p: plot_control(control, p, targets)}
        if self.result.fleet is not None:
            from simbatch.report.csv_table import write_csv

            timeline = replicas_table(self.result.fleet)
            extra["replicas.csv"] = lambda p: write_csv(p, timeline)
        return write_run(Path(out_dir), self.summary, self.request_columns, self.step_columns, self.messages,
                         extra, format)


def _as_columns(table) -> Columns:
    """A table given as columns or as a DataFrame, as columns."""
    if isinstance(table, dict):
        return table
    return {name: table[name].to_numpy() for name in names(table)}


def describe_model(model) -> dict:
    """The model for ``summary.json``: size and KV per token, active parameters of a mixture of
    experts, storage formats of a quantised one."""
    out = {"name": model.name, "num_params": model.num_params, "kv_bytes_per_token": model.kv_bytes_per_token}
    if model.is_moe:
        out["active_params"] = model.active_params
    if model.weight_quant != "none" or model.kv_quant != "none":
        out["quantization"] = quantization_formats(model)
    return out


def describe_run(result: RunResult) -> dict:
    """What ran: policy, model, hardware and cost model, for ``summary.json``.

    ``hardware`` describes the first replica group, as ``cost_model`` does: its GPU, tensor-parallel
    degree and pipeline stages (a disaggregated run's prefill pool; each pool's are in the
    ``disaggregation`` section), and the replicas and GPUs of the whole run."""
    sc, model, gpu = result.scenario, result.model, result.gpu
    first = result.groups[0] if result.groups else None
    tp = first.tensor_parallel if first else sc.cluster.tensor_parallel
    pp = first.pipeline_parallel if first else sc.cluster.pipeline_parallel
    return {
        "scenario": sc.name,
        "scenario_file": str(Path(sc.source).resolve()) if Path(sc.source).is_file() else None,
        "seed": sc.seed,
        "simbatch_version": __version__,
        "policy": {"kind": sc.data["policy"]["kind"], **dataclasses.asdict(result.policy_params)},
        "model": describe_model(model),
        "hardware": {"name": gpu.name, "replicas": len(result.group_of_replica) or sc.cluster.replicas,
                     "tensor_parallel": tp, **({"pipeline_parallel": pp} if pp > 1 else {}),
                     "gpus": sum(g.count * g.gpus_per_replica for g in result.groups) or None,
                     "kv_blocks_per_replica": result.log.kv_capacity_blocks[0],
                     "kv_block_size": sc.kv_cache.block_size, "kv_mode": sc.kv_cache.mode},
        "cost_model": result.cost_model.describe(),
        "kv_budget": first.kv_budget.describe() if first and first.kv_budget else None,
        "engine": None if sc.engine.is_plain else sc.engine.describe(),
        "slo": sc.slo.as_dict() or None,
        "workload": {"source": result.workload.source, "num_requests": len(result.workload)},
        "control": describe_control(result.log.control_rows, sc.data.get("control")),
        "speculative": describe_speculation(result),
    }


def describe_speculation(result: RunResult) -> dict | None:
    """The speculative section as it ran and what its verify steps did (None without one)."""
    sc, stats = result.scenario, result.log.speculation
    if sc.speculative is None or stats is None:
        return None
    return {**describe_speculative(sc.speculative, sc.drafter), **stats}


def describe_control(rows: list[dict], spec: dict | None) -> dict | None:
    """The controller's settings and what its knob did (None without one), for ``summary.json``."""
    if not rows:
        return None
    values = [r["value"] for r in rows]
    return {**(spec or {}), "knob": rows[0]["knob"], "decisions": len(rows) - 1,
            "start": values[0], "final": values[-1], "min": min(values), "max": max(values),
            "mean": sum(values) / len(values)}


def check_scenario(scenario, where: str = "scenario") -> Scenario:
    """``scenario`` when it is a :class:`Scenario`, else a one-line :class:`SimbatchError` saying
    how to make one (``run('classroom')`` failed with an AttributeError deep in the engine)."""
    if not isinstance(scenario, Scenario):
        shown = repr(str(scenario) if isinstance(scenario, Path) else scenario)[:60]
        hint = f"load it first: load_scenario({shown})" if isinstance(scenario, (str, Path)) else \
            "load_scenario(name or path) makes one"
        raise SimbatchError(where, f"expected a Scenario, got {shown}; {hint}")
    return scenario


def run(scenario: Scenario) -> RunOutput:
    """Simulate ``scenario`` and compute its metrics."""
    return run_output(simulate(check_scenario(scenario)))


def run_output(result: RunResult) -> RunOutput:
    """The summary and tables of an engine run: the one summariser, for :func:`run` and for both
    sides of a validation (which had its own, drifted: another peak-FLOPs figure, no per-replica
    summaries)."""
    scenario = result.scenario
    tp = scenario.cluster.tensor_parallel * scenario.cluster.pipeline_parallel  # GPUs per replica
    steps = step_columns(result.log)
    runs = token_runs(result.log, steps)  # placed on the steps once, for the requests and the ITL pool
    requests = request_columns(result.log, result.workload, runs=runs)
    summary = summarize(result.log, result.workload, slo=scenario.slo.as_dict() or None,
                        peak_flops=result.peak_flops, peak_bandwidth=result.peak_bandwidth,
                        gpus_per_replica=tp, requests=requests, steps=steps, runs=runs,
                        front_end_s=scenario.engine.request_s)
    del runs
    summary.update(describe_run(result))
    summary["replicas"] = replica_summaries(requests, steps, summary["duration_s"], result.replica_info(),
                                            result.peak_flops, result.peak_bandwidth)
    if result.disaggregation is not None:
        summary["disaggregation"] = disaggregation_summary(requests, steps, summary["duration_s"],
                                                           result.disaggregation)
    if result.fleet is not None:
        arrivals = result.workload.arrival_s
        end = (float(arrivals.min()) if len(arrivals) else 0.0) + summary["duration_s"]  # the fleet runs from t = 0
        summary["autoscale"] = fleet_summary(result.fleet, requests, end, tp, result.gpu.name,
                                             scenario.slo.as_dict())
    return RunOutput(result, summary, requests, steps)
