"""Benchmark the simulator against the real torch backend on CPU, on lengths from a real trace.

Draws ``--requests`` requests (seeded) from the Azure conversation trace in
``../shared/traces`` (skips cleanly where it is absent), divides their prompt
and output lengths by ``--length-divisor`` so that the ``tiny`` model on two
CPU cores runs all four policies in a few minutes, releases them as a Poisson
process, and runs ``simbatch validate`` on them: each policy executed for real
on CPU, and predicted by the profile cost model calibrated on this machine
with the same thread count (calibrated first when no such profile exists).
Prints the errors table with the noise floor beside the step errors, then
issue 16's targets per policy: median step APE at most 10 % and at most twice
the median noise APE; TTFT p50, E2EL p50 and throughput within 15 %; and with
``--repeats 2`` or more, each figure within 5 points between runs. Before it
all, ``--drift-s`` seconds (30) of one fixed decode step, timed in 2-s windows,
show how much this machine's own speed moves: a figure that moves more than
the targets' tolerances between windows cannot be told from the machine by
any cost model. The first line names this machine's CPU; the profile line says whether the profile was
found, calibrated here, or (with ``--profile``) measured elsewhere. Writes
the full outputs to ``--out``/run1, run2, ... (one per repeat).

This is a benchmark, not a test: it asserts nothing, and CPU timings move with
whatever else runs on the machine.

    python benchmarks/bench_validate.py [--requests 32] [--threads 1] [--out runs/bench_validate]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
POLICIES = ("static", "dynamic", "continuous", "chunked_prefill")


def trace_requests(n: int, divisor: int, rate: float, seed: int, max_total: int) -> list[dict]:
    """``n`` requests with (prompt, output) pairs drawn from the trace, scaled by ``1/divisor``."""
    from simbatch.workload.readers import read_trace

    w = read_trace(TRACE, None, None, "trace")
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(w), size=n, replace=False)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n)) - 1.0 / rate
    out = []
    for t, i in zip(arrivals, rows):
        output = max(2, int(w.output_tokens[i]) // divisor)
        prompt = max(2, min(int(w.prompt_tokens[i]) // divisor, max_total - output))
        out.append({"prompt": prompt, "output": output, "arrival_s": round(float(max(t, 0.0)), 4)})
    return out


def scenario_file(requests: list[dict], folder: Path) -> Path:
    """``scenarios/validate_cpu.yaml`` with its workload replaced by ``requests``."""
    data = yaml.safe_load((REPO / "scenarios" / "validate_cpu.yaml").read_text())
    data["name"] = "bench_validate"
    data["workload"] = {"requests": requests}
    path = folder / "bench_validate.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--length-divisor", type=int, default=4)
    p.add_argument("--rate", type=float, default=4.0, help="Poisson arrival rate, req/s")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadier on a shared machine)")
    p.add_argument("--profile", type=Path, default=None, help="profile folder (default: find or calibrate)")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--out", type=Path, default=REPO / "runs" / "bench_validate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1,
                   help="validate this many times in a row (same profile): how much is noise")
    p.add_argument("--drift-s", type=float, default=30.0,
                   help="seconds to time one fixed step first: how much this machine's speed moves (0: skip)")
    args = p.parse_args()
    if not TRACE.is_file():
        print(f"skipped: {TRACE} not found (the shared traces are not shipped)")
        return 0
    from simbatch import validate
    from simbatch.scenario.spec import load_scenario
    from simbatch.validation import format_table, write_validation

    args.out.mkdir(parents=True, exist_ok=True)
    reqs = trace_requests(args.requests, args.length_divisor, args.rate, args.seed, 2048)
    scenario = load_scenario(scenario_file(reqs, args.out))
    prompts, outputs = [r["prompt"] for r in reqs], [r["output"] for r in reqs]
    print(f"{len(reqs)} requests from {TRACE.name} (lengths / {args.length_divisor}): prompt median "
          f"{np.median(prompts):.0f} (max {max(prompts)}), output median {np.median(outputs):.0f} "
          f"(max {max(outputs)}), {args.rate} req/s; tiny model, CPU, {args.threads} thread(s)")
    start = time.perf_counter()
    if args.drift_s > 0:
        print(drift_line(args.drift_s, args.threads))
    profile = args.profile
    runs = []
    for r in range(args.repeats):
        result = validate(scenario, "cpu", args.policies.split(","), profile=profile, threads=args.threads)
        runs.append(result)
        print(f"machine: {result.backend['source'].removeprefix('measured:')}")
        print(f"profile: {result.profile_path} ({how_chosen(result)})")
        print(format_table(result))
        for kind, v in result.policies.items():
            o, load = v.errors["overhead_median_ms"], v.errors["load_average_1min"]
            print(f"{kind}: measured run {v.wall_s:.1f} s; median step overhead {o['measured']:.3f} ms measured, "
                  f"{o['predicted']:.3f} ms predicted; load average {load['before']} -> {load['after']}; "
                  f"{speed_text(v.errors['machine_speed'])}")
        out = args.out / f"run{r + 1}"  # beside the scenario file written above, never into its folder
        write_validation(out, result)
        profile = out / "profile" if result.profile_fresh else result.profile_path
    print_targets(runs)
    print(f"total {time.perf_counter() - start:.0f} s; wrote {args.out}/run*/validation.json")
    return 0


def drift_line(seconds: float, threads: int) -> str:
    """One fixed decode step of the tiny model timed for ``seconds`` (2-s windows): how much this
    machine's own speed moves, which no cost model can follow and no target can be told from."""
    from simbatch.backends.torch_backend import TorchBackend
    from simbatch.catalog.models import get_model
    from simbatch.calibrate.probe import speed_drift

    backend = TorchBackend(get_model("tiny", "model"), num_blocks=64, block_size=16, device="cpu",
                           dtype="float32", seed=0, threads=threads)
    backend.warmup()
    m = speed_drift(backend, seconds=seconds) * 1e3
    p10, p50, p90 = np.quantile(m, [0.1, 0.5, 0.9])
    return (f"machine drift: one fixed decode step over {seconds:.0f} s, median per 2-s window: p10 {p10:.2f} ms, "
            f"p50 {p50:.2f} ms, p90 {p90:.2f} ms (p90/p10 {p90 / p10:.2f}; min {m.min():.2f}, max {m.max():.2f})")


