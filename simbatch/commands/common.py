"""Arguments and terminal output shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_SCENARIO = "classroom"
MAX_NOTES = 3  # per run on the terminal; run.log keeps them all


def bundled_scenario(name: str) -> Path:
    """Path of a scenario in the source tree's ``scenarios/`` (used when SCENARIO is a bare name)."""
    return Path(__file__).resolve().parents[2] / "scenarios" / f"{name}.yaml"


def resolve_scenario_path(arg: str) -> Path:
    """A file path as given, else a bundled scenario by name (``chat``, ``classroom``...)."""
    path = Path(arg)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    bundled = bundled_scenario(arg)
    return bundled if bundled.exists() else path


def add_scenario_arguments(p: argparse.ArgumentParser) -> None:
    """SCENARIO, ``--set KEY=VALUE`` (repeatable) and ``--out DIR``."""
    p.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO,
                   help="scenario YAML file, or the name of a bundled one (default: classroom)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario field, e.g. --set policy.max_num_seqs=64 (repeatable)")
    p.add_argument("--out", type=Path, help="folder for the output files")


def load(args):
    """The scenario named by ``args.scenario`` with ``args.overrides`` applied."""
    from simbatch.scenario import load_scenario

    return load_scenario(resolve_scenario_path(args.scenario), args.overrides)


def print_notes(messages: list[str], prefix: str = "note") -> None:
    """The first few remarks of a run on stderr, and how many more run.log holds."""
    for m in messages[:MAX_NOTES]:
        print(f"{prefix}: {m}", file=sys.stderr)
    if len(messages) > MAX_NOTES:
        print(f"{prefix}: ... and {len(messages) - MAX_NOTES} more (all in run.log with --out)", file=sys.stderr)
