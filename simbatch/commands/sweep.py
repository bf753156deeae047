"""``simbatch sweep``: run a scenario over a grid of parameters; one tidy table, resumable.

Runs fan out over an executor: in-process, a local process pool (default),
or Dask (``--dask local`` starts a LocalCluster, ``--dask tcp://host:8786``
uses a running one). Results do not depend on the executor.
"""

from __future__ import annotations

import sys
from pathlib import Path

from simbatch.commands.common import add_scenario_arguments, load
from simbatch.errors import SimbatchError

NAME = "sweep"
HELP = "run a scenario over a grid of parameters (resumable; CSV and Parquet table)"
SHOWN = ("request_throughput", "ttft_ms.p99", "tpot_ms.p99", "e2el_ms.p99", "slo_attainment")


def add_arguments(p) -> None:
    add_scenario_arguments(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="sweep a field over values, e.g. --grid policy.kind=static,continuous (repeatable; "
                        "adds to or replaces the scenario's sweep: section)")
    p.add_argument("--executor", choices=("inline", "process", "dask"), default=None,
                   help="where runs execute (default: process, or dask with --dask)")
    p.add_argument("--jobs", type=int, default=None, help="workers (default: one per core)")
    p.add_argument("--dask", metavar="ADDRESS", default=None,
                   help="'local' starts a Dask LocalCluster; tcp://host:8786 uses a running scheduler")


def executor_kind(args) -> str:
    """``--executor``, with ``--dask`` implying ``dask``; a contradiction is a user error."""
    if args.dask is not None and args.executor not in (None, "dask"):
        raise SimbatchError("--dask", f"needs --executor dask, not --executor {args.executor}")
    if args.jobs is not None and args.jobs < 1:
        raise SimbatchError("--jobs", f"must be >= 1, got {args.jobs}")
    return "dask" if args.dask is not None else args.executor or "process"


def note(message: str) -> None:
    """A remark of the sweep (points left out, runs reused) on stderr."""
    print(f"note: {message}", file=sys.stderr)


def run(args) -> None:
    from simbatch.executors import make_executor
    from simbatch.sweep import run_sweep, sweep_grid

    kind = executor_kind(args)
    scenario = load(args)
    grid = sweep_grid(scenario, args.grid)
    out_dir = args.out or Path("runs") / f"{scenario.name}-sweep"
    executor = make_executor(kind, args.jobs, args.dask)
    try:
        table = run_sweep(scenario, grid, out_dir, executor, progress=True, note=note)
    finally:
        executor.close()
    shown = table[["run_id", *grid.axes, *SHOWN]]
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.4g}", na_rep="-"))
    a = table.attrs
    print(f"{a['runs']} runs ({a['ran']} run now, {a['reused']} reused) on {executor.name}; "
          f"wrote {out_dir}/sweep.csv, sweep.parquet, sweep.yaml and runs/")
