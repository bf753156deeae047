"""``simbatch run``: simulate one scenario, print its summary, write its files."""

from __future__ import annotations

import sys
from pathlib import Path

from simbatch.commands.common import add_format_argument, add_scenario_arguments, check_format, load, print_notes

NAME = "run"
HELP = "simulate one scenario"


def add_arguments(p) -> None:
    add_scenario_arguments(p)
    add_format_argument(p)
    p.add_argument("--trace-out", type=Path, metavar="FILE.json",
                   help="also write a Perfetto / chrome://tracing timeline of the run (docs/trace_export.md)")
    p.add_argument("--check-fast-path", action="store_true",
                   help="also run every step through the policy and check the fast path gave the same "
                        "results (for policy writers; docs/policies.md, 'Writing a policy')")


def run(args) -> None:
    from simbatch.runs.one import run as run_scenario

    check_format(args)
    scenario = load(args)
    if args.trace_out:
        from simbatch.report.perfetto import check_trace_path

        check_trace_path(args.trace_out)  # a bad path fails before the run, and before --out writes
    out = run_scenario(scenario)
    from simbatch.report import format_summary  # after the run: nothing it imports delays the simulation

    print_notes(out.messages)
    print(format_summary(out.summary, title=f"{scenario.name}: {out.summary['policy']['kind']}"))
    print(policy_line(scenario))
    print("\n".join(budget_lines(out.result.groups)))
    if args.out:
        written = out.write(args.out, args.format)
        print(f"wrote {args.out}/{', '.join(p.name for p in written)}")
    if args.trace_out:
        from simbatch.report.perfetto import truncation_notes, write_trace

        path = write_trace(out, args.trace_out)
        print_notes(truncation_notes(out), "note [trace]")
        print(f"wrote {path} (open in https://ui.perfetto.dev)")
    if args.check_fast_path:
        check_fast_path(scenario)


def policy_line(scenario) -> str:
    """The knobs the run's policy was given and where they came from, e.g. ``policy:
    chunked_prefill (max_num_seqs 256, chunk_size 512) from policies.chunked_prefill``
    (:func:`simbatch.scenario.overrides.policy_knobs`; knobs not shown are at the kind's defaults)."""
    kind = scenario.policy.kind
    knobs = ", ".join(f"{k} {v}" for k, v in scenario.data["policy"].items() if k != "kind")
    source = scenario.policy_source
    if source.startswith("defaults"):
        source = f"the kind's defaults (the scenario has no policies.{kind}){source[len('defaults'):]}"
    return f"policy: {kind} ({knobs or 'every knob at its default'}) from {source}"


def budget_lines(groups) -> list[str]:
    """The KV budget of each replica group or pool, one line per distinct budget (its groups
    or pools named where the run has more than one)."""
    labels: dict = {}
    for g in groups:
        if g.kv_budget is not None:
            name = getattr(g, "pool", "") or f"group {g.index}"
            labels.setdefault((g.kv_budget, g.gpu.name, g.tensor_parallel), []).append(name)
    return [f"{', '.join(names) + ': ' if len(groups) > 1 else ''}{gpu}, TP {tp}: {budget.line()}"
            for (budget, gpu, tp), names in labels.items()]


def check_fast_path(scenario) -> None:
    """Print whether the fast path gave the step-by-step engine's results; exit 1 if not."""
    from simbatch.engine.check import fast_path_difference

    difference = fast_path_difference(scenario)
    if difference is not None:
        print(f"fast path: DIFFERS from the step-by-step engine: {difference}", file=sys.stderr)
        sys.exit(1)
    print("fast path: identical to the step-by-step engine (every step, request and token run)")
