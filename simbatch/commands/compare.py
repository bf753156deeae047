"""``simbatch compare``: one workload under several policies; one table, one plot, one folder each."""

from __future__ import annotations

from simbatch.commands.common import (add_format_argument, add_scenario_arguments, check_format, comma_list,
                                      load, print_notes)

NAME = "compare"
HELP = "run one workload under several policies"


def add_arguments(p) -> None:
    add_scenario_arguments(p)
    add_format_argument(p)
    p.add_argument("--policies", default=None,
                   help="comma-separated policy kinds (default: all four; with routers: the scenario's policy)")
    p.add_argument("--routers", default=None,
                   help="comma-separated routers to compare (default: the scenario's cluster.routers, if any)")
    p.add_argument("--layouts", default=None,
                   help="comma-separated layouts to compare: colocated,disaggregated "
                        "(default: the scenario's disaggregation.layouts, if any)")
    p.add_argument("--variants", default=None,
                   help="comma-separated named variants to compare (default: all of the scenario's variants:)")
    p.add_argument("--jobs", type=int, default=None,
                   help="processes to run policies in parallel (default: one per core)")
    p.add_argument("--wide", action="store_true",
                   help="print every column of the comparison (default: the policy and 7 core columns)")
    p.add_argument("--report", action="store_true",
                   help="also write report.html, report.md and report_files/ into --out")
    p.add_argument("--traces", action="store_true",
                   help="with --out, also write each policy's timeline to DIR/<policy>/trace.json")


def run(args) -> None:
    from simbatch.api import check_compare, compare, compare_variants, write_compare
    from simbatch.report import format_comparison

    check_format(args)
    scenario = load(args)
    if args.report and not args.out:
        from simbatch.errors import SimbatchError

        raise SimbatchError("--report", "needs --out DIR (the report is written beside the comparison)")
    if args.traces and not args.out:
        from simbatch.errors import SimbatchError

        raise SimbatchError("--traces", "needs --out DIR (traces go to DIR/<policy>/trace.json)")
    kinds, routers, layouts, named = check_compare(
        scenario, comma_list(args.policies, "--policies"), comma_list(args.routers, "--routers"),
        comma_list(args.layouts, "--layouts"), comma_list(args.variants, "--variants"), args.jobs, prefix="--")
    bar = _bar(len(compare_variants(scenario, kinds, routers, layouts, named)))
    try:
        runs, table = compare(scenario, kinds, jobs=args.jobs, routers=routers, layouts=layouts, variants=named,
                              on_done=bar and (lambda i, run: bar.update()))
    finally:
        if bar:
            bar.close()
    for kind, r in runs.items():
        print_notes(r.messages, f"note [{kind}]")
    first = next(iter(runs.values())).summary
    print(f"{scenario.name}: {first['model']['name']} on {describe_gpus(first)}, "
          f"{first['num_requests']} requests")
    print(format_comparison(table, args.wide))
    if args.out:
        write_compare(args.out, runs, table, args.format)
        print(f"wrote {args.out}/comparison.csv, comparison.png and one folder per policy")
    if args.report:
        from simbatch.report.html import write_report

        path = write_report(args.out)
        print(f"wrote {path} ({path.stat().st_size:,} bytes), report.md and report_files/")
    if args.out and args.traces:
        from simbatch.report.perfetto import write_trace

        for kind, r in runs.items():
            write_trace(r, args.out / kind / "trace.json")
        print(f"wrote {args.out}/<policy>/trace.json for each policy")


def _bar(total: int):
    """A live progress bar (runs done of ``total``, elapsed, ETA) on a terminal, else None:
    a comparison of long runs (the whole Azure trace, four policies) otherwise sits silent."""
    import sys

    from simbatch.sweep.progress import Progress

    return Progress(total) if sys.stderr.isatty() and total > 1 else None


def describe_gpus(summary: dict) -> str:
    """``a100-80gb``, or ``2 x h100-sxm + 2 x a100-80gb`` for a mixed cluster (from the per-replica list)."""
    counts: dict[str, int] = {}
    for r in summary.get("replicas") or []:
        counts[r["hardware"]] = counts.get(r["hardware"], 0) + 1
    if len(counts) < 2:
        return summary["hardware"]["name"]
    return " + ".join(f"{n} x {name}" for name, n in counts.items())
