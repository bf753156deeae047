"""MLPerf Inference v4.1 llama2-70b (NVIDIA, TensorRT-LLM, FP8) beside simbatch (issue 17's check).

Published figures are NVIDIA's closed-division v4.1 results (mlperf_log_summary.txt of each
run, github.com/mlcommons/inference_results_v4.1 at commit
198fc46799b3328b36ee4bcbdebfa2db5a8e6183, closed/NVIDIA/results/<system>/llama2-70b-99/);
simulated ones come from scenarios/fp8_70b_h100.yaml (its comments give the source of every
setting) and variants of it built here with load_scenario overrides:

  (a) Offline, 8x H100-SXM (4 x TP2, gpu_batch_size 896): output tokens/s
  (b) Server at 75 QPS, 8x H100-SXM (4 x TP2, gpu_batch_size 1,024): TTFT p99 and TPOT p99
  (c) Offline, 8x H200 (8 x TP1, gpu_batch_size 806): output tokens/s
  extra: Server at 101 QPS on 8x H200 (8 x TP1, gpu_batch_size 896), and how much the
         Offline H100 figure moves under other output-length shapes (the generated lengths
         are the scenario's one assumption; see its comments)

What the figures mean (MLPerf LoadGen, github.com/mlcommons/inference, loadgen/results.cc and
loadgen/logging.cc):

* Offline: every sample is issued at t = 0 in one query; "Tokens per second" = the tokens the
  system generated (the count it reports with each completed sample: output tokens only, the
  prompt is not counted) / the time until the last sample completed. Here: a burst of
  requests at t = 0 and simbatch's output_throughput (output tokens of completed requests /
  duration to the last finish), the same quantity. LoadGen completes whole permutations of the
  24,576-sample set (sample_concatenate_permutation = 1 in mlperf.conf): the published
  samples/s x the longest latency gives 221,184 = 9 x 24,576 samples on H100 and
  294,912 = 12 x 24,576 on H200, so that many are simulated (the drain at the end weighs the
  same share of the run as in the real one).
* Server: Poisson arrivals at target_qps; TTFT = first token - issue; TPOT per sample =
  (latency - TTFT) / (tokens - 1), the same as simbatch's (and vLLM's) TPOT; p99 over samples,
  taken as LoadGen does (the sorted array at index int(n x 0.99)). Constraints: TTFT p99 <= 2 s,
  TPOT p99 <= 200 ms.

Not a test: it prints and asserts nothing. About 100 s on 2 cores (--quick: about 30 s).

    python benchmarks/bench_mlperf.py [--quick] [--no-sensitivity] [--jobs N] [--before]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "fp8_70b_h100.yaml"
DATASET_SAMPLES = 24576
RESULTS = ("github.com/mlcommons/inference_results_v4.1 @198fc467, closed/NVIDIA/results/"
           "{DGX-H100_H100-SXM-80GBx8_TRT, H200-SXM-141GBx8_TRT}/llama2-70b-99/*/performance/run_1/")

# NVIDIA's published figures, copied from the mlperf_log_summary.txt files named in RESULTS
# (performance/run_1 of each system and scenario) and, for tokens per sample, from the
# Offline accuracy run's accuracy.txt (gen_tok_len 7,134,577 over gen_num 24,576 samples).
PUBLISHED = {
    "h100_offline": {"tok_s": 24524.9, "samples_s": 84.4792, "max_latency_s": 2618.205915130},
    "h100_server": {"qps": 75, "tok_s": 21605.79, "samples_s": 74.42, "mean_latency_s": 44.954547225,
                    "ttft_p50": 272.954995, "ttft_p99": 461.278089, "tpot_p50": 156.419276,
                    "tpot_p99": 175.354317},
    "h200_offline": {"tok_s": 31302.7, "samples_s": 107.477, "max_latency_s": 2743.947981334},
    "h200_server": {"qps": 101, "tok_s": 29228.22, "samples_s": 100.35, "mean_latency_s": 35.854894885,
                    "ttft_p50": 180.758928, "ttft_p99": 452.744202, "tpot_p50": 124.285539,
                    "tpot_p99": 146.040006},
    "tokens_per_sample": 7134577 / DATASET_SAMPLES,  # 290.3
}

# Instances and batch sizes NVIDIA ran (closed/NVIDIA/configs/llama2-70b/{Offline,Server}/__init__.py:
# H100_SXM_80GB_TP2x4 and H200_SXM_141GBx8).
H200 = ["hardware=h200", "cluster.replicas=8", "cluster.tensor_parallel=1"]
RUNS = {
    "h100_offline": dict(instances=4, batch=896, extra=[], passes=9),
    "h100_server": dict(instances=4, batch=1024, extra=[], qps=75),
    "h200_offline": dict(instances=8, batch=806, extra=H200, passes=12),
    "h200_server": dict(instances=8, batch=896, extra=H200, qps=101),
}
# Output-length shapes for the sensitivity rows (Offline, 8x H100): the scenario's
# (reference answers scaled to the published 290.3 mean), one constant length with that mean,
# and the dataset's own GPT-4 reference lengths unscaled (mean 218.9), i.e. what one gets
# by replaying the dataset's stored outputs instead of what Llama-2 generates.
OUTPUT_SCALE = 1.326  # 290.3 / 218.9, as in the scenario's comments


def overrides(name: str, samples: int | None = None, output: dict | None = None) -> list[str]:
    """``--set`` overrides that turn the shipped scenario into run ``name``."""
    spec = RUNS[name]
    sets = [f"policy.max_num_seqs={spec['batch']}", *spec["extra"]]
    if "qps" in spec:
        sets.append(f"workload.synthetic.arrival.rate={spec['qps']}")
    else:  # Offline: every sample queued at t = 0
        sets += ["workload.synthetic.arrival={kind: burst}", f"workload.synthetic.num_requests={samples}"]
    if output is not None:
        sets.append("workload.synthetic.output=" + "{" + ", ".join(f"{k}: {v}" for k, v in output.items()) + "}")
    return sets


def loadgen_percentile(values: np.ndarray, p: float) -> float:
    """LoadGen's percentile: the ascending array at index int(n x p) (results.cc)."""
    v = np.sort(values[~np.isnan(values)])
    return float(v[min(len(v) - 1, int(len(v) * p))]) if len(v) else math.nan


