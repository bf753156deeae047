"""Arguments and terminal output shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_SCENARIO = "classroom"
MAX_NOTES = 5  # kinds of note per run on the terminal; run.log keeps every note


def add_scenario_arguments(p: argparse.ArgumentParser) -> None:
    """SCENARIO, ``--set KEY=VALUE`` (repeatable) and ``--out DIR``."""
    p.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO,
                   help="scenario YAML file, or the name of a bundled one (default: classroom)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario field, e.g. --set policy.max_num_seqs=64 (repeatable)")
    p.add_argument("--out", type=Path, help="folder for the output files")
    p.add_argument("--policy-file", dest="policy_files", action="append", default=[], type=Path,
                   metavar="FILE.py", help="a Python file defining your own policy class, usable as "
                   "policy.kind (repeatable; docs/policies.md, 'Writing a policy')")


def add_format_argument(p: argparse.ArgumentParser) -> None:
    """``--format auto|csv|parquet``: how a run folder's request and step tables are written."""
    p.add_argument("--format", default="auto", metavar="auto|csv|parquet",
                   help="the requests and steps tables as csv, parquet, or auto (default): Parquet when a "
                        "table has more rows than a spreadsheet holds (1,048,576), else CSV (docs/reports.md)")


def check_format(args) -> None:
    """``--format`` is a known table format and comes with ``--out`` (a one-line error otherwise)."""
    from simbatch.errors import SimbatchError
    from simbatch.report.outputs import check_table_format

    check_table_format(args.format, "--format")
    if args.format != "auto" and args.out is None:
        raise SimbatchError("--format", "needs --out DIR (it says how the tables written there are stored)")


def load(args):
    """The scenario named by ``args.scenario`` with ``args.overrides`` applied; ``args.out``
    (where a command has one) is checked first, so a bad output folder fails before any work."""
    from simbatch.scenario.spec import load_scenario

    if getattr(args, "out", None) is not None:
        from simbatch.files.outpaths import check_out_dir

        # kind: a run may not replace a comparison's folder, nor a comparison a run's (outpaths.refusal)
        check_out_dir(args.out, whole=getattr(args, "whole_out", True), kind=getattr(args, "command", None))
    if args.policy_files:
        from simbatch.policies import load_policy_file

        for path in args.policy_files:
            load_policy_file(path)
    return load_scenario(args.scenario, args.overrides)


def print_notes(messages: list[str], prefix: str = "note") -> None:
    """A run's remarks on stderr, one line per kind (:func:`simbatch.commands.notes.summarise_notes`: a
    kind seen often is counted, with its first and last time and typical figures), at most
    ``MAX_NOTES`` kinds, then how many more kinds run.log holds."""
    from simbatch.commands.notes import summarise_notes

    kinds = summarise_notes(messages)
    for count, line in kinds[:MAX_NOTES]:
        where = f" (all {count} in run.log with --out)" if count > 1 else ""
        print(f"{prefix}: {line}{where}", file=sys.stderr)
    if len(kinds) > MAX_NOTES:
        rest = sum(count for count, _ in kinds[MAX_NOTES:])
        print(f"{prefix}: ... and {len(kinds) - MAX_NOTES} more kinds of note, {rest} notes "
              "(all in run.log with --out)", file=sys.stderr)


def comma_list(text: str | None, flag: str) -> list[str] | None:
    """A comma-separated option's items (None when the option was not given); a given but
    empty list (``--policies ''``, ``--seeds ,``) is a user error, never "all"."""
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        from simbatch.errors import SimbatchError

        raise SimbatchError(flag, f"is empty ({text!r}); give a comma-separated list, or leave the option out")
    return items


def check_jobs(jobs: int | None) -> None:
    """``--jobs`` is a positive count of workers when given (:func:`simbatch.runs.executors.check_jobs`)."""
    from simbatch.runs.executors import check_jobs as check

    check(jobs, "--jobs")


def add_executor_arguments(p: argparse.ArgumentParser) -> None:
    """``--executor``, ``--jobs`` and ``--dask ADDRESS`` (which implies the Dask executor)."""
    p.add_argument("--executor", choices=("inline", "process", "dask"), default=None,
                   help="where runs execute (default: a local process pool, or dask with --dask)")
    p.add_argument("--jobs", type=int, default=None, help="workers (default: one per core)")
    p.add_argument("--dask", metavar="ADDRESS", default=None,
                   help="'local' starts a Dask LocalCluster; tcp://host:8786 uses a running scheduler")


def make_args_executor(args):
    """The executor ``add_executor_arguments`` options ask for; contradictions are user errors."""
    from simbatch.errors import SimbatchError
    from simbatch.runs.executors import make_executor

    if args.dask is not None and args.executor not in (None, "dask"):
        raise SimbatchError("--dask", f"needs --executor dask, not --executor {args.executor}")
    check_jobs(args.jobs)
    kind = "dask" if args.dask is not None else args.executor or "process"
    return make_executor(kind, args.jobs, args.dask)
