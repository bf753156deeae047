"""How fast simbatch runs: issue 8 and 18's rows, each policy's wall time, one run phase by phase.

Three subcommands (none given: ``rows``, as this script ran before the others were folded
into it). Every figure from a run in a fresh process; compare them only between runs on the
same machine.

``rows`` (issues 8, 18, 13 item 7, 15 item 4): three workloads (scenario files in
``benchmarks/scenarios/``):

- (a) ``speed_a``: the Azure conversation trace (19,366 requests) at its
  recorded rate, prompts clipped so prompt + output <= 4096, one Llama-2-7B
  A100-80GB replica;
- (b) ``speed_b``: the same at 4x the recorded rate;
- (c) ``speed_c``: 1,000,000 synthetic requests with the trace's prompt and
  output lengths (resampled), Poisson at 38 req/s on 8 such replicas (near
  saturation: one replica serves about 5 req/s of this mix).

  Policies: ``continuous`` (max_num_seqs 128, max_num_batched_tokens 4096) and
  ``chunked_prefill`` (max_num_seqs 128, chunk_size 512), the settings peers usually run.
  Each figure: the median of ``--repeat`` runs, each in a fresh process; peak RSS: the
  largest seen. ``run() s`` is ``simbatch.api.run`` (workload, simulation, metrics);
  ``command s`` the whole ``simbatch run SCENARIO --out DIR`` a user waits for, start to
  exit (imports, the run, the summary, the files), through the console script beside this
  Python (not a version manager's shim); ``extra s`` their difference, ``cmd/run`` their
  ratio. ``sim s`` is the simulation proper (SimPy's ``Environment.run``) and ``sim/cont``
  that over continuous batching's in the same table. The command runs once per table
  format (``--formats``, ``--c-formats``): ``auto``, the default, writes (c)'s tables as
  Parquet (its steps table has more rows than a spreadsheet holds) and (a)'s and (b)'s as
  CSV; ``csv`` forces CSV; the ``tables`` column says what was written.

  Targets, by eye: (issue 18) (a)'s whole command under 1.5 s for continuous and 1.8 s
  for chunked prefill, chunked prefill's ``sim/cont`` within 1.2x, (c)'s whole command,
  outputs included, under 60 s and 1.5 GiB; (issue 13 item 7) static, dynamic and chunked
  prefill with two streams within 1.5x; (issue 15 item 4) (c)'s whole command at most 1.2x
  its ``run()``; (issue 34 section 7) no (a) or (c) row slower than before by more than
  5 %, measured before/after in one run with ``--against``.

``policies``: for each scenario (``--scenario``, default azure_conv and chat) and policy,
``simbatch.api.run`` ``--repeat`` times, each in a fresh ``spawn`` subprocess (so peak RSS
belongs to that run alone, and no run warms caches for the next): the median wall time,
simulated requests and engine steps per wall second, and the RSS after imports and at the
end. Then the median per-call time of ``RooflineCostModel.step_cost``, which runs once per
simulated step. No target: the figures recorded in benchmarks/README.md to compare with.

``phases`` (issue 18, issue 15 item 4): the pieces of ``simbatch run SCENARIO --out DIR``
one after another in this process (default: speed_c): imports and the scenario, building
the workload, simulating, the request and step columns, ``summarize``, the per-replica
summaries, then writing the run folder in each ``--formats`` table format. For each phase
its wall time, its CPU time (steadier than wall time on a shared machine) and its peak RSS
(``VmHWM``, reset before each phase through ``/proc/self/clear_refs``, Linux only; elsewhere
the process's peak so far). ``--tracemalloc`` also traces the metric phases' Python
allocations (not the simulation's: tracing would slow it tenfold) and prints each one's
traced peak and the largest allocation sites at that peak. It shows where (c)'s 60 s and
1.5 GiB go.

``--against DIR`` (``rows`` and ``policies``) measures every row for another checkout too (a
``git worktree`` of an earlier commit, say): a ``before`` row (that checkout) above an
``after`` row (this one), their runs alternating one by one so that a change in the
machine's load falls on both alike. Both sides then import simbatch from their checkout
(``python -m simbatch`` with it first on the import path for whole commands). For
``phases``, put the other checkout first yourself: ``PYTHONPATH=DIR python ... phases``.

    python benchmarks/bench_speed.py                         # a, b (both policies), c (continuous)
    python benchmarks/bench_speed.py --only c --repeat 1
    python benchmarks/bench_speed.py --only c --c-formats auto,csv,parquet
    python benchmarks/bench_speed.py --c-policies continuous,chunked_prefill
    python benchmarks/bench_speed.py --only a --policies static,dynamic,continuous,chunked_prefill+streams2
    git worktree add /tmp/before HEAD~3 && python benchmarks/bench_speed.py --only a,c --against /tmp/before
    python benchmarks/bench_speed.py policies [--repeat N] [--scenario PATH ...] [--policies a,b] [--against DIR]
    python benchmarks/bench_speed.py phases                  # (c): speed_c, a million requests
    python benchmarks/bench_speed.py phases --set workload.synthetic.num_requests=100000 --tracemalloc
    python benchmarks/bench_speed.py phases --scenario scenarios/azure_conv.yaml --formats csv

A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import tracemalloc
from pathlib import Path

T0 = time.perf_counter()  # phases: "imports + scenario" counts from here

from simbatch.errors import SimbatchError

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent / "scenarios"
WORKLOADS = {"a": HERE / "speed_a.yaml", "b": HERE / "speed_b.yaml", "c": HERE / "speed_c.yaml"}
SCENARIOS = [REPO / "scenarios" / "azure_conv.yaml", REPO / "scenarios" / "chat.yaml"]  # policies' default
POLICIES = ("static", "dynamic", "continuous", "chunked_prefill")  # what policies --policies may name
ROW_POLICIES = ("continuous", "chunked_prefill")
# what rows --policies may name: issue 13's slow paths beside them (``+streams2``: with
# ``streams: 2``, decodes and chunks on two streams)
ALL_POLICIES = (*POLICIES, "continuous+streams2", "chunked_prefill+streams2")
FORMATS = ("auto", "csv", "parquet")  # simbatch run --format


# -- shared: the machine, fresh processes, medians, memory ---------------------------------------

def maxrss_mib(usage=None) -> float:
    """``ru_maxrss`` (KiB on Linux) of this process, or of ``usage``, in MiB."""
    return (usage or resource.getrusage(resource.RUSAGE_SELF)).ru_maxrss / 1024


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


def missing_trace(path: Path) -> Path | None:
    """The scenario's trace file when it names one that is not there, else None."""
    from simbatch.scenario.spec import read_yaml

    trace = (read_yaml(path).get("workload") or {}).get("trace")
    if trace and not (path.resolve().parent / trace).is_file():
        return (path.resolve().parent / trace).resolve()
    return None


