"""Run outputs on disk (all or nothing), terminal/Markdown tables and the comparison figure."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from simbatch.cli import main
from simbatch.metrics import comparison_table, request_table, steps_table, summarize
from simbatch.metrics.summary import SUMMARY_KEYS
from simbatch.errors import SimbatchError
from simbatch.report import (format_comparison, format_comparison_markdown, format_summary, plot_comparison,
                             write_run)
from simbatch.core.eventlog import EventLog
from simbatch.report import outputs

from logkit import PEAKS, three_requests, workload

RUN_FILES = {"summary.json", "requests.csv", "steps.csv", "run.log", outputs.MARKER}


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


def test_an_earlier_output_is_replaced_whole_and_a_folder_of_other_files_is_refused(tmp_path, run):
    summary, req, steps = run
    out = tmp_path / "run"
    write_run(out, summary, req, steps, ["old"])
    (out / "controller.csv").write_text("from the earlier run")  # e.g. a file only that run wrote
    write_run(out, summary, req, steps, ["new"])
    assert (out / "run.log").read_text() == "new\n"
    assert {p.name for p in out.iterdir()} == RUN_FILES  # nothing of the earlier run survives
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(SimbatchError, match="holds files simbatch did not write"):
        write_run(mine, summary, req, steps, ["x"])
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_what_a_killed_writer_leaves_is_cleaned_up_or_restored(tmp_path, run):
    """kill -9 leaves hidden .NAME.tmp-PID-* / .NAME.old-PID-* siblings; the next write removes
    those of dead processes, and puts back a previous output the kill left aside."""
    import subprocess
    import sys

    summary, req, steps = run
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    out = tmp_path / "run"
    write_run(out, summary, req, steps, ["previous"])
    stale_tmp = tmp_path / f".run.tmp-{dead}-abc"
    (stale_tmp / "half").mkdir(parents=True)
    aside = tmp_path / f".run.old-{dead}-def"
    aside.mkdir()
    out.rename(aside / "previous")  # killed between the swap's two renames: no out_dir
    live = tmp_path / f".run.tmp-{os.getpid()}-ghi"  # a live writer's: left alone
    live.mkdir()
    outputs.clean_stale(out)
    assert (out / "run.log").read_text() == "previous\n"  # restored, complete
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run", live.name])


@pytest.mark.parametrize("writer", ["_write_json", "_write_csv", "_write_text"])
def test_failed_write_leaves_nothing_behind(tmp_path, run, monkeypatch, writer):
    summary, req, steps = run
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("previous")
    (out / outputs.MARKER).write_text("")

    def broken(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(outputs, writer, broken)
    with pytest.raises(outputs.WriteFailed, match=r"cannot write [a-z.]+ \(disk full\); nothing was written"):
        write_run(out, summary, req, steps, ["x"])
    assert sorted(p.name for p in out.iterdir()) == [outputs.MARKER, "summary.json"]
    assert (out / "summary.json").read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # temp folder removed


def test_failed_write_does_not_create_out_dir(tmp_path, run, monkeypatch):
    monkeypatch.setattr(outputs, "_write_text", lambda *_: (_ for _ in ()).throw(OSError("no")))
    with pytest.raises(outputs.WriteFailed):  # one line, a SimbatchError
        write_run(tmp_path / "new", *run, ["x"])
    assert list(tmp_path.iterdir()) == []


def test_a_comparison_is_written_as_one_folder(tmp_path, run):
    """An interrupted compare left new policy folders beside the old comparison.csv; now the
    folder is swapped whole, so a second comparison leaves no policy of the first."""
    from simbatch.api import compare, load_scenario, write_compare

    scenario = load_scenario("classroom")
    write_compare(tmp_path / "cmp", *compare(scenario, ["static", "dynamic"], jobs=1))
    runs, table = compare(scenario, ["continuous"], jobs=1)
    write_compare(tmp_path / "cmp", runs, table)
    assert sorted(p.name for p in (tmp_path / "cmp").iterdir()) == sorted(
        ["continuous", "comparison.csv", "comparison.png", outputs.MARKER])
    back = pd.read_csv(tmp_path / "cmp" / "comparison.csv")
    assert back["policy"].tolist() == ["continuous"] and list(back.columns) == list(table.columns)
    assert (tmp_path / "cmp" / "continuous" / "summary.json").is_file()


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
    plain = format_comparison(table, wide=True).splitlines()
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



def _policies_in(folder):
    table = pd.read_csv(folder / "comparison.csv")
    runs = {p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")}
    return set(table["policy"]), runs


def test_a_compare_killed_at_any_step_of_its_write_leaves_one_complete_comparison(tmp_path):
    """SIGKILL at every file write and every rename, in turn, while a second comparison
    replaces a first: afterwards (once a later write has cleaned up) the folder is the first
    or the second comparison, whole, never a mix; nothing hidden is left beside it."""
    import signal

    from simbatch.api import compare, load_scenario, write_compare

    scenario = load_scenario("classroom")
    first = compare(scenario, ["static", "dynamic"], jobs=1)
    second = compare(scenario, ["continuous", "chunked_prefill"], jobs=1)
    outcomes = []
    for k in range(1, 100):
        base = tmp_path / str(k)
        out = base / "cmp"
        write_compare(out, *first)
        pid = os.fork()
        if pid == 0:  # the child writes the second comparison and is killed at its k-th step
            step = [0]

            def killing(fn):
                def wrapped(*args, **kwargs):
                    step[0] += 1
                    if step[0] == k:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return fn(*args, **kwargs)
                return wrapped

            os.rename = killing(os.rename)
            for name in ("_write_json", "_write_csv", "_write_text"):
                setattr(outputs, name, killing(getattr(outputs, name)))
            try:
                write_compare(out, *second)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status)
        outputs.clean_stale(out)
        table, runs = _policies_in(out)
        assert table == runs, k
        outcomes.append(runs == {"continuous", "chunked_prefill"})
        assert [p.name for p in base.iterdir()] == ["cmp"], k
        if not killed:
            break
    # Killed before the swap, the first comparison stays; from the swap's last rename on, the second.
    assert outcomes == sorted(outcomes) and not outcomes[0] and outcomes[-1] and len(outcomes) > 8


@pytest.mark.parametrize("value, num, ms", [
    (0.000185, "0.000185", "0.000185"), (1.83e-5, "0.0000183", "0.0000183"), (0.5, "0.500", "0.500"), (0.76, "0.760", "0.760"),
    (12.3456, "12.3", "12.3"), (1234.5, "1,234", "1,234"), (9999.0, "9,999", "9,999"),
    (10_000.0, "10,000", "10.0 s"), (2_012_090.0, "2,012,090", "2,012 s"), (None, "-", "-")])
def test_one_number_format_never_scientific_and_long_durations_in_seconds(value, num, ms):
    from simbatch.report.table import fmt_ms, fmt_num

    assert fmt_num(value) == num and fmt_ms(value) == ms


def test_a_latency_column_reads_in_one_unit():
    """A column of half-hour queues beside sub-second ones reads in seconds, its header
    saying so (issue 33: 'TTFT p50 ms' showed '1,980 s'); a column under 10 s stays in ms."""
    from simbatch.report.table import column_cells, comparison_cells

    assert column_cells("TTFT p50 ms", [75.0, 2_016_741.0, None], "ms") == ("TTFT p50 s", ["0.0750", "2,017", "-"])
    assert column_cells("TPOT p50 ms", [20.6, 47.5], "ms") == ("TPOT p50 ms", ["20.6", "47.5"])
    table = pd.DataFrame({"policy": ["a", "b"], "ttft_p50_ms": [75.0, 2_016_741.0], "tpot_p50_ms": [20.6, 47.5]})
    headers, rows = comparison_cells(table)
    assert "TTFT p50 s" in headers and "TPOT p50 ms" in headers
    assert not any(cell.endswith(" s") for row in rows for cell in row)


def test_without_pyarrow_tables_are_csv_and_parquet_asked_for_is_one_line(tmp_path, monkeypatch, capsys):
    """pyarrow is the optional ``parquet`` extra: without it a run writes CSV, a sweep writes
    sweep.csv with a note, and --format parquet is refused before anything runs."""
    import simbatch.report.parquet_table as pt
    from simbatch.cli import main

    monkeypatch.setattr(pt.importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else object())
    assert not pt.has_pyarrow()
    assert main(["run", "classroom", "--format", "parquet", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'simbatch[parquet]'" in err and "\n" not in err and not (tmp_path / "p").exists()
    assert main(["run", "classroom", "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "requests.csv").exists()
    assert main(["sweep", "classroom", "--grid", "workload.rate_scale=1,2", "--executor", "inline",
                 "--out", str(tmp_path / "s")]) == 0
    assert (tmp_path / "s" / "sweep.csv").exists() and not (tmp_path / "s" / "sweep.parquet").exists()
    assert "sweep.parquet not written: pyarrow is not installed" in capsys.readouterr().err


def test_compare_prints_the_core_columns_and_wide_prints_them_all():
    """The comparison table was 222-255 characters wide (issue 33 §3), then narrow only on a
    narrow terminal, so a pipe and the README got all 24 columns (issue 34 §7)."""
    from simbatch.report.table import CORE_COLUMNS, format_comparison

    table = pd.DataFrame({"policy": ["continuous"], "completed": [3000], "request_throughput": [2.44],
                          "ttft_p50_ms": [75.0], "ttft_p99_ms": [372.9], "tpot_p50_ms": [20.6],
                          "tpot_p99_ms": [39.0], "itl_p99_ms": [155.3], "e2el_p50_ms": [3463.0],
                          "slo_attainment": [0.997], "padding_waste_frac": [0.0], "mfu": [0.144], "mbu": [0.533],
                          "preemptions": [0]})
    full = format_comparison(table, wide=True)
    assert "MFU %" in full and "more columns" not in full
    lines = format_comparison(table).splitlines()
    assert lines[0].split("  ")[0] == "policy" and len(CORE_COLUMNS) + 1 <= 8
    assert all(c in lines[0] for c in CORE_COLUMNS) and "MFU %" not in lines[0] and "preempt" not in lines[0]
    assert max(len(line) for line in lines[:-1]) <= 100
    assert lines[-1] == "(16 more columns in comparison.csv; --wide prints them all)"


def test_compare_wide_prints_every_column(capsys):
    assert main(["compare", "classroom", "--policies", "static,continuous", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "MFU %" in out and "KV peak %" in out and "more columns" not in out


# The bundled chat comparison's figures (simbatch compare chat): static and dynamic batching an hour
# behind, continuous and chunked prefill at a tenth of a second; seven-digit values beside three.
CHAT = {"static": (2017420.4, 3994548.9, 47.5, 52.0, 2023683.2, 3999802.3, 123.7),
        "dynamic": (2027377.8, 4004506.2, 47.5, 52.0, 2033640.6, 4009759.7, 123.5),
        "continuous": (75.0, 372.9, 20.6, 39.0, 3463.1, 21593.5, 532.0),
        "chunked_prefill": (102.3, 542.0, 19.0, 33.6, 3198.9, 19760.7, 532.1)}


def _chat_summaries(copies: int = 1) -> dict:
    out = {}
    for i in range(copies):
        for name, (t50, t99, p50, p99, e50, e99, tput) in CHAT.items():
            out[f"{name}-{i}" if copies > 1 else name] = {
                "ttft_ms": {"median": t50, "p99": t99}, "tpot_ms": {"median": p50, "p99": p99},
                "e2el_ms": {"median": e50, "p99": e99}, "output_throughput": tput}
    return out


@pytest.mark.parametrize("copies", [1, 3])  # four policies, and twelve (narrow bars: labels upright)
def test_comparison_value_labels_never_overlap_and_stay_inside(copies):
    import matplotlib.pyplot as plt

    from simbatch.report.plots import comparison_figure

    fig = comparison_figure(_chat_summaries(copies))
    renderer = fig.canvas.get_renderer()
    try:
        for ax in fig.axes:
            boxes = sorted((t.get_window_extent(renderer) for t in ax.texts), key=lambda b: b.x0)
            assert len(boxes) == len(CHAT) * copies * (1 if ax.get_title().startswith("Output") else 2)
            for a, b in zip(boxes, boxes[1:]):  # side by side, at any height
                assert a.x1 < b.x0, (ax.get_title(), a, b)
            assert max(b.y1 for b in boxes) <= ax.bbox.y1 + 0.5, ax.get_title()
            ticks = sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels()), key=lambda b: b.x0)
            assert len(ticks) == len(CHAT) * copies
            for a, b in zip(ticks, ticks[1:]):  # the policies' names on the x axis, side by side
                assert a.x1 < b.x0, (ax.get_title(), a, b)
            assert min(b.y0 for b in ticks) >= 0, "a policy name runs off the figure"
    finally:
        plt.close(fig)


def test_bar_labels_are_short():
    from simbatch.report.plots import bar_label

    assert [bar_label(v) for v in (372.94, 3463.2, 21593.5, 2017420.4, 4004506.2, 999_999.0, 19.0)] == \
        ["372.9", "3,463", "21.6k", "2.02M", "4.00M", "1.00M", "19.0"]
