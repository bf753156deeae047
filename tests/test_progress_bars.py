"""Long commands show a live progress bar on a terminal (issue 15 item 2), and nothing extra
elsewhere: ``simbatch compare`` here (the bar itself, and sweep's: tests/test_sweep.py)."""

from __future__ import annotations

import io
import sys

from simbatch.cli import main


class Terminal(io.StringIO):
    """stderr as a terminal would be: the bar redraws in place only when ``isatty()``."""

    def isatty(self) -> bool:
        return True


def test_compare_shows_runs_done_elapsed_and_eta_on_a_terminal(monkeypatch, capsys):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["compare", "classroom", "--policies", "static,continuous", "--jobs", "1"]) == 0
    drawn = [line for line in terminal.getvalue().replace("\r", "\n").splitlines() if line.startswith("[")]
    assert drawn[0].startswith("[....") and "0/2 runs" in drawn[0] and "ETA ?" in drawn[0]
    assert any("1/2 runs" in line for line in drawn)
    assert drawn[-1].startswith("[####") and "2/2 runs" in drawn[-1] and "ETA 0:00" in drawn[-1]
    assert "classroom:" in capsys.readouterr().out  # the table still goes to stdout


def test_compare_draws_no_bar_off_a_terminal(capsys):
    assert main(["compare", "classroom", "--policies", "static,continuous", "--jobs", "1"]) == 0
    assert "runs, elapsed" not in capsys.readouterr().err
