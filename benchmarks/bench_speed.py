"""Issues 8 and 18's speed benchmark: the Azure trace at 1x and 4x, and a million synthetic requests.

Workloads (scenario files in ``benchmarks/scenarios/``):

- (a) ``speed_a``: the Azure conversation trace (19,366 requests) at its
  recorded rate, prompts clipped so prompt + output <= 4096, one Llama-2-7B
  A100-80GB replica;
- (b) ``speed_b``: the same at 4x the recorded rate;
- (c) ``speed_c``: 1,000,000 synthetic requests with the trace's prompt and
  output lengths (resampled), Poisson at 38 req/s on 8 such replicas (near
  saturation: one replica serves about 5 req/s of this mix).

Policies: ``continuous`` (max_num_seqs 128, max_num_batched_tokens 4096) and
``chunked_prefill`` (max_num_seqs 128, chunk_size 512), the settings peers are
usually run with. Each figure is the median of ``--repeat`` runs, every run in
a fresh process (see ``bench_core.py``); peak RSS is the largest seen.

Two times per policy: ``run() s``, ``simbatch.api.run`` in a fresh process
(building the workload, simulating, computing the metrics; what earlier
versions of this benchmark printed), and ``command s``, the whole
``simbatch run SCENARIO --out DIR`` a user waits for, from process start to
exit (interpreter and imports, the run, the printed summary, the files
written), started through the console script installed beside this Python
(not a version manager's shim). ``extra s`` is their difference: start-up,
printing and writing; ``cmd/run`` their ratio.

``sim s`` is the simulation proper within ``run()`` (SimPy's ``Environment.run``:
no workload building, no metrics), and ``sim/cont`` that time over continuous
batching's in the same table (issue 18: chunked prefill within 1.2x; issue 13
item 7: static, dynamic and chunked prefill with two streams within 1.5x).

``--against DIR`` measures every row for another checkout too (a ``git
worktree`` of an earlier commit, say): a ``before`` row (that checkout) above
an ``after`` row (this one), their runs alternating one by one so that a
change in the machine's load falls on both alike. Both sides then start as
``python -m simbatch`` with their checkout first on the import path.

The whole command runs once per table format (``--formats``, ``--c-formats``):
``auto``, the default, writes (c)'s tables as Parquet (its steps table has
more rows than a spreadsheet holds) and (a)'s and (b)'s as CSV; ``csv``
forces CSV. The ``tables`` column says what was written.

    python benchmarks/bench_speed.py                         # a, b (both policies), c (continuous)
    python benchmarks/bench_speed.py --only c --repeat 1
    python benchmarks/bench_speed.py --only c --c-formats auto,csv,parquet
    python benchmarks/bench_speed.py --c-policies continuous,chunked_prefill
    python benchmarks/bench_speed.py --only a --policies static,dynamic,continuous,chunked_prefill+streams2
    git worktree add /tmp/before HEAD~3 && python benchmarks/bench_speed.py --only a --against /tmp/before

A benchmark, not a test: it asserts nothing. The targets it checks by eye
(issue 18): (a)'s whole command under 1.5 s for continuous and 1.8 s for
chunked prefill; (c)'s whole command, outputs included, under 60 s and 1.5 GiB;
(issue 15, item 4) (c)'s whole command at most 1.2x its ``run()``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import REPO, bench_command, bench_policy, console_command, missing_trace, print_machine  # noqa: E402

from simbatch.errors import SimbatchError  # noqa: E402

HERE = Path(__file__).resolve().parent / "scenarios"
WORKLOADS = {"a": HERE / "speed_a.yaml", "b": HERE / "speed_b.yaml", "c": HERE / "speed_c.yaml"}
POLICIES = ("continuous", "chunked_prefill")
# what --policies may name: issue 13's slow paths beside them (``+streams2``: with
# ``streams: 2``, decodes and chunks on two streams)
ALL_POLICIES = ("static", "dynamic", "continuous", "chunked_prefill", "continuous+streams2",
                "chunked_prefill+streams2")
FORMATS = ("auto", "csv", "parquet")  # simbatch run --format


def measure(path: Path, kind: str, repeat: int, formats: list[str], tree: str | None) -> dict:
    """One row's figures: :func:`bench_policy` and, per table format, :func:`bench_command`."""
    return {"run": bench_policy(path, kind, repeat, tree),
            "commands": {fmt: bench_command(path, kind, repeat, ("--format", fmt), tree) for fmt in formats}}


def measure_both(path: Path, kind: str, repeat: int, formats: list[str], against: str) -> tuple[dict, dict]:
    """The same row for the checkout ``against`` and for this one, alternating run by run
    (so a change in the machine's load falls on both alike); medians of ``repeat`` each. Both
    sides start alike: ``python -m simbatch`` with that checkout first on the import path."""
    sides: tuple[list, list] = ([], [])
    for _ in range(repeat):
        for side, tree in zip(sides, (str(Path(against).resolve()), str(REPO))):
            side.append(measure(path, kind, 1, formats, tree))
    return tuple(median_row(side) for side in sides)


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


def table(label: str, path: Path, policies: list[str], repeat: int, formats: list[str],
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


def main(argv: list[str] | None = None) -> None:
    """Print the machine, then one table per workload."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (default 3)")
    ap.add_argument("--only", default="a,b,c", help="workloads to run, e.g. a,b (default a,b,c)")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help="policies for (a) and (b) (default: continuous,chunked_prefill)")
    ap.add_argument("--c-policies", default="continuous",
                    help="policies for (c) (default: continuous; chunked_prefill takes minutes)")
    ap.add_argument("--formats", default="auto", help="simbatch run --format values for (a) and (b) (default: auto)")
    ap.add_argument("--against", metavar="DIR",
                    help="another simbatch checkout (e.g. a git worktree of an earlier commit): each row is "
                         "measured for it too ('before', run by run alternating with this one, 'after')")
    ap.add_argument("--c-formats", default="auto,csv",
                    help="simbatch run --format values for (c) (default: auto,csv; auto writes Parquet there)")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    if args.against is not None and not (Path(args.against) / "simbatch" / "__init__.py").is_file():
        ap.error(f"--against {args.against}: not a simbatch checkout (no simbatch/__init__.py there)")
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
    try:
        for w in only:
            table(w, WORKLOADS[w], c_policies if w == "c" else policies, args.repeat,
                  c_formats if w == "c" else formats, args.against)
    except SimbatchError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
