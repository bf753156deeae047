"""Shared by the report tests: reports to look at, and what a table needs in width.

``min_table_width`` estimates a table's narrowest layout the way a browser lays it
out (auto table layout): each column as wide as its widest unbreakable piece (a
header word, a nowrap figure), plus padding and border. Widths are measured with
DejaVu Sans (shipped with matplotlib), wider than the usual system-ui fonts, so
the estimate errs on the wide side.
"""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path

from simbatch.cli import main
from simbatch.report.figures import Table
from simbatch.report.html import CSS
from simbatch.report.table import COMPARISON_VIEW

ROOT = Path(__file__).resolve().parents[1]
BASE_PX = 16.0  # the browser's default font size; the CSS sizes tables in em of it
# The widest each kind of comparison cell gets in practice (figures from the README's tables).
WIDEST = {"ms": "19,846 s", "num": "0.000185", "pct": "100.0", "int": "1000000"}


def css_em(selector: str, prop: str) -> list[float]:
    """The em values of ``prop`` in the report's CSS rule for ``selector`` (e.g. padding)."""
    rule = re.search(rf"(?:^|}}|\n){re.escape(selector)}\{{([^}}]*)\}}", CSS)
    assert rule, f"no CSS rule for {selector}"
    value = re.search(rf"(?:^|;){re.escape(prop)}:([^;]*)", rule.group(1))
    assert value, f"{selector} sets no {prop}"
    return [float(v) for v in re.findall(r"([\d.]+)em", value.group(1))]


def _font(bold: bool):
    import matplotlib
    from PIL import ImageFont

    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name), size=100)


def numbers_tables(page: str) -> list[str]:
    """The HTML of every table of figures on a report page."""
    return re.findall(r'<table class="numbers">.*?</table>', page, re.S)


def min_table_width(table: str) -> float:
    """Estimated narrowest width in px of a ``<table class="numbers">`` (module docstring)."""
    px = BASE_PX * css_em("table.numbers", "font-size")[0]
    pad = 2 * css_em("table.numbers th,table.numbers td", "padding")[1] * px + 1  # both sides, one border
    regular, bold = _font(False), _font(True)

    def width(font, text: str) -> float:
        return font.getlength(htmllib.unescape(text)) * px / 100

    def widest_piece(font, cell: str) -> float:  # a cell may wrap at spaces and <wbr>
        return max((width(font, p) for p in re.split(r" |<wbr>", cell) if p), default=0.0)

    heads = re.findall(r"<th>(.*?)</th>", table)
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
    total = 0.0
    for i, head in enumerate(heads):
        cells = [r[i] for r in rows]  # figures (all but the first column) never wrap
        body = max((widest_piece(regular, c) if i == 0 else width(regular, c) for c in cells), default=0.0)
        total += max(widest_piece(bold, head), body) + pad
    return total


def widest_comparison() -> Table:
    """Every comparison column (optional ones too), each cell at its widest."""
    headers = ["policy"] + [h for h, _, _ in COMPARISON_VIEW]
    return Table(headers, [["chunked_prefill"] + [WIDEST[k] for _, _, k in COMPARISON_VIEW]], numbers=True)


def make_compare_report(out: Path) -> Path:
    """``simbatch compare classroom --report`` into ``out``."""
    assert main(["compare", str(ROOT / "scenarios" / "classroom.yaml"), "--out", str(out), "--report"]) == 0
    return out


def make_sweep_report(out: Path) -> Path:
    """A small real ``simbatch sweep`` (two policies x two loads) and its report."""
    assert main(["sweep", str(ROOT / "scenarios" / "chat.yaml"), "--set", "workload.synthetic.num_requests=60",
                 "--grid", "policy.kind=continuous,chunked_prefill", "--grid", "workload.rate_scale=0.5,2",
                 "--jobs", "1", "--out", str(out)]) == 0
    assert main(["report", str(out)]) == 0
    return out