def use_tree(tree: str | None) -> None:
    """Import simbatch from the checkout ``tree`` in this (fresh) process instead of the one
    installed (``--against``); None: leave it."""
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
    base = maxrss_mib()
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
            "steps": sum(out.result.log.replica_num_steps), "base_mib": base, "peak_mib": maxrss_mib()}


def spawn_runs(path: Path, kind: str, trees: list[str | None]) -> list[dict]:
    """:func:`one_run` once per entry of ``trees`` (a checkout, or None: the installed
    simbatch), in that order, each in a fresh spawned process."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"), max_tasks_per_child=1) as pool:
        runs = [pool.submit(one_run, str(path), kind, tree).result() for tree in trees]
    if error := next((r["error"] for r in runs if "error" in r), None):
        raise SimbatchError("", error)
    return runs


def run_figures(runs: list[dict]) -> dict:
    """The median wall and simulation time of :func:`one_run`'s ``runs``, the rates at the
    median, and the largest RSS."""
    wall = statistics.median(r["wall"] for r in runs)
    return {"wall": wall, "sim": statistics.median(r["sim"] for r in runs),
            "req_per_s": runs[0]["requests"] / wall, "steps": runs[0]["steps"],
            "steps_per_s": runs[0]["steps"] / wall, "base_mib": max(r["base_mib"] for r in runs),
            "peak_mib": max(r["peak_mib"] for r in runs)}


def bench_policy(path: Path, kind: str, repeat: int, tree: str | None = None) -> dict:
    """:func:`run_figures` of ``repeat`` runs, each in a fresh spawned process (``tree``: a
    checkout to import simbatch from)."""
    return run_figures(spawn_runs(path, kind, [tree] * repeat))


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
    return {"wall": wall, "peak_mib": maxrss_mib(usage), "tables": tables}


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


def sides(against: str) -> tuple[str, str]:
    """The two checkouts of a before/after comparison: ``against``, then this one."""
    return str(Path(against).resolve()), str(REPO)


# -- rows: (a), (b), (c) ----------------------------------------------------------------------

def measure(path: Path, kind: str, repeat: int, formats: list[str], tree: str | None) -> dict:
    """One row's figures: :func:`bench_policy` and, per table format, :func:`bench_command`."""
    return {"run": bench_policy(path, kind, repeat, tree),
            "commands": {fmt: bench_command(path, kind, repeat, ("--format", fmt), tree) for fmt in formats}}


