"""Benchmark the simulator core: wall time, throughput and peak memory per policy.

For each scenario and policy, runs ``simbatch.api.run`` ``--repeat`` times, each
in a fresh ``spawn`` subprocess (so peak RSS belongs to that run alone, and no
run warms caches for the next), and prints the median wall time, simulated
requests and engine steps per wall second, and peak RSS. Then times
``RooflineCostModel.step_cost``, which runs once per simulated step.

This is a benchmark, not a test: it asserts nothing. Compare numbers only
between runs on the same machine.

    python benchmarks/bench_core.py [--repeat N] [--scenario PATH ...] [--policies a,b]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from simbatch.errors import SimbatchError

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = [REPO / "scenarios" / "azure_conv.yaml", REPO / "scenarios" / "chat.yaml"]
POLICIES = ("static", "dynamic", "continuous", "chunked_prefill")


def use_tree(tree: str | None) -> None:
    """Import simbatch from the checkout ``tree`` in this (fresh) process instead of the one
    installed (``bench_speed.py --against``); None: leave it."""
    if tree is None:
        return
    for name in [m for m in sys.modules if m == "simbatch" or m.startswith("simbatch.")]:
        del sys.modules[name]  # this module imported simbatch.errors from the installed copy
    sys.path.insert(0, tree)


def one_run(path: str, kind: str, tree: str | None = None) -> dict:
    """Run ``path`` under policy ``kind`` in this process; wall time, counts and RSS (MiB).
    ``kind+streams2`` runs that policy with ``streams: 2``; ``tree``: a checkout to import
    simbatch from (:func:`use_tree`). ``sim`` is the time in the simulation proper (SimPy's
    ``Environment.run``: no workload building, no metrics)."""
    use_tree(tree)
    import simpy

    from simbatch.api import run
    from simbatch.errors import SimbatchError
    try:
        from simbatch.scenario.spec import from_dict, load_scenario
    except ImportError:  # a checkout from before the layout of issue 34 (--against an older tree)
        from simbatch.scenario import from_dict, load_scenario

    kind, _, variant = kind.partition("+")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    sim, simpy_run = [], simpy.Environment.run

    def timed_run(env, *args, **kwargs):  # this process's one simulation, timed
        t = time.perf_counter()
        try:
            return simpy_run(env, *args, **kwargs)
        finally:
            sim.append(time.perf_counter() - t)

    simpy.Environment.run = timed_run
    start = time.perf_counter()
    try:
        scenario = load_scenario(path).with_policy(kind)
        if variant == "streams2":
            data = {**scenario.data, "policy": {**scenario.data["policy"], "streams": 2}}
            scenario = from_dict(data, scenario.source, scenario.base_dir)
        out = run(scenario)
    except SimbatchError as exc:  # passed back as text: SimbatchError does not unpickle
        return {"error": str(exc)}
    wall = time.perf_counter() - start
    return {"wall": wall, "sim": sum(sim), "requests": len(out.result.workload),
            "steps": sum(out.result.log.replica_num_steps), "base_mib": base,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def bench_policy(path: Path, kind: str, repeat: int, tree: str | None = None) -> dict:
    """Median wall time over ``repeat`` runs, each in a fresh spawned process (``tree``: a
    checkout to import simbatch from)."""
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx, max_tasks_per_child=1) as pool:
        runs = [pool.submit(one_run, str(path), kind, tree).result() for _ in range(repeat)]
    if "error" in runs[0]:
        raise SimbatchError("", runs[0]["error"])
    wall = statistics.median(r["wall"] for r in runs)
    return {"wall": wall, "sim": statistics.median(r["sim"] for r in runs),
            "req_per_s": runs[0]["requests"] / wall, "steps": runs[0]["steps"],
            "steps_per_s": runs[0]["steps"] / wall, "base_mib": max(r["base_mib"] for r in runs),
            "peak_mib": max(r["peak_mib"] for r in runs)}


def console_command() -> list[str]:
    """``simbatch`` as a user starts it: the console script installed beside this Python (not a
    version manager's shim on PATH, which adds its own start-up), else ``python -m simbatch``."""
    script = Path(sys.executable).parent / "simbatch"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "simbatch"]


def policy_overrides(path: Path, kind: str) -> list[str]:
    """``--set`` options that make ``simbatch run`` run what ``Scenario.with_policy(kind)`` runs
    (``kind+streams2``: with ``streams: 2``)."""
    from simbatch.scenario.spec import read_yaml

    kind, _, variant = kind.partition("+")
    data = read_yaml(path)
    params = (data.get("policies") or {}).get(kind)
    if params is None:
        params = data["policy"] if data["policy"].get("kind") == kind else {}
    params = {**params, **({"streams": 2} if variant == "streams2" else {})}
    return ["--set", f"policy.kind={kind}"] + [a for k, v in params.items() if k != "kind"
                                               for a in ("--set", f"policy.{k}={v}")]


