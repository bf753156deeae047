"""The HTML report, and writing both reports (HTML and Markdown) all or nothing.

``report.html`` is one self-contained file: inline CSS, figures embedded as
base64 PNG, no scripts, fonts or links to anything outside it, so it opens
offline and can be mailed around. ``report.md`` says the same and links the
same PNGs, written beside it in ``report_files/``.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from html import escape
from pathlib import Path

from simbatch.errors import SimbatchError
from simbatch.report.figures import Section, Table, build_sections
from simbatch.report.load import ReportData, load_results
from simbatch.report.markdown import FILES_DIR, figure_path, render_markdown

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;max-width:1250px;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
nav ol{columns:2;font-size:.95em}
.scroll{overflow-x:auto;margin:.8em 0}
table{border-collapse:collapse;font-size:.78em;font-variant-numeric:tabular-nums}
caption{text-align:left;font-weight:600;padding:.3em 0}
th,td{border:1px solid #ccc;padding:.2em .4em;vertical-align:top}
th{background:#f2f2f2}
table.numbers td:not(:first-child){text-align:right}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.9em;color:#555}
"""


def table_html(table: Table, numbers: bool = False) -> str:
    """A :class:`Table` as an HTML table (``numbers``: right-align all but the first column)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>\n" for row in table.rows)
    caption = f"<caption>{escape(table.caption)}</caption>" if table.caption else ""
    cls = ' class="numbers"' if numbers else ""
    return f'<div class="scroll"><table{cls}>{caption}<thead><tr>{head}</tr></thead>\n<tbody>{body}</tbody></table></div>'


def section_html(s: Section) -> str:
    """One ``<section>``: heading, paragraphs, tables, figures (PNG as base64 data URIs)."""
    parts = [f'<section id="{escape(s.slug)}">', f"<h2>{escape(s.title)}</h2>"]
    parts += [f"<p>{escape(n)}</p>" for n in s.notes]
    parts += [table_html(t, numbers=s.slug == "comparison") for t in s.tables]
    for f in s.figures:
        data = base64.b64encode(f.png).decode("ascii")
        parts.append(f'<figure><img alt="{escape(f.caption)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{escape(f.caption)}</figcaption></figure>")
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
    """'simbatch report: <scenario>' (or the folder's name when no run names it)."""
    names = list(dict.fromkeys(str(s.get("scenario")) for s in data.summaries.values() if s.get("scenario")))
    return f"simbatch report: {', '.join(names) or data.folder.name}"


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
