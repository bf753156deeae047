"""Run outputs on disk (all or nothing), terminal/Markdown tables and the comparison figure."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from simbatch.metrics import comparison_table, request_table, steps_table, summarize
from simbatch.metrics.summary import SUMMARY_KEYS
from simbatch.report import (format_comparison, format_comparison_markdown, format_summary, plot_comparison,
                             write_comparison, write_run)
from simbatch.eventlog import EventLog
from simbatch.report import outputs

from logkit import PEAKS, three_requests, workload

RUN_FILES = {"summary.json", "requests.csv", "steps.csv", "run.log"}


@pytest.fixture()
def run():
    log, wl = three_requests()
    return summarize(log, wl, slo={"ttft_ms": 20}, **PEAKS), request_table(log, wl), steps_table(log)


def test_write_run_writes_four_files(tmp_path, run):
    summary, req, steps = run
    out = tmp_path / "a" / "run1"
    write_run(out, summary, req, steps, ["started", "done"])
    assert {p.name for p in out.iterdir()} == RUN_FILES
    loaded = json.loads((out / "summary.json").read_text())
    assert tuple(loaded) == SUMMARY_KEYS
    assert loaded["ttft_ms"]["p99"] == pytest.approx(24.85)
    assert (out / "summary.json").read_text().startswith('{\n  "num_requests": 3')  # indent 2
    back = pd.read_csv(out / "requests.csv")
    assert list(back.columns) == list(req.columns) and len(back) == 3
    assert np.isnan(back["finish_s"][2])
    assert len(pd.read_csv(out / "steps.csv")) == 4
    assert (out / "run.log").read_text() == "started\ndone\n"
    assert [p.name for p in out.parent.iterdir()] == ["run1"]  # no temp folder left


def test_nan_and_inf_become_null(tmp_path, run):
    summary, req, steps = run
    summary = dict(summary, mfu=float("nan"), mbu=float("inf"), completed=np.int64(2))
    write_run(tmp_path, summary, req, steps, [])
    loaded = json.loads((tmp_path / "summary.json").read_text())
    assert loaded["mfu"] is None and loaded["mbu"] is None and loaded["completed"] == 2


def test_existing_files_are_replaced(tmp_path, run):
    summary, req, steps = run
    (tmp_path / "run.log").write_text("old\n")
    (tmp_path / "keep.txt").write_text("mine")
    write_run(tmp_path, summary, req, steps, ["new"])
    assert (tmp_path / "run.log").read_text() == "new\n"
    assert (tmp_path / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("writer", ["_write_json", "_write_csv", "_write_text"])
def test_failed_write_leaves_nothing_behind(tmp_path, run, monkeypatch, writer):
    summary, req, steps = run
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("previous")

    def broken(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(outputs, writer, broken)
    with pytest.raises(OSError, match="disk full"):
        write_run(out, summary, req, steps, ["x"])
    assert [p.name for p in out.iterdir()] == ["summary.json"]
    assert (out / "summary.json").read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # temp folder removed


def test_failed_write_does_not_create_out_dir(tmp_path, run, monkeypatch):
    monkeypatch.setattr(outputs, "_write_text", lambda *_: (_ for _ in ()).throw(OSError("no")))
    with pytest.raises(OSError):
        write_run(tmp_path / "new", *run, ["x"])
    assert list(tmp_path.iterdir()) == []


def test_write_comparison(tmp_path, run):
    table = comparison_table({"fcfs": run[0]})
    path = write_comparison(tmp_path / "cmp", table)
    assert path.name == "comparison.csv"
    back = pd.read_csv(path)
    assert back["policy"].tolist() == ["fcfs"] and list(back.columns) == list(table.columns)


def test_format_summary(run):
    text = format_summary(run[0], "fcfs on toy")
    assert text.splitlines()[0] == "== fcfs on toy =="
    for word in ("req/s", "TTFT", "TPOT", "ITL", "E2EL", "queue", "goodput", "SLO attainment 33.3 %",
                 "padding waste 22.2 %", "busy 88.9 %", "MFU 10.0 %", "MBU 5.0 %", "KV peak 50.0 %",
                 "preemptions   1"):
        assert word in text, word
    ttft_line = next(line for line in text.splitlines() if line.startswith("TTFT"))
    assert ttft_line.split()[:4] == ["TTFT", "17.5", "17.5", "23.5"]


def test_format_summary_with_no_data():
    s = summarize(EventLog(0, 1), workload([], [], []), slo=None, **PEAKS)
    assert "TTFT" in format_summary(s, "empty")


def test_format_comparison_plain_and_markdown(run):
    table = comparison_table({"fcfs": run[0], "static-batching": run[0]})
    plain = format_comparison(table).splitlines()
    assert plain[0].startswith("policy") and "TTFT p99 ms" in plain[0] and "MFU %" in plain[0]
    assert set(plain[1]) <= {"-", " "}
    assert plain[2].startswith("fcfs ") and plain[3].startswith("static-batching")
    assert len({len(line) for line in plain[:1] + plain[2:]}) == 1  # aligned columns
    md = format_comparison_markdown(table).splitlines()
    assert all(line.startswith("| ") and line.endswith(" |") for line in md)
    assert md[1].startswith("| :-") and len(md) == 4


def test_plot_comparison_writes_png(tmp_path, run):
    other = dict(run[0], tpot_ms={"mean": None, "median": None, "p90": None, "p99": None})
    path = plot_comparison({"fcfs": run[0], "static": other}, tmp_path / "fig" / "cmp.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