def measure_both(path: Path, kind: str, repeat: int, formats: list[str], against: str) -> tuple[dict, dict]:
    """The same row for the checkout ``against`` and for this one, alternating run by run
    (so a change in the machine's load falls on both alike); medians of ``repeat`` each. Both
    sides start alike: ``python -m simbatch`` with that checkout first on the import path."""
    rows: tuple[list, list] = ([], [])
    for _ in range(repeat):
        for side, tree in zip(rows, sides(against)):
            side.append(measure(path, kind, 1, formats, tree))
    return tuple(median_row(side) for side in rows)


def median_row(rows: list[dict]) -> dict:
    """Per figure, the median over ``rows`` (each :func:`measure`'s result); peaks: the largest."""
    run = {k: statistics.median(r["run"][k] for r in rows) for k in ("wall", "sim")}
    first = rows[0]["run"]
    run.update(steps=first["steps"], req_per_s=first["req_per_s"] * first["wall"] / run["wall"],
               steps_per_s=first["steps"] / run["wall"], peak_mib=max(r["run"]["peak_mib"] for r in rows))
    commands = {fmt: {"wall": statistics.median(r["commands"][fmt]["wall"] for r in rows),
                      "peak_mib": max(r["commands"][fmt]["peak_mib"] for r in rows),
                      "tables": rows[0]["commands"][fmt]["tables"]} for fmt in rows[0]["commands"]}
    return {"run": run, "commands": commands}


def rows_table(label: str, path: Path, policies: list[str], repeat: int, formats: list[str],
               against: str | None = None) -> None:
    """One workload: a row per policy and table format (in-process and whole-command wall s,
    the simulation's own s and its ratio to continuous batching's, rates, peak MiB); with
    ``against`` (another checkout) a row for it ("before") above each of this one ("after")."""
    if (trace := missing_trace(path)) is not None:
        print(f"\n({label}) {path.name}: skipped, trace {trace} not found")
        return
    print(f"\n({label}) {path.stem} (median of {repeat}, one fresh process per run)")
    rows = []  # (policy, version, figures)
    for kind in policies:
        if against is None:
            rows.append((kind, "", measure(path, kind, repeat, formats, None)))
        else:
            before, after = measure_both(path, kind, repeat, formats, against)
            rows += [(kind, "before", before), (kind, "after", after)]
    continuous = {version: f["run"]["sim"] for kind, version, f in rows if kind == "continuous"}
    print(f"{'policy':26}{'version':>8}{'--format':>9}{'tables':>8}{'run() s':>9}{'sim s':>8}{'sim/cont':>9}"
          f"{'command s':>11}{'extra s':>9}{'cmd/run':>8}{'requests':>10}{'steps':>10}{'req/s':>9}{'steps/s':>10}"
          f"{'run() MiB':>11}{'command MiB':>13}")
    for kind, version, f in rows:
        r = f["run"]
        requests = round(r["req_per_s"] * r["wall"])
        ratio = f"{r['sim'] / continuous[version]:9.2f}" if version in continuous else f"{'-':>9}"
        for fmt, c in f["commands"].items():
            print(f"{kind:26}{version:>8}{fmt:>9}{c['tables']:>8}{r['wall']:9.2f}{r['sim']:8.2f}{ratio}"
                  f"{c['wall']:11.2f}{c['wall'] - r['wall']:9.2f}{c['wall'] / r['wall']:8.2f}{requests:10d}"
                  f"{r['steps']:10d}{r['req_per_s']:9.0f}{r['steps_per_s']:10.0f}{r['peak_mib']:11.0f}"
                  f"{c['peak_mib']:13.0f}", flush=True)