def command_run(path: Path, kind: str, options: tuple[str, ...] = (), tree: str | None = None) -> dict:
    """One whole ``simbatch run PATH --out DIR [options]`` under policy ``kind`` in a fresh process:
    wall seconds from start to exit, the process's peak RSS (MiB), and how the tables were
    written (``tables``: the request table's file suffix, ``csv`` or ``parquet``). ``tree``: a
    checkout to run instead of the installed simbatch (``python -m simbatch`` from there)."""
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        argv = (console_command() if tree is None else [sys.executable, "-m", "simbatch"]) \
            + ["run", str(path), "--out", str(Path(tmp) / "out"), *options] + policy_overrides(path, kind)
        env = None if tree is None else {**os.environ, "PYTHONPATH": tree}
        with open(Path(tmp) / "stderr", "w+b") as errors:
            start = time.perf_counter()
            child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errors, env=env)
            _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, not all children's
            wall = time.perf_counter() - start
            child.returncode = os.waitstatus_to_exitcode(status)
            errors.seek(0)
            err = errors.read().decode(errors="replace").strip().splitlines()
        tables = next((f.suffix[1:] for f in (Path(tmp) / "out").glob("requests.*")), "-")
    if child.returncode != 0:
        return {"error": err[-1] if err else f"simbatch run exited {child.returncode}"}
    return {"wall": wall, "peak_mib": usage.ru_maxrss / 1024, "tables": tables}


def bench_command(path: Path, kind: str, repeat: int, options: tuple[str, ...] = (),
                  tree: str | None = None) -> dict:
    """Median wall time and largest peak RSS of ``repeat`` whole ``simbatch run`` commands
    (``options``: more of its options, e.g. ``("--format", "csv")``; ``tree``: see
    :func:`command_run`)."""
    runs = [command_run(path, kind, options, tree) for _ in range(repeat)]
    if "error" in runs[0]:
        raise SimbatchError("", runs[0]["error"])
    return {"wall": statistics.median(r["wall"] for r in runs), "peak_mib": max(r["peak_mib"] for r in runs),
            "tables": runs[0]["tables"]}


def missing_trace(path: Path) -> Path | None:
    """The scenario's trace file when it names one that is not there, else None."""
    from simbatch.scenario.spec import read_yaml

    trace = (read_yaml(path).get("workload") or {}).get("trace")
    if trace and not (path.resolve().parent / trace).is_file():
        return (path.resolve().parent / trace).resolve()
    return None


def bench_scenario(path: Path, policies: list[str], repeat: int) -> None:
    """Print one table: a row per policy."""
    if (trace := missing_trace(path)) is not None:
        print(f"\n{path.name}: skipped, trace {trace} not found")
        return
    print(f"\n{path.name} (median of {repeat}, one fresh process per run)")
    print(f"{'policy':16}{'wall s':>8}{'steps':>9}{'req/s':>9}{'steps/s':>10}"
          f"{'base MiB':>10}{'peak MiB':>10}")
    for kind in policies:
        r = bench_policy(path, kind, repeat)
        print(f"{kind:16}{r['wall']:8.2f}{r['steps']:9d}{r['req_per_s']:9.0f}{r['steps_per_s']:10.0f}"
              f"{r['base_mib']:10.0f}{r['peak_mib']:10.0f}")


def bench_step_cost() -> None:
    """Median per-call time of ``step_cost`` on two typical plans (µs)."""
    from simbatch.costmodel import RooflineCostModel
    from simbatch.core.plan import StepPlan

    cm = RooflineCostModel("llama-2-7b", "a100-80gb")
    decode = StepPlan(list(range(128)), [1] * 128, [1024] * 128, None, 128)
    # A static batch of 32 late in decode: 8 rows finished and kept as padding.
    live, done = 24, 8
    static = StepPlan(list(range(live)) + [-1] * done, [1] * live + [0] * done, [1024] * 32,
                      [0] * live + [1] * done, 32)
    print("\nRooflineCostModel.step_cost (llama-2-7b, a100-80gb), median of 7 x 20,000 calls")
    for label, plan in (("128-slot decode", decode), ("32-slot padded static decode", static)):
        times = timeit.Timer(lambda: cm.step_cost(plan)).repeat(7, 20_000)
        print(f"  {label:30}{statistics.median(times) / 20_000 * 1e6:7.2f} µs")


def print_machine() -> None:
    """CPU model, cores and library versions, so numbers can be compared fairly."""
    import numpy
    import simpy

    import simbatch

    cpu = "unknown"
    if Path("/proc/cpuinfo").is_file():
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"CPU: {cpu}, {cores} cores usable ({os.cpu_count()} online)")
    print(f"Python {platform.python_version()}, numpy {numpy.__version__}, simpy {simpy.__version__}, "
          f"simbatch {simbatch.__version__}, {platform.platform()}")


def main(argv: list[str] | None = None) -> None:
    """Parse options, print the machine, then every scenario's table and the step-cost timing."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per policy (default 3)")
    ap.add_argument("--scenario", type=Path, action="append",
                    help="scenario YAML (repeatable; default: azure_conv and chat)")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help=f"comma-separated policies (default: {','.join(POLICIES)})")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if unknown := [p for p in policies if p not in POLICIES]:
        ap.error(f"unknown policy {', '.join(unknown)}; allowed: {', '.join(POLICIES)}")
    print_machine()
    try:
        for path in args.scenario or SCENARIOS:
            bench_scenario(path, policies, args.repeat)
    except SimbatchError as exc:  # a bad scenario or policy: one line, no traceback
        sys.exit(f"error: {exc}")
    bench_step_cost()


if __name__ == "__main__":
    main()
