"""``simbatch sweep``: run a scenario over a grid of parameters; one tidy table, resumable.

Runs fan out over an executor: in-process, a local process pool (default),
or Dask (``--dask local`` starts a LocalCluster, ``--dask tcp://host:8786``
uses a running one). Results do not depend on the executor.
"""

from __future__ import annotations

import sys
from pathlib import Path

from simbatch.commands.common import add_executor_arguments, add_scenario_arguments, load, make_args_executor

NAME = "sweep"
HELP = "run a scenario over a grid of parameters (resumable; CSV and Parquet table)"
SHOWN = ("request_throughput", "ttft_ms.p99", "tpot_ms.p99", "e2el_ms.p99", "slo_attainment")


def add_arguments(p) -> None:
    add_scenario_arguments(p)
    p.set_defaults(whole_out=False)  # a sweep folder grows run by run and resumes; never replaced whole
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="sweep a field over values, e.g. --grid policy.kind=static,continuous (repeatable; "
                        "adds to or replaces the scenario's sweep: section)")
    add_executor_arguments(p)
    p.add_argument("--report", action="store_true",
                   help="also write report.html, report.md and report_files/ into the sweep folder "
                        "(what `simbatch report DIR` writes)")


def note(message: str) -> None:
    """A remark of the sweep (points left out, runs reused) on stderr."""
    print(f"note: {message}", file=sys.stderr)


def default_folder(scenario) -> Path:
    """``runs/<name>-sweep``, checked as ``--out`` is (before any run): a sweep folder grows."""
    from simbatch.files.outpaths import check_out_dir

    return check_out_dir(Path("runs") / f"{scenario.name}-sweep", "the sweep folder", whole=False)


def run(args) -> None:
    from simbatch.report.table import fmt_num
    from simbatch.sweep import run_sweep, sweep_grid

    scenario = load(args)
    grid = sweep_grid(scenario, args.grid)
    out_dir = args.out or default_folder(scenario)
    executor = make_args_executor(args)
    try:
        table = run_sweep(scenario, grid, out_dir, executor, progress=True, note=note)
    finally:
        executor.close()
    shown = table[["run_id", *grid.axes, *SHOWN]]
    print(shown.to_string(index=False, float_format=fmt_num, na_rep="-"))
    a = table.attrs
    print(f"{a['runs']} runs ({a['ran']} run now, {a['reused']} reused) on {executor.name}; "
          f"wrote {out_dir}/sweep.csv, sweep.parquet, sweep.yaml and runs/")
    if args.report:  # from the folder as written, exactly as `simbatch report` reads it
        from simbatch.report.html import write_report

        path = write_report(out_dir)
        print(f"wrote {path} ({path.stat().st_size:,} bytes), report.md and report_files/")
