"""The Markdown report: ``report.md`` with its figures as PNG files in ``report_files/``."""

from __future__ import annotations

import re

from simbatch.report.figures import Section, Table
from simbatch.report.table import render

FILES_DIR = "report_files"
# A code span as CommonMark reads one only when both its backticks stand alone (a longer run
# such as ``` `` ``` opens or closes another kind of span), and a '<' that would open raw HTML
# (a tag, closing tag, comment or declaration) or an autolink.
CODE_SPAN = re.compile(r"(?<!`)`[^`\n]+`(?!`)")
HTML_START = re.compile(r"<(?=[A-Za-z/!?])")


def text(value) -> str:
    """``value`` as Markdown text that shows as written: a '<' that would start raw HTML (a
    model or variant name such as ``<script>``) gets a backslash, as the HTML report escapes it;
    inside a code span it is shown literally anyway, so it is left as it is there."""
    value, out, at = str(value), [], 0
    for span in CODE_SPAN.finditer(value):
        out += [HTML_START.sub(r"\\<", value[at:span.start()]), span.group()]
        at = span.end()
    return "".join(out + [HTML_START.sub(r"\\<", value[at:])])


def _cell(value) -> str:
    # A '|' would end the cell; a newline would end the row.
    return text(value).replace("|", "\\|").replace("\n", " ")


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
    return f"**{text(table.caption)}**\n\n{body}" if table.caption else body


def figure_path(name: str) -> str:
    """Where a figure's PNG lies, relative to ``report.md``."""
    return f"{FILES_DIR}/{name}.png"


def render_markdown(sections: list[Section], title: str) -> str:
    """The whole report as Markdown; figures are linked as ``report_files/<name>.png``."""
    contents = " · ".join(f"[{text(s.title)}](#{s.slug})" for s in sections)
    parts = [f"# {text(title)}", "", f"Contents: {contents}", ""]
    for s in sections:
        parts += [f'<a id="{s.slug}"></a>', "", f"## {text(s.title)}", ""]
        for note in s.notes:
            parts += [text(note), ""]
        for t in s.tables:
            parts += [table_markdown(t, numbers=t.numbers), ""]
        for f in s.figures:
            parts += [f"![{text(f.caption)}]({figure_path(f.name)})", ""]
    return "\n".join(parts)
