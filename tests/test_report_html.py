"""`simbatch report`: a self-contained HTML report and a Markdown one, from run and compare folders."""

import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simbatch.cli import main
from simbatch.report.figures_latency import goodput_curve
from simbatch.report.figures_series import binned_means
from simbatch.report.figures_timeline import assign_slots, batch_spans
from simbatch.report.load import load_results

ROOT = Path(__file__).resolve().parents[1]
CLASSROOM = str(ROOT / "scenarios" / "classroom.yaml")
CHAT = str(ROOT / "scenarios" / "chat.yaml")
SECTIONS = ("Reproducibility", "Comparison table", "Latency CDFs", "over time", "Step timeline", "Goodput vs SLO")
VOID = {"meta", "img", "br", "hr", "link", "input", "source", "wbr", "col", "area", "base", "embed", "track"}


class TagChecker(HTMLParser):
    """Checks that tags nest and close; collects images, headings and external references."""

    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.images, self.h2, self.external = [], [], [], [], []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("src", "href"):
            if re.match(r"(https?:)?//", attrs.get(key) or ""):
                self.external.append(attrs[key])
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag in ("script", "link", "iframe", "object"):
            self.external.append(tag)
        if tag not in VOID:
            self.stack.append(tag)
        self._in_h2 = tag == "h2"

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
        else:
            self.stack.pop()
        self._in_h2 = False

    def handle_data(self, data):
        if self._in_h2:
            self.h2.append(data)


def parse(path: Path) -> TagChecker:
    checker = TagChecker()
    checker.feed(path.read_text(encoding="utf-8"))
    checker.close()
    return checker


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    out = tmp_path_factory.mktemp("classroom")
    assert main(["compare", CLASSROOM, "--out", str(out), "--report"]) == 0
    return out


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("chat") / "run"
    assert main(["run", CHAT, "--set", "workload.synthetic.num_requests=200", "--out", str(out)]) == 0
    return out