def name_list(text: str, allowed: tuple[str, ...], what: str, ap: argparse.ArgumentParser) -> list[str]:
    """Comma-separated names, each one of ``allowed``."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if unknown := [p for p in names if p not in allowed]:
        ap.error(f"unknown {what} {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return names


def main_rows(args, ap: argparse.ArgumentParser) -> None:
    """Print the machine, then one table per workload."""
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    if bad := [w for w in only if w not in WORKLOADS]:
        ap.error(f"unknown workload {', '.join(bad)}; allowed: a, b, c")
    policies, c_policies = (name_list(args.policies, ALL_POLICIES, "policy", ap),
                            name_list(args.c_policies, ALL_POLICIES, "policy", ap))
    formats, c_formats = (name_list(args.formats, FORMATS, "format", ap),
                          name_list(args.c_formats, FORMATS, "format", ap))
    print_machine()
    launcher = ' '.join(console_command()) if args.against is None else f"{sys.executable} -m simbatch"
    print(f"command: {launcher} run SCENARIO --out DIR --format F --set policy.kind=... (a fresh process)")
    for w in only:
        rows_table(w, WORKLOADS[w], c_policies if w == "c" else policies, args.repeat,
                   c_formats if w == "c" else formats, args.against)


# -- policies: every policy's wall time, and step_cost ------------------------------------------

def policies_table(path: Path, policies: list[str], repeat: int, against: str | None = None) -> None:
    """Print one table: a row per policy (with ``against``: a ``before`` and an ``after`` row,
    their runs alternating one by one)."""
    if (trace := missing_trace(path)) is not None:
        print(f"\n{path.name}: skipped, trace {trace} not found")
        return
    print(f"\n{path.name} (median of {repeat}, one fresh process per run)")
    version = "" if against is None else f"{'version':>8}"
    print(f"{'policy':16}{version}{'wall s':>8}{'steps':>9}{'req/s':>9}{'steps/s':>10}"
          f"{'base MiB':>10}{'peak MiB':>10}")
    for kind in policies:
        if against is None:
            rows = [("", bench_policy(path, kind, repeat))]
        else:
            runs = spawn_runs(path, kind, list(sides(against)) * repeat)
            rows = [(f"{'before':>8}", run_figures(runs[0::2])), (f"{'after':>8}", run_figures(runs[1::2]))]
        for version, r in rows:
            print(f"{kind:16}{version}{r['wall']:8.2f}{r['steps']:9d}{r['req_per_s']:9.0f}{r['steps_per_s']:10.0f}"
                  f"{r['base_mib']:10.0f}{r['peak_mib']:10.0f}")


def bench_step_cost() -> None:
    """Median per-call time of ``step_cost`` on two typical plans (µs)."""
    from simbatch.core.plan import StepPlan
    from simbatch.costmodel import RooflineCostModel

    cm = RooflineCostModel("llama-2-7b", "a100-80gb")
    decode = StepPlan(list(range(128)), [1] * 128, [1024] * 128, None, 128)
    # A static batch of 32 late in decode: 8 rows finished and kept as padding.
    live, done = 24, 8
    static = StepPlan(list(range(live)) + [-1] * done, [1] * live + [0] * done, [1024] * 32,
                      [0] * live + [1] * done, 32)
    print("\nRooflineCostModel.step_cost (llama-2-7b, a100-80gb), median of 7 x 20,000 calls")
    for label, plan in (("128-slot decode", decode), ("32-slot padded static decode", static)):
        times = timeit.Timer(lambda plan=plan: cm.step_cost(plan)).repeat(7, 20_000)
        print(f"  {label:30}{statistics.median(times) / 20_000 * 1e6:7.2f} µs")


def main_policies(args, ap: argparse.ArgumentParser) -> None:
    """Print the machine, then every scenario's table and the step-cost timing."""
    policies = name_list(args.policies, POLICIES, "policy", ap)
    print_machine()
    for path in args.scenario or SCENARIOS:
        policies_table(path, policies, args.repeat, args.against)
    bench_step_cost()


# -- phases: one run's time and memory, phase by phase -------------------------------------------

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
    return peak if peak is not None else maxrss_mib()


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


