"""Reports of a run: files on disk, terminal tables, comparison figures."""

from simbatch.report.outputs import write_run
from simbatch.report.plots import plot_comparison
from simbatch.report.table import format_comparison, format_comparison_markdown, format_summary

__all__ = [
    "format_comparison",
    "format_comparison_markdown",
    "format_summary",
    "plot_comparison",
    "write_run",
]
