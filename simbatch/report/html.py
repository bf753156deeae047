"""The HTML report, and writing both reports (HTML and Markdown) all or nothing.

``report.html`` is one self-contained file: inline CSS, figures embedded as
base64 PNG, no scripts, fonts or links to anything outside it, so it opens
offline and can be mailed around. ``report.md`` says the same and links the
same PNGs, written beside it in ``report_files/``.

Tables fit a 1400 px wide window without scrolling: tables of figures use a
compact font, their headers wrap (also after ``/``, ``_`` and ``.``), their
figures do not; text written in backticks is set as inline code.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import tempfile
from html import escape
from pathlib import Path

from simbatch.errors import SimbatchError
from simbatch.report.figures import Section, Table, build_sections
from simbatch.report.load import ReportData, load_results, scenario_names
from simbatch.report.markdown import FILES_DIR, figure_path, render_markdown

MAX_WIDTH_PX = 1320  # the page's text column (in a 1400 px window); tests check that tables fit in it
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;max-width:MAX_WIDTHpx;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
nav ol{columns:2;font-size:.95em}
p,td{overflow-wrap:anywhere}
table:not(.numbers) td:first-child{white-space:nowrap}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.92em;background:#f3f3f3;
padding:0 .2em;border-radius:3px}
.scroll{overflow-x:auto;margin:.8em 0}
table{border-collapse:collapse;font-size:.78em;font-variant-numeric:tabular-nums}
caption{text-align:left;font-weight:600;padding:.3em 0}
th,td{border:1px solid #ccc;padding:.2em .4em;vertical-align:top}
th{background:#f2f2f2}
table.numbers{font-size:.71em}
table.numbers th,table.numbers td{padding:.2em .25em}
table.numbers th{vertical-align:bottom}
table.numbers td{overflow-wrap:normal}
table.numbers td:not(:first-child){text-align:right;white-space:nowrap}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.9em;color:#555}
""".replace("MAX_WIDTH", str(MAX_WIDTH_PX))
CODE = re.compile(r"`([^`\n]+)`")
BREAK_AFTER = re.compile(r"([/_.])(?=\w)")  # a long header or name may wrap after these


def inline(text) -> str:
    """Escaped text with `backticked` spans set as ``<code>``."""
    return CODE.sub(r"<code>\1</code>", escape(str(text)))


def plain(text) -> str:
    """Escaped text without backticks (for attributes such as alt text)."""
    return escape(str(text).replace("`", ""))


def breakable(text) -> str:
    """Escaped text that may wrap after ``/``, ``_`` and ``.`` (``goodput/GPU``, ``chunked_prefill``)."""
    return BREAK_AFTER.sub(r"\1<wbr>", escape(str(text), quote=False))


def table_html(table: Table) -> str:
    """A :class:`Table` as an HTML table; a table of figures (``table.numbers``) compact, its
    headers and first column wrapping (see the module docstring)."""
    cell = breakable if table.numbers else inline
    head = "".join(f"<th>{cell(h)}</th>" for h in table.headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(c) if i == 0 else inline(c)}</td>" for i, c in enumerate(row))
                   + "</tr>\n" for row in table.rows)
    caption = f"<caption>{inline(table.caption)}</caption>" if table.caption else ""
    cls = ' class="numbers"' if table.numbers else ""
    return f'<div class="scroll"><table{cls}>{caption}<thead><tr>{head}</tr></thead>\n<tbody>{body}</tbody></table></div>'


def section_html(s: Section) -> str:
    """One ``<section>``: heading, paragraphs, tables, figures (PNG as base64 data URIs)."""
    parts = [f'<section id="{escape(s.slug)}">', f"<h2>{escape(s.title)}</h2>"]
    parts += [f"<p>{inline(n)}</p>" for n in s.notes]
    parts += [table_html(t) for t in s.tables]
    for f in s.figures:
        data = base64.b64encode(f.png).decode("ascii")
        parts.append(f'<figure><img alt="{plain(f.caption)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{inline(f.caption)}</figcaption></figure>")
    return "\n".join(parts + ["</section>"])


def render_html(sections: list[Section], title: str) -> str:
    """The whole report as one self-contained HTML document."""
    nav = "".join(f'<li><a href="#{escape(s.slug)}">{escape(s.title)}</a></li>' for s in sections)
    body = "\n".join(section_html(s) for s in sections)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            f"<h1>{escape(title)}</h1>\n<nav><ol>{nav}</ol></nav>\n{body}\n</body>\n</html>\n")


def report_title(data: ReportData) -> str:
    """'simbatch report: <scenario>' (or the folder's name when no run names it); a sweep says so."""
    what = ", ".join(scenario_names(data)) or data.folder.name
    if data.capacity is not None and not data.runs and data.sweep is None:
        return f"simbatch report: {what} capacity search"
    return f"simbatch report: {what}{' sweep' if data.sweep is not None and not data.runs else ''}"


def _write_into(tmp: Path, sections: list[Section], title: str) -> None:
    (tmp / FILES_DIR).mkdir()
    for f in (fig for s in sections for fig in s.figures):
        (tmp / figure_path(f.name)).write_bytes(f.png)
    (tmp / "report.md").write_text(render_markdown(sections, title), encoding="utf-8")
    (tmp / "report.html").write_text(render_html(sections, title), encoding="utf-8")


def _move_into_place(tmp: Path, out: Path) -> None:
    """Replace ``report_files/``, ``report.md`` and ``report.html`` in ``out`` with those in ``tmp``."""
    out.mkdir(parents=True, exist_ok=True)
    if (out / FILES_DIR).is_dir():
        os.replace(out / FILES_DIR, tmp / "old_files")  # removed with tmp
    os.replace(tmp / FILES_DIR, out / FILES_DIR)
    for name in ("report.md", "report.html"):
        os.replace(tmp / name, out / name)


def write_report(results_dir, out_dir=None) -> Path:
    """Write ``report.html``, ``report.md`` and ``report_files/`` for a results folder.

    ``out_dir`` defaults to ``results_dir``. Everything is first written into a
    temporary folder beside the output and moved into place only when complete,
    so a failure leaves no half-written report. Returns the HTML file's path.
    """
    data = load_results(results_dir)
    out = Path(out_dir) if out_dir is not None else Path(results_dir)
    sections = build_sections(data)
    title = report_title(data)
    base = out if out.is_dir() else out.parent
    try:
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".report.tmp-", dir=base))
    except OSError as exc:
        raise SimbatchError(str(out), f"cannot write the report: {exc.strerror or exc}") from None
    try:
        _write_into(tmp, sections, title)
        _move_into_place(tmp, out)
    except OSError as exc:
        raise SimbatchError(str(out), f"cannot write the report: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "report.html"
