"""Where one run's time and memory go, phase by phase, in one process (issue 18, issue 15 item 4).

Runs the pieces of ``simbatch run SCENARIO --out DIR`` one after another in this
process: imports and the scenario, building the workload, simulating, the request
and step columns, ``summarize``, the per-replica summaries, then writing the
run folder in each ``--formats`` table format. For each phase it prints the wall
time, its CPU time (steadier than wall time on a shared machine), and the phase's peak RSS (``VmHWM``, reset before each phase through
``/proc/self/clear_refs``, Linux only; elsewhere the process's peak so far).

``--tracemalloc`` also traces the metric phases' Python allocations (not the
simulation's: tracing would slow it tenfold) and prints each one's traced peak
and the largest allocation sites at that peak.

    python benchmarks/bench_phases.py                                  # (c): speed_c, a million requests
    python benchmarks/bench_phases.py --set workload.synthetic.num_requests=100000 --tracemalloc
    python benchmarks/bench_phases.py --scenario scenarios/azure_conv.yaml --formats csv

A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import inspect
import os
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

T0 = time.perf_counter()
HERE = Path(__file__).resolve().parent
DEFAULT = HERE / "scenarios" / "speed_c.yaml"


def reset_peak() -> bool:
    """Reset this process's peak RSS (``VmHWM``); False where the kernel does not offer it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def status_mib(field: str) -> float | None:
    """``field`` (``VmHWM``, ``VmRSS``) of ``/proc/self/status`` in MiB; None where unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_mib() -> float:
    """Peak RSS since the last :func:`reset_peak` (``VmHWM``), else since the process started."""
    peak = status_mib("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mib() -> float:
    """Resident memory now (``VmRSS``; 0 where unknown)."""
    return status_mib("VmRSS") or 0.0


class Phases:
    """Times and peak RSS of consecutive phases, printed as they end."""

    def __init__(self, trace: bool):
        self.trace = trace
        self.peak = peak_mib()  # the largest phase peak: resetting VmHWM resets ru_maxrss too
        print(f"{'phase':34}{'time s':>8}{'cpu s':>8}{'peak MiB':>10}{'held MiB':>10}{'traced MiB':>12}  note",
              flush=True)

    def run(self, name: str, fn, note=lambda result: "", trace: bool = True):
        """Call ``fn()`` as phase ``name``; returns its result."""
        reset_peak()
        tracing = self.trace and trace
        if tracing:
            tracemalloc.start(8)
        t, cpu = time.perf_counter(), time.process_time()
        result = fn()
        dt, cpu = time.perf_counter() - t, time.process_time() - cpu
        traced = ""
        top = []
        if tracing:
            snap = tracemalloc.take_snapshot()
            traced = f"{tracemalloc.get_traced_memory()[1] / 2**20:.0f}"
            tracemalloc.stop()
            top = snap.statistics("lineno")[:4]
        self.peak = max(self.peak, peak_mib())
        print(f"{name:34}{dt:8.2f}{cpu:8.2f}{peak_mib():10.0f}{rss_mib():10.0f}{traced:>12}  {note(result)}",
              flush=True)
        for stat in top:  # what is still held at the end of the phase, by line
            print(f"{'':36}held {stat.size / 2**20:7.1f} MiB  {stat.traceback[0]}")
        return result


def main(argv: list[str] | None = None) -> None:
    """Run and print the phases of one scenario."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default=str(DEFAULT),
                    help="scenario file (default: benchmarks/scenarios/speed_c.yaml)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field (repeatable)")
    ap.add_argument("--formats", default="parquet,csv", help="table formats to write, in order (default parquet,csv)")
    ap.add_argument("--tracemalloc", action="store_true", help="trace the metric phases' allocations")
    ap.add_argument("--keep", metavar="DIR", help="write the run folders under DIR (default: a temporary folder)")
    args = ap.parse_args(argv)

    from simbatch.engine.simulation import run_cluster
    from simbatch.metrics import replica_summaries, request_columns, step_columns, summarize
    from simbatch.metrics.requests import token_runs
    from simbatch.runs.one import RunOutput, describe_run
    from simbatch.scenario.spec import load_scenario

    scenario = load_scenario(args.scenario, args.set)
    print(f"{Path(args.scenario).name} {' '.join(args.set)}; python {sys.version.split()[0]}, pid {os.getpid()}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")
    ph = Phases(args.tracemalloc)
    print(f"{'imports + scenario':34}{time.perf_counter() - T0:8.2f}{time.process_time():8.2f}{peak_mib():10.0f}"
          f"{rss_mib():10.0f}", flush=True)
    workload = ph.run("build workload", scenario.build_workload, lambda w: f"{len(w)} requests", trace=False)
    result = ph.run("simulate", lambda: run_cluster(scenario, workload=workload)[0],
                    lambda r: f"{len(r.log.steps['start_s'])} steps, {len(r.log.run_request)} token runs", trace=False)
    log = result.log
    gpus = scenario.cluster.tensor_parallel * scenario.cluster.pipeline_parallel
    steps = ph.run("step columns", lambda: step_columns(log))
    if "runs" in inspect.signature(request_columns).parameters:  # as runs.run does
        extra = {"runs": ph.run("token runs", lambda: token_runs(log, steps))}
    else:  # an earlier simbatch (before/after comparisons): each function placed the runs itself
        extra = {}
    requests = ph.run("request columns", lambda: request_columns(log, workload, **extra))

    def summary_phase():
        return summarize(log, workload, slo=scenario.slo.as_dict() or None, peak_flops=result.peak_flops,
                         peak_bandwidth=result.peak_bandwidth, gpus_per_replica=gpus, requests=requests,
                         steps=steps, **extra)

    summary = ph.run("summarize", summary_phase)
    extra.clear()  # the token runs go, as in runs.run

    def rest():
        summary.update(describe_run(result))
        summary["replicas"] = replica_summaries(requests, steps, summary["duration_s"], result.replica_info(),
                                                result.peak_flops, result.peak_bandwidth)

    ph.run("describe + replica summaries", rest)
    out = RunOutput(result, summary, requests, steps)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_phases-"))
    try:
        for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
            folder = root / fmt

            def sizes(paths):
                return ", ".join(f"{p.name} {p.stat().st_size / 1e6:.0f} MB" for p in paths if p.suffix in
                                 (".csv", ".parquet"))

            ph.run(f"write {fmt}", lambda: out.write(folder, fmt), sizes, trace=False)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'total':34}{time.perf_counter() - T0:8.2f}{time.process_time():8.2f}{ph.peak:10.0f}"
          "  (peak: the largest phase's)")


if __name__ == "__main__":
    main()
