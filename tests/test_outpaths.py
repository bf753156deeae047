"""A bad --out fails before any simulation, with one line and exit 2, in every command (issue 14, item 1)."""

from __future__ import annotations

import sys

import pytest

import simbatch.runs as runs
from simbatch.cli import main

COMMANDS = [["run", "classroom"], ["compare", "classroom", "--jobs", "1"],
            ["capacity", "classroom", "--slo", "ttft_p99_ms=500"], ["sweep", "classroom", "--grid", "seed=0,1"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("bad", ["file", "under_file", "proc"])
def test_bad_out_fails_before_simulating(tmp_path, capsys, monkeypatch, argv, bad):
    # Every in-process simulation goes through simbatch.runs' simulate: make it fail loudly, so
    # the error must come before any (compare may also run policies in worker processes).
    monkeypatch.setattr(runs, "simulate", lambda *a, **k: pytest.fail("simulated before checking --out"))
    (tmp_path / "f.txt").write_text("x")
    out = {"file": tmp_path / "f.txt", "under_file": tmp_path / "f.txt" / "sub", "proc": "/proc/simbatch-x"}[bad]
    if bad == "proc" and not sys.platform.startswith("linux"):
        pytest.skip("/proc exists on Linux only")
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0], err
    assert (tmp_path / "f.txt").read_text() == "x"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc exists on Linux only")
def test_an_unwritable_trace_out_fails_before_simulating(tmp_path, capsys, monkeypatch):
    """--trace-out /proc/x.json passed the name checks and failed after the run with a traceback."""
    monkeypatch.setattr(runs, "simulate", lambda *a, **k: pytest.fail("simulated before checking --trace-out"))
    assert main(["run", "classroom", "--trace-out", "/proc/simbatch-x.json", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["simbatch: error: /proc/simbatch-x.json: cannot write in /proc (No such file or directory)"]
    assert not (tmp_path / "o").exists()
