"""One run: simulate a scenario and compute its summary and tables (:class:`RunOutput`).

Below :mod:`simbatch.api` (which re-exports these names) and :mod:`simbatch.validation`,
which both build on a run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from simbatch.engine.simulation import RunResult, simulate
from simbatch.metrics import replica_summaries, request_table, steps_table, summarize
from simbatch.metrics.disaggregation import disaggregation_summary
from simbatch.quantization import describe as quantization_formats
from simbatch.report import write_run
from simbatch.scenario import Scenario
from simbatch.version import __version__


@dataclass
class RunOutput:
    """A finished run: the raw result, its summary (``summary.json``) and tables."""

    result: RunResult
    summary: dict
    requests: pd.DataFrame
    steps: pd.DataFrame

    @property
    def messages(self) -> list[str]:
        """Remarks the run made (cut batches, rejected requests, sorted traces...)."""
        return self.result.log.messages

    @property
    def control(self) -> pd.DataFrame:
        """The online controller's decisions (one row each; empty without a controller)."""
        from simbatch.control import CONTROL_COLUMNS

        return pd.DataFrame(self.result.log.control_rows, columns=list(CONTROL_COLUMNS))

    def write(self, out_dir: str | Path) -> None:
        """Write ``summary.json``, ``requests.csv``, ``steps.csv`` and ``run.log`` (all or nothing),
        and with a controller its trajectory, ``control.csv`` and ``control.png``."""
        extra = {}
        if self.result.log.control_rows:
            from simbatch.control.plot import plot_control

            control = self.control
            targets = {f"{k}": v for k, v in (self.summary.get("slo") or {}).items()
                       if k in ("ttft_ms", "tpot_ms")}
            extra = {"control.csv": lambda p: control.to_csv(p, index=False),
                     "control.png": lambda p: plot_control(control, p, targets)}
        write_run(Path(out_dir), self.summary, self.requests, self.steps, self.messages, extra)


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
    """What ran: policy, model, hardware and cost model, for ``summary.json``."""
    sc, model, gpu = result.scenario, result.model, result.gpu
    return {
        "scenario": sc.name,
        "seed": sc.seed,
        "simbatch_version": __version__,
        "policy": {"kind": sc.data["policy"]["kind"], **dataclasses.asdict(result.policy_params)},
        "model": describe_model(model),
        "hardware": {"name": gpu.name, "replicas": len(result.group_of_replica) or sc.cluster.replicas,
                     "tensor_parallel": sc.cluster.tensor_parallel,
                     **({"pipeline_parallel": sc.cluster.pipeline_parallel}
                        if sc.cluster.pipeline_parallel > 1 else {}),
                     "gpus": sum(g.count * g.gpus_per_replica for g in result.groups) or None,
                     "kv_blocks_per_replica": result.log.kv_capacity_blocks[0],
                     "kv_block_size": sc.kv_cache.block_size, "kv_mode": sc.kv_cache.mode},
        "cost_model": result.cost_model.describe(),
        "engine": None if sc.engine.is_plain else sc.engine.describe(),
        "slo": sc.slo.as_dict() or None,
        "workload": {"source": result.workload.source, "num_requests": len(result.workload)},
        "control": describe_control(result.log.control_rows, sc.data.get("control")),
    }


def describe_control(rows: list[dict], spec: dict | None) -> dict | None:
    """The controller's settings and what its knob did (None without one), for ``summary.json``."""
    if not rows:
        return None
    values = [r["value"] for r in rows]
    return {**(spec or {}), "knob": rows[0]["knob"], "decisions": len(rows) - 1,
            "start": values[0], "final": values[-1], "min": min(values), "max": max(values),
            "mean": sum(values) / len(values)}


def run(scenario: Scenario) -> RunOutput:
    """Simulate ``scenario`` and compute its metrics."""
    result = simulate(scenario)
    tp = scenario.cluster.tensor_parallel * scenario.cluster.pipeline_parallel  # GPUs per replica
    requests, steps = request_table(result.log, result.workload), steps_table(result.log)
    summary = summarize(result.log, result.workload, slo=scenario.slo.as_dict() or None,
                        peak_flops=result.peak_flops, peak_bandwidth=result.peak_bandwidth,
                        gpus_per_replica=tp, requests=requests, steps=steps)
    summary.update(describe_run(result))
    summary["replicas"] = replica_summaries(requests, steps, summary["duration_s"], result.replica_info(),
                                            result.peak_flops, result.peak_bandwidth)
    if result.disaggregation is not None:
        summary["disaggregation"] = disaggregation_summary(requests, steps, summary["duration_s"],
                                                           result.disaggregation)
    return RunOutput(result, summary, requests, steps)
