"""End-to-end fidelity against measured runs of real serving systems (issue 12's targets).

Replays every shared measured log (../shared/measured/distserve-opt13b-a100/:
real vLLM and DistServe serving OPT-13B on A100s) through the shipped scenario
that mirrors its server, and prints measured beside predicted TTFT p50/p90,
TPOT p50/p90 and SLO attainment, with the signed error of each. Each
mechanism of the serving-engine model is added in turn, so the table shows
which error each one moved:

  before      engine: none (the cost model's 1 ms step overhead, no memory held back)
  +overhead   the engine's per-step, per-sequence and per-token time
  +memory     + the memory the engine holds back from the KV cache by its own sizing rule
  +front end  + the per-request front-end latency (the whole preset)
  +pull       disaggregated scenarios with ``transfer: pull`` only: the decode instance
              takes each prompt's KV between its steps, under its waiting-blocks limit,
              and each copy stalls its decoding (DistServe); the stages before push

Targets: TTFT p50/p90 and TPOT p50/p90 within 15 % and attainment within 0.08
on every log, with one set of engine parameters per system, fitted only on the
vLLM logs at 2 req/s or less (DistServe: its 3 and 4.5 req/s logs).
Before the stages, each system's logs are checked against each other from their
own timestamps (simbatch.measured.speed): how much longer each log's decode
windows ran than a step model fitted on the other logs predicts, given each
log's own batches and prompts (colocated servers only). It needs no
simulation and no engine term.
``--refit`` fits the terms again here (simbatch calibrate --from-log) instead of
taking the preset's. Not a test: it asserts nothing.

    python benchmarks/bench_fidelity.py [--refit] [--system vllm|distserve]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT.parent / "shared" / "measured" / "distserve-opt13b-a100"
SYSTEMS = {
    "vllm": ("vllm_opt13b_a100.yaml", "vllm-*.exp", lambda rate: rate <= 2.0),
    "distserve": ("distserve_opt13b_a100.yaml", "distserve-*.exp", lambda rate: rate <= 4.5),
}
STAGES = ("before", "+overhead", "+memory", "+front end", "+pull")
METRICS = (("ttft_p50", "TTFT p50"), ("ttft_p90", "TTFT p90"), ("tpot_p50", "TPOT p50"), ("tpot_p90", "TPOT p90"))
TOLERANCE, ATTAINMENT_TOLERANCE = 0.15, 0.08


def stage_engine(full: dict, stage: str) -> dict:
    """The engine section of one ablation stage, from the full (fitted) engine."""
    if stage == "before":
        return {"preset": "none"}
    engine = {"preset": "none", **{k: full[k] for k in ("step_s", "per_seq_s", "per_token_s")}}
    if stage in ("+memory", "+front end", "+pull"):
        engine.update({k: full[k] for k in ("profile_activations", "non_torch_gib", "reserve_fraction")})
    if stage in ("+front end", "+pull"):
        engine["request_s"] = full["request_s"]
    return engine


def stage_stages(scenario) -> tuple[str, ...]:
    """The stages that apply: ``+pull`` only where the scenario pulls its transfers."""
    pulls = scenario.is_disaggregated and scenario.disaggregation.transfer.mode == "pull"
    return STAGES if pulls else STAGES[:-1]


def evaluate(scenario, runs, engine: dict, stage: str) -> list[dict]:
    """Per log: measured and predicted metrics and attainment (validate --against's numbers)."""
    from simbatch.scenario import from_dict
    from simbatch.validation.against import validate_runs

    data = {**scenario.data, "engine": engine}
    if scenario.is_disaggregated and stage != "+pull":  # the transfer rule is the last stage
        data["disaggregation"] = {**data["disaggregation"], "transfer": "push"}
    sc = from_dict(data, scenario.source, scenario.base_dir)
    result = validate_runs(sc, runs, [r.source for r in runs])
    return [v.errors for v in result.logs]


def print_stage(system: str, stage: str, rows: list[dict], fitted: set[str]) -> int:
    """One table; returns how many logs meet every target."""
    head = f"{'log':<28}{'fit':>4}" + "".join(f"{label + ' ms m/p':>20}{'err':>8}" for _, label in METRICS)
    print(f"\n{system}, {stage}\n{head}{'SLO m/p':>14}{'ok':>4}")
    met = 0
    for e in rows:
        name = Path(e["log"]).name
        line = f"{name:<28}{'*' if name in fitted else '':>4}"
        ok = True
        for key, _ in METRICS:
            m, p = e[f"{key}_ms_measured"], e[f"{key}_ms_predicted"]
            err = p / m - 1
            ok &= abs(err) <= TOLERANCE
            line += f"{m:>10.0f} / {p:<7.0f}{err * 100:>+7.1f}%"
        am, ap = e["attainment_measured"], e["attainment_predicted"]
        ok &= abs(ap - am) <= ATTAINMENT_TOLERANCE
        met += ok
        print(f"{line}{am:>8.2f} / {ap:<4.2f}{'yes' if ok else 'no':>4}")
    print(f"targets met on {met} of {len(rows)} logs (* = fitted on)")
    return met


def print_speeds(system: str, scenario, runs) -> None:
    """How each log's decode steps compare with a step model read from the other logs' own
    timestamps (simbatch.measured.speed; colocated servers only): logs of one server in one
    state agree within a few percent; one parameter set fitted across logs that do not
    averages their speeds."""
    from simbatch.measured.speed import applies_to, speed_table

    if not applies_to(scenario):
        return
    print(f"\n{system}, the logs' own step speed (decode windows vs a model fitted on the other logs)")
    print(speed_table(runs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refit", action="store_true", help="fit the engine terms here instead of using the preset")
    ap.add_argument("--system", choices=tuple(SYSTEMS), action="append", help="default: both")
    args = ap.parse_args()
    if not MEASURED.is_dir():
        print(f"skipped: {MEASURED} is absent (the measured runs are not shipped)")
        return 0
    from simbatch.measured import read_measured
    from simbatch.measured.fit_engine import fit_engine
    from simbatch.scenario import load_scenario

    for system in args.system or SYSTEMS:
        name, pattern, in_fit = SYSTEMS[system]
        scenario = load_scenario(ROOT / "scenarios" / name)
        runs = sorted((read_measured(p) for p in MEASURED.glob(pattern)), key=lambda r: r.offered_rate)
        fit_runs = [r for r in runs if in_fit(r.offered_rate)]
        full = {k: v for k, v in scenario.engine.describe().items() if v is not None}
        if args.refit:
            t0 = time.perf_counter()
            fit = fit_engine(scenario, fit_runs)
            full.update(fit.terms)
            print(f"{system}: refitted in {time.perf_counter() - t0:.0f} s ({fit.evaluations} simulations): "
                  + ", ".join(f"{k} {v:.4g}" for k, v in fit.terms.items()))
        print(f"{system}: {scenario.data['model']} on {scenario.data['hardware']}, engine "
              + ", ".join(f"{k} {v}" for k, v in full.items()))
        fitted = {Path(r.source).name for r in fit_runs}
        print_speeds(system, scenario, runs)
        for stage in stage_stages(scenario):
            print_stage(system, stage, evaluate(scenario, runs, stage_engine(full, stage), stage), fitted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