def speed_text(speed: dict) -> str:
    """The machine-speed probe before and after a policy's run, against the profile's."""
    ms = lambda x: "-" if x is None else f"{x:.2f} ms"  # noqa: E731
    ratio = lambda x: "" if x is None else f" ({x:.2f}x calibration)"  # noqa: E731
    return (f"probe {ms(speed['probe_ms_before'])}{ratio(speed['before_over_calibration'])} before, "
            f"{ms(speed['probe_ms_after'])}{ratio(speed['after_over_calibration'])} after "
            f"(calibration {ms(speed['probe_ms_calibration'])})")


def how_chosen(result) -> str:
    """Found, calibrated here (and how long), or given and measured elsewhere."""
    m = result.profile.as_json()
    if result.profile_fresh:
        return f"calibrated here in {m['calibrate_s']:.0f} s; {len(m['rejected'])} found profile(s) from elsewhere"
    return "this machine's" if m["matches"] else "measured elsewhere: " + "; ".join(m["differences"])


# (label, path in a policy's errors, limit, signed)
TARGETS = (("step APE p50", ("step_ape", "median"), 0.10, False),
           ("APE/noise", ("step_ape_over_noise",), 2.0, False),
           ("TTFT p50", ("ttft_p50_err",), 0.15, True),
           ("E2EL p50", ("e2el_p50_err",), 0.15, True),
           ("throughput", ("throughput_err",), 0.15, True))


def _value(errors: dict, path):
    for key in path:
        errors = errors.get(key) if isinstance(errors, dict) else None
    return errors


def print_targets(runs) -> None:
    """Each policy against issue 16's targets, run by run, and the spread between runs."""
    print("\ntargets (issue 16): each figure, then 'ok' or 'MISS'")
    for kind in runs[0].policies:
        cells = []
        for label, path, limit, signed in TARGETS:
            values = [_value(r.policies[kind].errors, path) for r in runs]
            shown = "/".join("-" if v is None else (f"{v:.1f}x" if label == "APE/noise" else f"{v * 100:+.1f}%"
                                                    if signed else f"{v * 100:.1f}%") for v in values)
            ok = all(v is not None and abs(v) <= limit for v in values)
            spread = ""
            if len(values) > 1 and label != "APE/noise" and None not in values:
                gap = (max(values) - min(values)) * 100
                spread = f" (runs {gap:.1f} pts apart: {'ok' if gap <= 5 else 'MISS'})"
            cells.append(f"{label} {shown} {'ok' if ok else 'MISS'}{spread}")
        print(f"  {kind}: " + "; ".join(cells))


if __name__ == "__main__":
    sys.exit(main())
