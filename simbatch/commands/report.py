"""``simbatch report``: a readable HTML and Markdown report of a results folder."""

from __future__ import annotations

from pathlib import Path

NAME = "report"
HELP = "write an HTML and a Markdown report of a run, compare or sweep output folder"


def add_arguments(p) -> None:
    p.add_argument("results", type=Path, metavar="DIR",
                   help="a `simbatch run`, `simbatch compare` or `simbatch sweep` output folder")
    p.add_argument("--out", type=Path, help="folder for report.html, report.md and report_files/ (default: DIR)")


def run(args) -> None:
    from simbatch.report.html import write_report

    path = write_report(args.results, args.out)
    print(f"wrote {path} ({path.stat().st_size:,} bytes), {path.parent / 'report.md'} and "
          f"{path.parent / 'report_files'}/")
