"""How reports read (issue 15, item 6), checked on the HTML itself, without a browser:
tables of figures fit a 1400 px window, inline code is set as code (no raw backticks),
the scenario file is named, no section is empty, and a sweep's report shows the sweep.
tests/test_report_browser.py checks the same pages in a real headless browser."""

import json
import re
import shutil

import pandas as pd
import pytest
import yaml
from reportkit import ROOT, make_compare_report, make_sweep_report, min_table_width, numbers_tables, widest_comparison

from simbatch.cli import main
from simbatch.report.html import CSS, MAX_WIDTH_PX, table_html

SECTION = re.compile(r'<section id="([^"]+)">(.*?)</section>', re.S)


@pytest.fixture(scope="module")
def compare_dir(tmp_path_factory):
    return make_compare_report(tmp_path_factory.mktemp("compare") / "out")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    return make_sweep_report(tmp_path_factory.mktemp("sweep") / "out")


def page(folder) -> str:
    return (folder / "report.html").read_text(encoding="utf-8")


def sections(html: str) -> dict[str, str]:
    return {slug: body for slug, body in SECTION.findall(html)}


def test_the_page_fits_1400_px():
    # the text column and the page's side padding (1em each side) within a 1400 px window
    assert f"max-width:{MAX_WIDTH_PX}px" in CSS and MAX_WIDTH_PX + 2 * 16 <= 1400


@pytest.mark.parametrize("which", ["compare", "sweep", "widest"])
def test_tables_of_figures_fit_the_text_column(which, compare_dir, sweep_dir):
    tables = {"compare": lambda: numbers_tables(page(compare_dir)), "sweep": lambda: numbers_tables(page(sweep_dir)),
              "widest": lambda: [table_html(widest_comparison())]}[which]()
    assert tables, "no table of figures"
    for table in tables:
        assert min_table_width(table) <= MAX_WIDTH_PX, (which, round(min_table_width(table)))


def test_table_css_wraps_headers_and_keeps_figures_whole(compare_dir):
    html = page(compare_dir)
    assert re.search(r'<div class="scroll"><table class="numbers">', html)
    assert "table.numbers td:not(:first-child){text-align:right;white-space:nowrap}" in CSS
    assert "goodput/<wbr>GPU" in html and "<td>chunked_<wbr>prefill</td>" in html  # may wrap there
    assert "prefix hit" not in sections(html)["comparison"]  # an optional column no run has


@pytest.mark.parametrize("which", ["compare", "sweep"])
def test_no_raw_backticks_inline_code_instead(which, compare_dir, sweep_dir):
    folder = compare_dir if which == "compare" else sweep_dir
    html = page(folder)
    assert "`" not in html
    assert "<code>simbatch " in html
    assert "`simbatch " in (folder / "report.md").read_text()  # Markdown keeps its own code marks


@pytest.mark.parametrize("which", ["compare", "sweep"])
def test_every_section_has_a_table_or_a_figure(which, compare_dir, sweep_dir):
    html = page(compare_dir if which == "compare" else sweep_dir)
    found = sections(html)
    assert len(found) >= 3
    empty = [slug for slug, body in found.items() if "<table" not in body and "<img" not in body]
    assert not empty, empty
    nav = re.findall(r'<li><a href="#([^"]+)">', html)
    assert nav == list(found)


def test_compare_report_names_its_scenario_file_and_leaves_out_the_sweep_sections(compare_dir):
    html = page(compare_dir)
    assert str(ROOT / "scenarios" / "classroom.yaml") in html
    assert "load-curves" not in sections(html) and "sweep" not in sections(html)
    assert "Not in this report: Sweep table and Load curves" in html


def test_a_recorded_scenario_file_is_the_one_named(compare_dir, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(compare_dir, folder)
    for summary in folder.glob("*/summary.json"):  # as a run that records its file writes it
        data = json.loads(summary.read_text())
        data["scenario"], data["scenario_file"] = "mine", "/somewhere/mine.yaml"
        summary.write_text(json.dumps(data))
    assert main(["report", str(folder)]) == 0
    reproducibility = sections(page(folder))["reproducibility"]
    assert "Scenario mine, from /somewhere/mine.yaml." in reproducibility
    assert "<td>scenario file</td><td>/somewhere/mine.yaml</td>" in reproducibility


def test_an_unrecorded_file_of_an_unknown_name_is_said_to_be_unknown(compare_dir, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(compare_dir, folder)
    for summary in folder.glob("*/summary.json"):  # as an earlier simbatch wrote it: a name, no file
        data = json.loads(summary.read_text())
        data["scenario"] = "no-such-bundled-scenario"
        data.pop("scenario_file", None)
        summary.write_text(json.dumps(data))
    assert main(["report", str(folder)]) == 0
    assert "from not recorded (summary.json records the name only: no-such-bundled-scenario)" in page(folder)


def test_sweep_report_shows_the_sweep(sweep_dir):
    html = page(sweep_dir)
    found = sections(html)
    assert list(found) == ["sweep", "load-curves", "reproducibility"]  # results first
    table = re.search(r"<table class=\"numbers\">.*?</table>", found["sweep"], re.S).group(0)
    heads = re.findall(r"<th>(.*?)</th>", table)
    assert heads[:2] == ["policy.<wbr>kind", "workload.<wbr>rate_<wbr>scale"] and "TTFT p99 ms" in heads
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td>", table)
    sweep = pd.read_csv(sweep_dir / "sweep.csv")
    assert [(k.replace("<wbr>", ""), float(s)) for k, s in rows] == list(zip(sweep["policy.kind"],
                                                                           sweep["workload.rate_scale"]))
    source = yaml.safe_load((sweep_dir / "sweep.yaml").read_text())["source"]
    assert f"Scenario chat, from {source} (from sweep.yaml)." in found["reproducibility"]
    assert "<td>workload.rate_scale</td><td>0.5, 2</td>" in found["reproducibility"]
    assert "<title>simbatch report: chat sweep</title>" in html
    assert "Not in this report: Comparison table, Latency CDFs" in found["sweep"]  # the first section
    assert "nothing to draw" not in html


def test_a_sweep_over_another_field_draws_curves_over_it(sweep_dir, tmp_path):
    folder = tmp_path / "seqs"
    folder.mkdir()
    sweep = pd.read_csv(sweep_dir / "sweep.csv")
    sweep = sweep.rename(columns={"workload.rate_scale": "policy.max_num_seqs"})
    sweep["policy.max_num_seqs"] = sweep["policy.max_num_seqs"].map({0.5: 8, 2.0: 64})
    sweep.to_csv(folder / "sweep.csv", index=False)
    assert main(["report", str(folder)]) == 0
    html = page(folder)
    assert "<h2>Sweep curves over policy.max_num_seqs</h2>" in html
    assert (folder / "report_files" / "sweep-curves.png").stat().st_size > 10_000