def simulate(sets: list[str], before: bool = False) -> dict:
    """Run the scenario with ``sets`` and return the figures the tables need; ``before``: with
    the roofline's FP8 kept-time term off (``quantized_kept_seconds`` = 0, the linear layers
    priced as the whole 16-bit term divided by the FP8 rate, as before that mechanism)."""
    from simbatch.api import load_scenario, run
    from simbatch.costmodel import roofline

    t0 = time.perf_counter()
    sc = load_scenario(SCENARIO, sets)
    kept = roofline.quantized_kept_seconds
    if before:  # this process only, restored below (pool workers run other jobs after)
        roofline.quantized_kept_seconds = lambda *args: 0.0
    try:
        out = run(sc)
    finally:
        roofline.quantized_kept_seconds = kept
    s, req, steps = out.summary, out.requests, out.steps
    done = req[req["completed"]]
    ttft, tpot = done["ttft_ms"].to_numpy(float), done["tpot_ms"].to_numpy(float)
    # Steps of a full batch (the Offline steady state): what one typically computes.
    full = steps[steps["num_seqs"] >= 0.98 * steps["num_seqs"].max()]
    # Server: completions per second in the steady state (from 10 % of the arrivals' span to the
    # last arrival), as LoadGen's "Completed ... per second" over a run 10x longer than this one
    # (the drain after the last arrival would otherwise weigh ~10 % here, ~1 % there).
    last = float(req["arrival_s"].max())
    window = done[(done["finish_s"] >= 0.1 * last) & (done["finish_s"] <= last)]
    span = 0.9 * last
    return {
        "completed": int(s["completed"]), "num_requests": int(s["num_requests"]),
        "tok_s": s["output_throughput"], "samples_s": s["request_throughput"], "duration_s": s["duration_s"],
        "steady_tok_s": float(window["num_output_tokens"].sum()) / span if span > 0 else math.nan,
        "steady_samples_s": len(window) / span if span > 0 else math.nan,
        "tokens_per_sample": float(done["num_output_tokens"].mean()),
        "mean_prompt": float(req["prompt_tokens"].mean()),
        "ttft_p50": loadgen_percentile(ttft, 0.5), "ttft_p99": loadgen_percentile(ttft, 0.99),
        "tpot_p50": loadgen_percentile(tpot, 0.5), "tpot_p99": loadgen_percentile(tpot, 0.99),
        "mean_latency_s": float(done["e2el_ms"].mean()) / 1e3,
        "kv_peak": s["kv_peak_frac"], "preemptions": int(s["preemptions"]),
        "full_step": {"seqs": float(full["num_seqs"].mean()), "decodes": float(full["decode_tokens"].mean()),
                      "prefill": float(full["prefill_tokens"].mean()),
                      "kv_tokens": float((full["kv_used_blocks"] * sc.kv_cache.block_size).mean()),
                      "ms": float(full["duration_s"].mean()) * 1e3},
        "wall_s": time.perf_counter() - t0,
    }


def err(pub: float, sim: float) -> str:
    return f"{(sim / pub - 1) * 100:+.1f}%"


def fmt(x: float) -> str:
    if x != x:  # NaN
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:.2f}"


