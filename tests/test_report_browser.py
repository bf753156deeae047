"""The reports in a real headless browser (issue 15, item 6): at 1400 px wide no table needs a
scrollbar, the page does not scroll sideways, every section shows a table or a figure and
every figure loads. Needs Chromium or Google Chrome (Debian: apt-get install chromium); where
none is installed every test here skips and says so. tests/test_report_layout.py checks the
same pages without a browser."""

from __future__ import annotations

import html as htmllib
import json
import os
import shutil
import struct
import subprocess

import pytest
from reportkit import make_compare_report, make_sweep_report, widest_comparison

from simbatch.report.figures import Section
from simbatch.report.html import render_html

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
WIDTH, HEIGHT = 1400, 1000
# Run in the page once it has loaded; --dump-dom then prints the DOM with the result in it.
CHECK = """<script>
window.addEventListener('load', () => {
  const out = {
    viewport: window.innerWidth,
    page_width: document.documentElement.scrollWidth,
    overflowing: [...document.querySelectorAll('.scroll')]
      .filter(e => e.scrollWidth > e.clientWidth + 1)
      .map(e => (e.closest('section') || {}).id + ': ' + e.scrollWidth + ' > ' + e.clientWidth),
    empty: [...document.querySelectorAll('section')].filter(s => !s.querySelector('table, img')).map(s => s.id),
    broken_images: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length,
    sections: document.querySelectorAll('section').length,
  };
  document.body.setAttribute('data-check', JSON.stringify(out));
});
</script>"""


def find_browser() -> str | None:
    """A Chromium-family browser: $SIMBATCH_BROWSER, else the first of BROWSERS on PATH."""
    given = os.environ.get("SIMBATCH_BROWSER")
    if given:
        return shutil.which(given) or given
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


BROWSER = find_browser()
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason=f"no headless browser: none of {', '.join(BROWSERS)} is on PATH (Debian: apt-get "
                            "install chromium; or set SIMBATCH_BROWSER); tests/test_report_layout.py checks "
                            "the same HTML without one")


def browse(page, tmp_path, *args: str) -> subprocess.CompletedProcess:
    """Open ``page`` in the headless browser at WIDTH x HEIGHT with extra ``args``."""
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WIDTH},{HEIGHT}",
           "--virtual-time-budget=10000", *args, page.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr[-2000:]}"
    return done


def measure(report_html, tmp_path) -> dict:
    """What CHECK found in a copy of the report with the script added."""
    probe = tmp_path / "probe.html"
    probe.write_text(report_html.read_text(encoding="utf-8").replace("</body>", CHECK + "</body>"),
                     encoding="utf-8")
    dom = browse(probe, tmp_path, "--dump-dom").stdout
    start = dom.find('data-check="')
    assert start >= 0, f"the check script did not run; DOM starts: {dom[:500]}"
    value = dom[start + len('data-check="'):dom.index('"', start + len('data-check="'))]
    return json.loads(htmllib.unescape(value))


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    base = tmp_path_factory.mktemp("browser")
    widest = base / "widest.html"
    widest.write_text(render_html([Section("comparison", "Comparison table", tables=[widest_comparison()])],
                                  "widest comparison"), encoding="utf-8")
    return {"compare": make_compare_report(base / "compare") / "report.html",
            "sweep": make_sweep_report(base / "sweep") / "report.html", "widest": widest}


@pytest.mark.parametrize("which", ["compare", "sweep", "widest"])
def test_report_fits_1400_px_and_every_section_shows_something(which, reports, tmp_path):
    got = measure(reports[which], tmp_path)
    assert got["viewport"] == WIDTH, got
    assert got["page_width"] <= WIDTH, got
    assert not got["overflowing"], got
    assert not got["empty"] and got["sections"] >= 1, got
    assert got["broken_images"] == 0, got


@pytest.mark.parametrize("which", ["compare", "sweep"])
def test_screenshot_at_1400_px(which, reports, tmp_path):
    shot = tmp_path / f"{which}.png"
    browse(reports[which], tmp_path, f"--screenshot={shot}")
    assert shot.is_file() and png_size(shot) == (WIDTH, HEIGHT)
