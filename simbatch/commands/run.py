"""``simbatch run``: simulate one scenario, print its summary, write its files."""

from __future__ import annotations

from simbatch.commands.common import add_scenario_arguments, load, print_notes

NAME = "run"
HELP = "simulate one scenario"


def add_arguments(p) -> None:
    add_scenario_arguments(p)


def run(args) -> None:
    from simbatch.api import run as run_scenario
    from simbatch.report import format_summary

    scenario = load(args)
    out = run_scenario(scenario)
    print_notes(out.messages)
    print(format_summary(out.summary, title=f"{scenario.name}: {out.summary['policy']['kind']}"))
    if args.out:
        out.write(args.out)
        print(f"wrote {args.out}/summary.json, requests.csv, steps.csv, run.log")