def check_report(folder: Path, num_figures: int, sections=SECTIONS) -> TagChecker:
    html = parse(folder / "report.html")
    assert not html.errors and not html.stack, (html.errors, html.stack)
    assert not html.external, html.external
    assert not re.search(r"https?://", (folder / "report.html").read_text()), "no external references"
    for title in sections:
        assert any(title in h for h in html.h2), (title, html.h2)
    assert len(html.images) == num_figures
    assert all(src.startswith("data:image/png;base64,") for src in html.images)
    md = (folder / "report.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(linked) == num_figures
    for link in linked:
        assert (folder / link).is_file() and (folder / link).read_bytes()[:4] == b"\x89PNG"
    for title in sections:
        assert re.search(rf"^## .*{title}", md, re.MULTILINE), title
    return html


def test_compare_report_is_self_contained(classroom):
    # CDFs, time series, timeline, goodput; no sweep here: no empty sweep sections, and the first says why
    html = check_report(classroom, 4)
    assert not any("Load curves" in h or "Sweep" in h for h in html.h2), html.h2
    md = (classroom / "report.md").read_text()
    assert re.search(r"Not in this report: Sweep table and Load curves: there is no sweep\.csv", md)
    assert "| static" in md and "classroom" in md and "numpy" in md and "ttft_ms=500" in md
    assert not list(classroom.glob(".report.tmp-*"))


def test_single_run_folder_and_out_option(chat_run, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", str(chat_run), "--out", str(out)]) == 0
    check_report(out, 4)
    assert "report.html" in capsys.readouterr().out
    assert not (chat_run / "report.html").exists()  # --out: nothing written into DIR
    data = load_results(chat_run)
    assert list(data.runs) == ["continuous"] and data.slo == {"ttft_ms": 500.0, "tpot_ms": 50.0}


def test_sweep_csv_adds_load_curves(classroom, tmp_path):
    folder = tmp_path / "swept"
    folder.mkdir()
    for kind in ("static", "continuous"):
        (folder / kind).mkdir()
        for name in ("summary.json", "requests.csv", "steps.csv"):
            (folder / kind / name).write_bytes((classroom / kind / name).read_bytes())
    rows = [{"run_id": f"{k}-{s}", "policy.kind": k, "workload.rate_scale": s, "request_throughput": s * t,
             "ttft_ms.p99": 100 * s ** e, "tpot_ms.p99": 20 + s, "e2el_ms.p99": 1000 * s ** e}
            for k, t, e in (("static", 0.5, 4), ("continuous", 1.0, 1)) for s in (0.5, 1, 2, 4)]
    pd.DataFrame(rows).to_csv(folder / "sweep.csv", index=False)
    assert main(["report", str(folder)]) == 0
    check_report(folder, 5, SECTIONS + ("Sweep table", "Load curves"))
    assert "Not in this report" not in (folder / "report.md").read_text()
    assert (folder / "report_files" / "load-curves.png").stat().st_size > 10_000
    only = tmp_path / "sweep_only"  # sweep.csv alone, no run folders (nor sweep.yaml)
    only.mkdir()
    (only / "sweep.csv").write_bytes((folder / "sweep.csv").read_bytes())
    assert main(["report", str(only)]) == 0
    html = check_report(only, 1, ("Reproducibility", "Sweep table", "Load curves"))
    assert len(html.h2) == 3, html.h2  # nothing else: a sweep keeps no requests or steps
    assert "Latency CDFs, Batch size, queue and KV cache over time, Step timeline and Goodput vs SLO: the folder " \
           "holds a sweep's table" in (only / "report.md").read_text()


@pytest.mark.parametrize("make", ["missing", "empty", "bad_json", "no_steps", "truncated"])
def test_bad_folder_exits_2_with_one_line(classroom, tmp_path, capsys, make):
    folder = tmp_path / "d"
    if make != "missing":
        folder.mkdir()
    if make in ("bad_json", "no_steps", "truncated"):
        for name in ("summary.json", "requests.csv", "steps.csv"):
            (folder / name).write_bytes((classroom / "static" / name).read_bytes())
    if make == "bad_json":
        (folder / "summary.json").write_text("{not json")
    if make == "no_steps":
        (folder / "steps.csv").unlink()
    if make == "truncated":  # a requests.csv cut short was reported as if it were the run
        lines = (folder / "requests.csv").read_text().splitlines(keepends=True)
        (folder / "requests.csv").write_text("".join(lines[:-1]))
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("simbatch: error: ") and "\n" not in err and str(folder) in err
    assert not (folder / "report.html").exists() and not (folder / "report_files").exists()
    if folder.exists():
        assert not list(folder.glob(".report.tmp-*"))


def test_compare_report_needs_out(capsys):
    assert main(["compare", CLASSROOM, "--report"]) == 2
    assert "--out" in capsys.readouterr().err


def test_classroom_static_slots_show_padding(classroom):
    run = load_results(classroom).runs["static"]
    spans = batch_spans(run.steps)
    assert len(spans) == 2  # (128/32, 256/64) then (512/256, 64/16)
    slots = assign_slots(run.requests, run.steps, padded=True).set_index("id")
    assert slots["slot"].nunique() == 2
    short = slots.loc[3]  # the 64/16 request
    assert short["finish"] < short["busy_until"] == pytest.approx(spans["end_s"].iloc[1])
    assert short["busy_until"] == pytest.approx(slots.loc[2, "finish"])  # padded until 512/256 is done
    assert slots.loc[0, "busy_until"] == pytest.approx(spans["end_s"].iloc[0])
    assert slots.loc[0, "busy_until"] > slots.loc[0, "finish"]  # 128/32 waits for 256/64
    unpadded = assign_slots(run.requests, run.steps, padded=False).set_index("id")
    assert (unpadded["busy_until"] == unpadded["finish"]).all()


def test_continuous_reuses_freed_slots(classroom):
    run = load_results(classroom).runs["continuous"]
    slots = assign_slots(run.requests, run.steps, padded=False).set_index("id")
    assert slots["slot"].nunique() == 2
    # a later request takes the slot the first finisher freed, at once
    assert slots.loc[2, "slot"] == slots.loc[0, "slot"] and slots.loc[2, "start"] >= slots.loc[0, "finish"]


def test_binned_means_are_exact_time_averages():
    steps = pd.DataFrame({"replica": [0, 0, 1], "start_s": [0.0, 1.0, 0.0], "end_s": [1.0, 3.0, 4.0],
                          "num_seqs": [2, 4, 1]})
    got = binned_means(steps, "num_seqs", np.array([0.0, 2.0, 4.0]))
    np.testing.assert_allclose(got, [(2 + 4) / 2 + 1, 4 / 2 + 1])  # replica 0 idles in 3..4


def test_goodput_curve_matches_summary_at_the_slo(classroom):
    data = load_results(classroom)
    for run in data.runs.values():
        slo = dict(data.slo)
        ttft = slo.pop("ttft_ms")
        got = goodput_curve(run.requests, run.summary["duration_s"], [ttft], slo)[0]
        assert got == pytest.approx(run.summary["goodput"])


def test_over_time_panels_share_their_time_axis(classroom):
    import matplotlib.pyplot as plt

    from simbatch.report.figures_series import SERIES, plot_time_series

    runs = list(load_results(classroom).runs.values())
    fig, _ = plot_time_series(runs)
    try:
        axes = fig.axes  # row-major: a row per series, a column per run
        grid = [axes[i * len(runs):(i + 1) * len(runs)] for i in range(len(SERIES))]
        for col in range(len(runs)):
            top, *rest = [row[col] for row in grid]
            assert all(top.get_shared_x_axes().joined(top, ax) for ax in rest), runs[col].name
            assert not any(t.get_visible() for t in top.get_xticklabels()), "ticks on the bottom panel only"
    finally:
        plt.close(fig)


def test_results_come_before_the_reproducibility_block(classroom):
    md = (classroom / "report.md").read_text()
    headings = re.findall(r"^## (.*)$", md, re.MULTILINE)
    assert headings[0] == "Comparison table" and headings[-1] == "Reproducibility", headings
    html = parse(classroom / "report.html")
    assert html.h2[0].startswith("Comparison") and html.h2[-1].startswith("Reproducibility"), html.h2
