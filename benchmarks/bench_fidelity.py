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
After the stages, each system's KV capacity: the pool the scenario gives before
the engine memory model (the GPU's nominal memory, nothing held back) and with
it (the driver's memory and the engine's rule, simbatch.catalog.kv_budget), beside the
engine's own block count where the log's bench recorded it (vLLM 0.19's
meta.json) and the capacity the log implies where it saturates (the most
tokens held while requests waited, simbatch.measured.capacity). Then the knee:
the rate at which TTFT p90 first passes 2 s, found from the scenario alone by
a rate sweep (bisection on its own synthetic workload's rate), beside the
first shared log of that server whose TTFT p90 passes 2 s, where one does.

``--refit`` fits the terms again here (simbatch calibrate --from-log) instead of
taking the preset's. Not a test: it asserts nothing.

    python benchmarks/bench_fidelity.py [--refit] [--system NAME]... (vllm, distserve, distserve-c21d12, vllm-v1-70b, vllm-v1-scout, vllm-0.19) [--no-knee]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "measured"
MEASURED = SHARED / "distserve-opt13b-a100"
# system -> (scenario, logs under SHARED, which logs the preset's terms were fitted on)
SYSTEMS = {
    "vllm": ("vllm_opt13b_a100.yaml", "distserve-opt13b-a100/vllm-*.exp", lambda rate: rate <= 2.0),
    "distserve": ("distserve_opt13b_a100.yaml", "distserve-opt13b-a100/distserve-c21d11-*.exp",
                  lambda rate: rate <= 4.5),
    # prefill TP2 + decode TP1 x PP2: DistServe's round-robin micro-batches (docs/cost_models.md,
    # "Pipeline parallelism"); the distserve preset as fitted on c21d11, nothing refitted
    "distserve-c21d12": ("distserve_opt13b_a100_c21d12.yaml", "distserve-opt13b-a100/distserve-c21d12-*.exp",
                         lambda rate: False),
    # vLLM V1 0.8.5 (llm-d, 2025-05): no overhead terms fitted yet (the cost model's own apply).
    "vllm-v1-70b": ("vllm_llama70b_a100_tp2.yaml", "llmd-vllm-2025/exp-0-*/*.csv", lambda rate: False),
    "vllm-v1-scout": ("vllm_llama4scout_fp8_h100_tp4.yaml", "llmd-vllm-2025/exp-4-*/*.csv", lambda rate: False),
    "vllm-0.19": ("vllm019_llama8b_rtx4090.yaml", "llmservingsim-vllm0.19/*/*/vllm/requests.jsonl",
                  lambda rate: False),
}
NOMINAL = {"a100-80gb": 80, "h100-sxm": 80, "rtx-4090": 24}  # GiB as the presets had them before
KNEE_TTFT_P90_MS = 2000.0
STAGES = ("before", "+overhead", "+memory", "+front end", "+pull")
METRICS = (("ttft_p50", "TTFT p50"), ("ttft_p90", "TTFT p90"), ("tpot_p50", "TPOT p50"), ("tpot_p90", "TPOT p90"))
TOLERANCE, ATTAINMENT_TOLERANCE = 0.15, 0.08


def stage_engine(full: dict, stage: str) -> dict:
    """The engine section of one ablation stage, from the full (fitted) engine."""
    if stage == "before":
        return {"preset": "none"}
    engine = {"preset": "none", **{k: full[k] for k in ("step_s", "per_seq_s", "per_token_s") if k in full}}
    if stage in ("+memory", "+front end", "+pull"):
        engine.update({k: full[k] for k in MEMORY_FIELDS if k in full})
    if stage in ("+front end", "+pull"):
        engine["request_s"] = full.get("request_s", 0.0)
    return engine


MEMORY_FIELDS = ("profile_activations", "non_torch_gib", "graph_gib", "rope_cache", "reserve_fraction")


def stage_stages(scenario) -> tuple[str, ...]:
    """The stages that apply: ``+pull`` only where the scenario pulls its transfers."""
    pulls = scenario.is_disaggregated and scenario.disaggregation.transfer.mode == "pull"
    return STAGES if pulls else STAGES[:-1]


def evaluate(scenario, runs, engine: dict, stage: str) -> list[dict]:
    """Per log: measured and predicted metrics and attainment (validate --against's numbers)."""
    from simbatch.scenario.spec import from_dict
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

    if not applies_to(scenario) or len(runs) < 2:
        return
    print(f"\n{system}, the logs' own step speed (decode windows vs a model fitted on the other logs)")
    print(speed_table(runs))


def print_capacity(system: str, scenario, runs) -> None:
    """The scenario's KV pool before and with the engine memory model, beside the engine's own
    figure and what each log implies (module docstring)."""
    from simbatch.engine.setup import kv_budget_per_replica
    from simbatch.measured.capacity import engine_record, implied_capacity
    from simbatch.scenario.spec import from_dict

    gpu = scenario.data["hardware"]
    before = {**scenario.data, "engine": {"preset": "none"},
              "hardware": {"base": gpu, "memory_bytes": NOMINAL.get(gpu, 0) * 2**30} if gpu in NOMINAL else gpu}
    old = from_dict(before, scenario.source, scenario.base_dir)
    tokens = [kv_budget_per_replica(sc, sc.model, sc.gpu).tokens for sc in (old, scenario)]
    print(f"\n{system}, KV capacity (tokens per replica): before {tokens[0]:,}, with the memory model {tokens[1]:,}")
    print(f"{'log':<34}{'engine own':>12}{'held waiting':>14}{'before err':>12}{'after err':>11}")
    for r in runs:
        own, held = engine_record(r.source).get("engine_tokens"), implied_capacity(r).peak_while_waiting
        ref = own or held
        errs = [f"{t / ref - 1:+.1%}" if ref else "-" for t in tokens]
        name = Path(r.source).name if Path(r.source).name != "requests.jsonl" else "requests.jsonl (RTX 4090)"
        print(f"{name:<34}{own or '-':>12}{held or '-':>14}{errs[0]:>12}{errs[1]:>11}"
              + ("   (engine's own)" if own else "   (held while waiting: a floor)" if held else ""))


def knee_rate(scenario, lo: float, hi: float, steps: int = 10) -> float | None:
    """The rate (req/s) of the scenario's own synthetic workload at which TTFT p90 first passes
    KNEE_TTFT_P90_MS, by bisection on [lo, hi]; None when even ``hi`` stays under it."""
    import numpy as np

    from simbatch.runs.one import run
    from simbatch.scenario.overrides import apply_overrides
    from simbatch.scenario.spec import from_dict

    def p90(rate: float) -> float:
        data = apply_overrides(scenario.data, [f"workload.synthetic.arrival.rate={rate:.6g}"])
        sc = from_dict(data, scenario.source, scenario.base_dir)
        return float(np.nanpercentile(run(sc).requests["ttft_ms"], 90))

    if p90(hi) <= KNEE_TTFT_P90_MS:
        return None
    for _ in range(steps):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if p90(mid) <= KNEE_TTFT_P90_MS else (lo, mid)
    return hi


def print_knee(system: str, scenario, runs) -> None:
    """Predicted knee (rate sweep of the scenario) beside the measured one (first log past it)."""
    import numpy as np

    if scenario.is_disaggregated or "synthetic" not in scenario.data["workload"]:
        return
    rate = scenario.data["workload"]["synthetic"]["arrival"]["rate"]
    t0 = time.perf_counter()
    predicted = knee_rate(scenario, rate / 8, rate * 4)
    past = [r.offered_rate for r in runs if np.nanpercentile(r.requests()["ttft_ms"], 90) > KNEE_TTFT_P90_MS]
    shown = "beyond the sweep" if predicted is None else f"{predicted:.2f} req/s"
    measured = f"first log past it at {min(past):.2f} req/s" if past else \
        f"no shared log reaches it (highest {max(r.offered_rate for r in runs):.2f} req/s)"
    print(f"\n{system}, knee (TTFT p90 > {KNEE_TTFT_P90_MS / 1e3:g} s): predicted {shown} "
          f"({time.perf_counter() - t0:.0f} s sweep); measured: {measured}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refit", action="store_true", help="fit the engine terms here instead of using the preset")
    ap.add_argument("--system", choices=tuple(SYSTEMS), action="append", help="default: every system")
    ap.add_argument("--no-knee", action="store_true", help="skip the rate sweeps for the knee")
    args = ap.parse_args()
    if not MEASURED.is_dir():
        print(f"skipped: {MEASURED} is absent (the measured runs are not shipped)")
        return 0
    from simbatch.measured import read_measured
    from simbatch.measured.fit_engine import fit_engine
    from simbatch.scenario.spec import load_scenario

    for system in args.system or SYSTEMS:
        name, pattern, in_fit = SYSTEMS[system]
        scenario = load_scenario(ROOT / "scenarios" / name)
        runs = sorted((read_measured(p) for p in SHARED.glob(pattern)), key=lambda r: r.offered_rate)
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
        print_capacity(system, scenario, runs)
        if not args.no_knee:
            print_knee(system, scenario, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
