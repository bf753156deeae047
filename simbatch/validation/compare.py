"""Pairing measured steps with predictions, and the error definitions of ``validation.json``.

* A *paired step* is one step the torch backend executed, with its measured
  wall time, and the calibrated cost model's price of the very same plan.
  Pairing by plan (not by step number across two runs) compares like with
  like even though the predicted run's schedule drifts from the measured one.
* *APE* (absolute percentage error) of a step: ``|predicted / measured - 1|``.
  ``step_ape`` is over the whole step (overhead included, what the simulator
  advances its clock by); ``forward_ape`` leaves both sides' overhead out.
* Step kinds: ``decode_only`` (every slot decodes), ``prefill_heavy`` (prefill
  rows, padding included, are at least half the step's rows) and ``mixed``
  (prefill slots present, decode rows the majority).
* End-to-end errors are signed, ``predicted / measured - 1``, between the
  predicted run (the same workload simulated with the cost model) and the
  measured run: TTFT, TPOT and E2EL at p50 and p99, and output throughput.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simbatch.core.plan import StepPlan

KINDS = ("prefill_heavy", "decode_only", "mixed")
LATENCIES = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("e2el", "e2el_ms"))
STATS = (("p50", "median"), ("p99", "p99"))


def step_kind(plan: StepPlan) -> str:
    """``decode_only``, ``prefill_heavy`` or ``mixed`` (module docstring)."""
    d = plan.num_decode_slots
    if d == plan.num_slots:
        return "decode_only"
    rows = plan.query_lengths()
    prefill_rows = sum(rows[d:])
    return "prefill_heavy" if 2 * prefill_rows >= sum(rows) else "mixed"


def pair_steps(records, cost_model) -> pd.DataFrame:
    """One row per measured step (``TorchBackend.steps``) with the cost model's price of its plan."""
    rows = []
    for i, r in enumerate(records):
        plan, pred = r.plan, cost_model.step_cost(r.plan)
        pred_over = pred.breakdown.get("overhead", 0.0)
        rows.append({
            "step": i, "kind": step_kind(plan), "num_slots": plan.num_slots, "num_seqs": plan.num_seqs,
            "prefill_tokens": plan.num_prefill_tokens, "decode_tokens": plan.num_decode_tokens,
            "padded_tokens": plan.num_padded_tokens, "context_tokens": sum(plan.num_context_tokens),
            "measured_s": r.seconds, "forward_s": r.forward_s, "overhead_s": r.overhead_s,
            "schedule_s": r.schedule_s, "prepare_s": r.prepare_s,
            "predicted_s": pred.seconds, "predicted_forward_s": pred.seconds - pred_over,
            "predicted_overhead_s": pred_over,
        })
    table = pd.DataFrame(rows, columns=_COLUMNS)
    table["ape"] = ape(table["predicted_s"], table["measured_s"])
    table["forward_ape"] = ape(table["predicted_forward_s"], table["forward_s"])
    return table


_COLUMNS = ["step", "kind", "num_slots", "num_seqs", "prefill_tokens", "decode_tokens", "padded_tokens",
            "context_tokens", "measured_s", "forward_s", "overhead_s", "schedule_s", "prepare_s",
            "predicted_s", "predicted_forward_s", "predicted_overhead_s"]


def ape(predicted, measured) -> np.ndarray:
    """``|predicted / measured - 1|`` elementwise (NaN where nothing was measured)."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m > 0, np.abs(p / m - 1.0), np.nan)


def ape_stats(values) -> dict:
    """``{median, p90, steps}`` of APEs (None when there are none)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if not v.size:
        return {"median": None, "p90": None, "steps": 0}
    return {"median": float(np.median(v)), "p90": float(np.percentile(v, 90)), "steps": int(v.size)}


def step_errors(pairs: pd.DataFrame, column: str = "ape") -> dict:
    """APE stats over all steps, then per step kind."""
    out = ape_stats(pairs[column])
    for kind in KINDS:
        out[kind] = ape_stats(pairs.loc[pairs["kind"] == kind, column])
    return out


def signed_error(predicted, measured) -> float | None:
    """``predicted / measured - 1``, or None where either is missing or measured is 0."""
    if predicted is None or measured is None or not measured or np.isnan(predicted) or np.isnan(measured):
        return None
    return float(predicted) / float(measured) - 1.0


def headline(summary: dict) -> dict:
    """The numbers validation compares, from a ``summary.json`` dict."""
    out = {f"{name}_{label}_ms": (summary.get(key) or {}).get(stat)
           for name, key in LATENCIES for label, stat in STATS}
    out["output_throughput"] = summary.get("output_throughput")
    out["request_throughput"] = summary.get("request_throughput")
    out["completed"] = summary.get("completed")
    return out


def end_to_end_errors(measured: dict, predicted: dict) -> dict:
    """Signed errors of the predicted run's headline numbers against the measured run's."""
    m, p = headline(measured), headline(predicted)
    out = {f"{name}_{label}_err": signed_error(p[f"{name}_{label}_ms"], m[f"{name}_{label}_ms"])
           for name, _ in LATENCIES for label, _ in STATS}
    out["throughput_err"] = signed_error(p["output_throughput"], m["output_throughput"])
    return out


def policy_validation(pairs: pd.DataFrame, measured: dict, predicted: dict) -> dict:
    """One policy's entry of ``validation.json``."""
    over = pairs[["overhead_s", "predicted_overhead_s"]].median() if len(pairs) else None
    return {
        "step_ape": step_errors(pairs, "ape"),
        "forward_ape": step_errors(pairs, "forward_ape"),
        **end_to_end_errors(measured, predicted),
        "overhead_median_ms": None if over is None else {"measured": float(over["overhead_s"]) * 1e3,
                                                         "predicted": float(over["predicted_overhead_s"]) * 1e3},
        "measured": headline(measured),
        "predicted": headline(predicted),
    }
