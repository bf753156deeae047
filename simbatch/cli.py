"""The ``simbatch`` command line (subcommands live in :mod:`simbatch.commands`).

User errors print one line (``simbatch: error: <where>: <cause>``) and exit 2,
without a traceback and without writing any output.
"""

from __future__ import annotations

import argparse
import sys

from simbatch.commands import COMMANDS
from simbatch.errors import SimbatchError


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, one subparser per command module."""
    p = argparse.ArgumentParser(prog="simbatch", description="Simulate LLM-inference batching policies.")
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.add_arguments(sub.add_parser(module.NAME, help=module.HELP))
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``simbatch`` console script."""
    args = build_parser().parse_args(argv)
    command = {m.NAME: m for m in COMMANDS}[args.command]
    try:
        command.run(args)
    except SimbatchError as exc:
        if getattr(args, "scenario", None):
            from simbatch.bundled import resolve_scenario_path
            from simbatch.scenario import locate

            exc = locate(exc, resolve_scenario_path(args.scenario), getattr(args, "overrides", []))
        print(f"simbatch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("simbatch: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
