"""The ``simbatch`` command line: ``run`` and ``compare``.

User errors print one line (``simbatch: error: <where>: <cause>``) and exit 2,
without a traceback and without writing any output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simbatch.errors import SimbatchError

DEFAULT_SCENARIO = "classroom"


def bundled_scenario(name: str) -> Path:
    """Path of a scenario in the source tree's ``scenarios/`` (used when SCENARIO is a bare name)."""
    return Path(__file__).resolve().parents[1] / "scenarios" / f"{name}.yaml"


def resolve_scenario_path(arg: str) -> Path:
    """A file path as given, else a bundled scenario by name (``chat``, ``classroom``...)."""
    path = Path(arg)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    bundled = bundled_scenario(arg)
    return bundled if bundled.exists() else path


MAX_NOTES = 3  # per run on the terminal; run.log keeps them all


def print_notes(messages: list[str], prefix: str = "note") -> None:
    """The first few remarks of a run on stderr, and how many more run.log holds."""
    for m in messages[:MAX_NOTES]:
        print(f"{prefix}: {m}", file=sys.stderr)
    if len(messages) > MAX_NOTES:
        print(f"{prefix}: ... and {len(messages) - MAX_NOTES} more (all in run.log with --out)", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (two subcommands)."""
    p = argparse.ArgumentParser(prog="simbatch", description="Simulate LLM-inference batching policies.")
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO,
                        help="scenario YAML file, or the name of a bundled one (default: classroom)")
    common.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario field, e.g. --set policy.max_num_seqs=64 (repeatable)")
    common.add_argument("--out", type=Path, help="folder for the output files")
    sub.add_parser("run", parents=[common], help="simulate one scenario")
    c = sub.add_parser("compare", parents=[common], help="run one workload under several policies")
    c.add_argument("--policies", default="static,dynamic,continuous,chunked_prefill",
                   help="comma-separated policy kinds (default: all four)")
    c.add_argument("--jobs", type=int, default=None,
                   help="processes to run policies in parallel (default: one per core)")
    return p


def cmd_run(args) -> None:
    """``simbatch run``: print the summary table, write the run's files."""
    from simbatch.api import load_scenario, run
    from simbatch.report import format_summary

    scenario = load_scenario(resolve_scenario_path(args.scenario), args.overrides)
    out = run(scenario)
    print_notes(out.messages)
    print(format_summary(out.summary, title=f"{scenario.name}: {out.summary['policy']['kind']}"))
    if args.out:
        out.write(args.out)
        print(f"wrote {args.out}/summary.json, requests.csv, steps.csv, run.log")


def cmd_compare(args) -> None:
    """``simbatch compare``: one table, one plot, one folder per policy."""
    from simbatch.api import compare, load_scenario, write_compare
    from simbatch.policies import policy_class
    from simbatch.report import format_comparison

    scenario = load_scenario(resolve_scenario_path(args.scenario), args.overrides)
    kinds = [k.strip() for k in args.policies.split(",") if k.strip()]
    for k in kinds:
        policy_class({"kind": k}, "--policies")
    runs, table = compare(scenario, kinds, jobs=args.jobs)
    for kind, r in runs.items():
        print_notes(r.messages, f"note [{kind}]")
    print(f"{scenario.name}: {runs[kinds[0]].summary['model']['name']} on "
          f"{runs[kinds[0]].summary['hardware']['name']}, {runs[kinds[0]].summary['num_requests']} requests")
    print(format_comparison(table))
    if args.out:
        write_compare(args.out, runs, table)
        print(f"wrote {args.out}/comparison.csv, comparison.png and one folder per policy")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``simbatch`` console script."""
    args = build_parser().parse_args(argv)
    try:
        {"run": cmd_run, "compare": cmd_compare}[args.command](args)
    except SimbatchError as exc:
        from simbatch.scenario import locate

        exc = locate(exc, resolve_scenario_path(args.scenario), args.overrides)
        print(f"simbatch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("simbatch: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
