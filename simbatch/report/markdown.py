"""The Markdown report: ``report.md`` with its figures as PNG files in ``report_files/``."""

from __future__ import annotations

from simbatch.report.figures import Section, Table
from simbatch.report.table import render

FILES_DIR = "report_files"


def _cell(text: str) -> str:
    # A '|' would end the cell; a newline would end the row.
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_markdown(table: Table, numbers: bool = False) -> str:
    """A :class:`Table` as a GitHub Markdown table, its caption in bold above it.

    ``numbers``: align the columns (numbers right) so the source reads as a table
    too; otherwise cells are left as they are (long text would pad every row).
    """
    headers, rows = [_cell(h) for h in table.headers], [[_cell(c) for c in r] for r in table.rows]
    if numbers:
        body = render(headers, rows, markdown=True)
    else:
        lines = [headers, [":--"] * len(headers), *rows]
        body = "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    return f"**{table.caption}**\n\n{body}" if table.caption else body


def figure_path(name: str) -> str:
    """Where a figure's PNG lies, relative to ``report.md``."""
    return f"{FILES_DIR}/{name}.png"


def render_markdown(sections: list[Section], title: str) -> str:
    """The whole report as Markdown; figures are linked as ``report_files/<name>.png``."""
    parts = [f"# {title}", "", "Contents: " + " · ".join(f"[{s.title}](#{s.slug})" for s in sections), ""]
    for s in sections:
        parts += [f'<a id="{s.slug}"></a>', "", f"## {s.title}", ""]
        for note in s.notes:
            parts += [note, ""]
        for t in s.tables:
            parts += [table_markdown(t, numbers=t.numbers), ""]
        for f in s.figures:
            parts += [f"![{f.caption}]({figure_path(f.name)})", ""]
    return "\n".join(parts)