def main_phases(args, ap: argparse.ArgumentParser) -> None:
    """Run and print the phases of one scenario."""
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
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_speed-phases-"))

    def sizes(paths):
        return ", ".join(f"{p.name} {p.stat().st_size / 1e6:.0f} MB" for p in paths if p.suffix in
                         (".csv", ".parquet"))

    try:
        for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
            ph.run(f"write {fmt}", lambda fmt=fmt: out.write(root / fmt, fmt), sizes, trace=False)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'total':34}{time.perf_counter() - T0:8.2f}{time.process_time():8.2f}{ph.peak:10.0f}"
          "  (peak: the largest phase's)")


# -- the command line ---------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    """The three subcommands' options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="Without a subcommand: rows. See the module docstring for each table.")
    sub = ap.add_subparsers(dest="command", metavar="{rows,policies,phases}")
    against = {"metavar": "DIR", "help": "another simbatch checkout (e.g. a git worktree of an earlier commit): "
               "each row is measured for it too ('before', run by run alternating with this one, 'after')"}
    rows = sub.add_parser("rows", help="(a), (b), (c): run() and whole-command seconds, memory (the default)",
                          description="Issues 8 and 18's speed benchmark: the Azure trace at 1x and 4x, and a "
                                      "million synthetic requests.")
    rows.add_argument("--repeat", type=int, default=3, help="runs per figure (default 3)")
    rows.add_argument("--only", default="a,b,c", help="workloads to run, e.g. a,b (default a,b,c)")
    rows.add_argument("--policies", default=",".join(ROW_POLICIES),
                      help="policies for (a) and (b) (default: continuous,chunked_prefill)")
    rows.add_argument("--c-policies", default="continuous",
                      help="policies for (c) (default: continuous; chunked_prefill takes minutes)")
    rows.add_argument("--formats", default="auto",
                      help="simbatch run --format values for (a) and (b) (default: auto)")
    rows.add_argument("--against", **against)
    rows.add_argument("--c-formats", default="auto,csv",
                      help="simbatch run --format values for (c) (default: auto,csv; auto writes Parquet there)")
    rows.set_defaults(func=main_rows, parser=rows)
    pol = sub.add_parser("policies", help="each policy's wall time, steps/s and peak RSS; step_cost's µs",
                         description="Benchmark the simulator core: wall time, throughput and peak memory per "
                                     "policy, then RooflineCostModel.step_cost's per-call time.")
    pol.add_argument("--repeat", type=int, default=3, help="runs per policy (default 3)")
    pol.add_argument("--scenario", type=Path, action="append",
                     help="scenario YAML (repeatable; default: azure_conv and chat)")
    pol.add_argument("--policies", default=",".join(POLICIES),
                     help=f"comma-separated policies (default: {','.join(POLICIES)})")
    pol.add_argument("--against", **against)
    pol.set_defaults(func=main_policies, parser=pol)
    ph = sub.add_parser("phases", help="one run's time and memory, phase by phase, in one process",
                        description="Where one run's time and memory go, phase by phase, in one process "
                                    "(issue 18, issue 15 item 4).")
    ph.add_argument("--scenario", default=str(WORKLOADS["c"]),
                    help="scenario file (default: benchmarks/scenarios/speed_c.yaml)")
    ph.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field (repeatable)")
    ph.add_argument("--formats", default="parquet,csv", help="table formats to write, in order (default parquet,csv)")
    ph.add_argument("--tracemalloc", action="store_true", help="trace the metric phases' allocations")
    ph.add_argument("--keep", metavar="DIR", help="write the run folders under DIR (default: a temporary folder)")
    ph.set_defaults(func=main_phases, parser=ph)
    return ap


def main(argv: list[str] | None = None) -> None:
    """Parse the subcommand (none: ``rows``) and run it."""
    ap = parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in ("rows", "policies", "phases", "-h", "--help"):
        argv = ["rows", *argv]
    args = ap.parse_args(argv)
    if getattr(args, "repeat", 1) < 1:
        args.parser.error("--repeat must be >= 1")
    if getattr(args, "against", None) is not None and not (Path(args.against) / "simbatch" / "__init__.py").is_file():
        args.parser.error(f"--against {args.against}: not a simbatch checkout (no simbatch/__init__.py there)")
    try:
        args.func(args, args.parser)
    except SimbatchError as exc:  # a bad scenario or policy: one line, no traceback
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