def table(rows: list[tuple], before: list[float] | None = None) -> None:
    """Published, simulated and error per row; with ``before``, also each row's simulated
    figure and error without the FP8 kept-time term (``simulate(before=True)``)."""
    extra = f"{'before':>11}{'error':>9}" if before else ""
    print(f"{'':<66}{'published':>11}{extra}{'simulated':>11}{'error':>9}")
    for i, (label, pub, sim) in enumerate(rows):
        old = f"{fmt(before[i]):>11}{err(pub, before[i]):>9}" if before else ""
        print(f"{label:<66}{fmt(pub):>11}{old}{fmt(sim):>11}{err(pub, sim):>9}")


def step_breakdown(sets: list[str], step: dict, tp: int) -> str:
    """The roofline's split of a typical full-batch Offline step (``step``), for the analysis."""
    from simbatch.api import load_scenario
    from simbatch.costmodel.model_terms import quantized_kept_seconds
    from simbatch.costmodel.roofline import RooflineCostModel
    from simbatch.core.plan import StepPlan

    sc = load_scenario(SCENARIO, sets)
    cm = RooflineCostModel(sc.model, sc.gpu, tp, **{k: v for k, v in sc.data["cost_model"].items() if k != "kind"})
    decodes = int(round(step["decodes"]))
    prompts = int(round(step["seqs"] - step["decodes"]))  # requests whose whole prompt runs in the step
    prompt = int(round(step["prefill"] / prompts)) if prompts else 0
    ctx = int(round(step["kv_tokens"] / max(1.0, step["seqs"])))
    plan = StepPlan(request_ids=list(range(decodes + prompts)), num_new_tokens=[1] * decodes + [prompt] * prompts,
                    num_context_tokens=[ctx] * decodes + [0] * prompts, num_decode_slots=decodes)
    cost = cm.step_cost(plan)
    parts = ", ".join(f"{k} {v / cost.seconds * 100:.0f}%" for k, v in cost.breakdown.items() if v > 0)
    kept = (decodes + prompts * prompt) * quantized_kept_seconds(sc.model, sc.gpu, tp, cm.params)
    return (f"{decodes} decodes over ~{ctx} tokens of context + {prompts} prompts of ~{prompt} tokens: "
            f"{cost.seconds * 1e3:.0f} ms ({parts}; linear includes {kept * 1e3:.1f} ms of GEMM output "
            f"writes and elementwise kernels that FP8 does not speed up)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Offline runs over one pass of the dataset (24,576 "
                                                          "samples) instead of the published 9 / 12 passes")
    ap.add_argument("--no-sensitivity", action="store_true", help="skip the output-length sensitivity rows")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes (default 2)")
    ap.add_argument("--before", action="store_true",
                    help="also run (a)-(c) without the roofline's FP8 kept-time term (docs/cost_models.md, "
                         "'Quantised weights') and print both errors")
    args = ap.parse_args()

    from simbatch.api import load_scenario

    base = load_scenario(SCENARIO)
    ref_values = [max(1, round(v / OUTPUT_SCALE)) for v in base.data["workload"]["synthetic"]["output"]["values"]]
    passes = {k: (1 if args.quick else v["passes"]) for k, v in RUNS.items() if "passes" in v}
    jobs = {
        "h100_offline": overrides("h100_offline", passes["h100_offline"] * DATASET_SAMPLES),
        "h100_server": overrides("h100_server"),
        "h200_offline": overrides("h200_offline", passes["h200_offline"] * DATASET_SAMPLES),
        "h200_server": overrides("h200_server"),
    }
    sens_samples = 2 * DATASET_SAMPLES
    if not args.no_sensitivity:
        jobs["sens_scenario"] = overrides("h100_offline", sens_samples)
        jobs["sens_constant"] = overrides("h100_offline", sens_samples, {"kind": "constant", "value": 290})
        jobs["sens_reference"] = overrides("h100_offline", sens_samples, {"kind": "empirical", "values": ref_values})

    t0 = time.perf_counter()
    order = ["h200_offline", "h100_offline", *[k for k in jobs if "offline" not in k]]  # longest first
    headline = ["h200_offline", "h100_offline", "h100_server"]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {k: pool.submit(simulate, jobs[k]) for k in order}
        if args.before:
            futures.update({"before_" + k: pool.submit(simulate, jobs[k], True) for k in headline})
        sim = {k: f.result() for k, f in futures.items()}
    wall = time.perf_counter() - t0

    P = PUBLISHED
    print("MLPerf Inference v4.1 closed, llama2-70b-99: NVIDIA (TensorRT-LLM, FP8 weights + FP8 KV) vs simbatch")
    print(f"published: {RESULTS}")
    print(f"simulated: {SCENARIO.relative_to(ROOT)} (roofline cost model, defaults) and the overrides below; "
          f"{wall:.0f} s wall, {args.jobs} process(es)")
    off = {k: sim[k]["completed"] for k in ("h100_offline", "h200_offline")}
    pub = {k: P[k]["samples_s"] * P[k]["max_latency_s"] for k in off}
    print(f"Offline samples simulated: H100 {off['h100_offline']:,}, H200 {off['h200_offline']:,} (the published "
          f"runs completed ~{pub['h100_offline']:,.0f} and ~{pub['h200_offline']:,.0f}: samples/s x max latency)\n")

    heads = [("(a) Offline, 8x H100-SXM, output tokens/s", "h100_offline", "tok_s"),
             ("(b) Server 75 QPS, 8x H100-SXM, TTFT p99 ms", "h100_server", "ttft_p99"),
             ("    Server 75 QPS, 8x H100-SXM, TPOT p99 ms", "h100_server", "tpot_p99"),
             ("(c) Offline, 8x H200, output tokens/s", "h200_offline", "tok_s")]
    if args.before:
        print("before: without the FP8 kept-time term (the GEMMs' output writes and the elementwise kernels\n"
              "        divided by the FP8 rate too); simulated: as shipped\n")
    table([(label, P[key][field], sim[key][field]) for label, key, field in heads],
          [sim["before_" + key][field] for _, key, field in heads] if args.before else None)

    print("\nsupporting figures")
    rows = [
        ("output tokens per sample (accuracy run / simulated)", P["tokens_per_sample"],
         sim["h100_offline"]["tokens_per_sample"]),
        ("Offline 8x H100: samples/s", P["h100_offline"]["samples_s"], sim["h100_offline"]["samples_s"]),
        ("Offline 8x H200: samples/s", P["h200_offline"]["samples_s"], sim["h200_offline"]["samples_s"]),
    ]
    for key, label in (("h100_server", "Server 75 QPS 8x H100"), ("h200_server", "extra: Server 101 QPS 8x H200")):
        p, s = P[key], sim[key]
        inst = RUNS[key]["instances"]
        rows += [
            (f"{label}: completed tokens/s (steady state)", p["tok_s"], s["steady_tok_s"]),
            (f"{label}: TTFT p50 ms", p["ttft_p50"], s["ttft_p50"]),
            (f"{label}: TPOT p50 ms", p["tpot_p50"], s["tpot_p50"]),
        ]
        if key == "h200_server":
            rows += [(f"{label}: TTFT p99 ms", p["ttft_p99"], s["ttft_p99"]),
                     (f"{label}: TPOT p99 ms", p["tpot_p99"], s["tpot_p99"])]
        # Little's law: requests in flight per instance = completed/s x mean latency / instances
        rows.append((f"{label}: requests in flight per instance", p["samples_s"] * p["mean_latency_s"] / inst,
                     s["steady_samples_s"] * s["mean_latency_s"] / inst))
    table(rows)

    print("\nsimulated runs")
    for key, sets in jobs.items():
        s = sim[key]
        print(f"  {key:<15} {s['completed']:>7,} of {s['num_requests']:>7,} done, KV peak {s['kv_peak'] * 100:4.1f} %, "
              f"{s['preemptions']} preemptions, {s['wall_s']:5.1f} s  --set " + " --set ".join(
                  x if len(x) < 60 else x[:57] + "..." for x in sets))
    for key, tp in (("h100_offline", 2), ("h200_offline", 1)):
        s = sim[key]
        pub_tok_per_instance = P[key]["tok_s"] / RUNS[key]["instances"]
        emitted = s["full_step"]["seqs"]  # each running request emits one token per step
        print(f"  {key} full-batch step, simulated {s['full_step']['ms']:.0f} ms mean; the published "
              f"tokens/s implies ~{emitted / pub_tok_per_instance * 1e3:.0f} ms for the ~{emitted:.0f} tokens "
              f"such a step emits;\n    roofline split of a typical one: "
              f"{step_breakdown(jobs[key], s['full_step'], tp)}")

    if not args.no_sensitivity:
        print(f"\nsensitivity: Offline 8x H100 with other output lengths ({sens_samples:,} samples each)")
        base_tok = sim["sens_scenario"]["tok_s"]
        for key, label in (("sens_scenario", "scenario: reference shape x 1.326 (mean 289.5)"),
                           ("sens_constant", "every output 290 tokens"),
                           ("sens_reference", "GPT-4 reference lengths unscaled (mean 218.9)")):
            s = sim[key]
            print(f"  {label:<50} {s['tok_s']:>8,.0f} tok/s {s['samples_s']:>7.1f} samples/s  "
                  f"{err(base_tok, s['tok_s']):>7} vs scenario, {err(P['h100_offline']['tok_s'], s['tok_s']):>7} "
                  f"vs published")
    return 0


if __name__ == "__main__":
    sys.exit(main())
