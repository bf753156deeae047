"""A bad --out fails before any simulation, with one line and exit 2, in every command (issue 14, item 1)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

import simbatch.runs.one as runs
from simbatch.cli import main

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = [["run", "classroom"], ["compare", "classroom", "--jobs", "1"],
            ["capacity", "classroom", "--slo", "ttft_p99_ms=500"], ["sweep", "classroom", "--grid", "seed=0,1"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("bad", ["file", "under_file", "proc"])
def test_bad_out_fails_before_simulating(tmp_path, capsys, monkeypatch, argv, bad):
    # Every in-process simulation goes through simbatch.runs.one' simulate: make it fail loudly, so
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


# Names that become paths (issue 33): one check, simbatch.files.outpaths.check_path_name, for all of them.
PLAIN_NAMES = ["chat", "v1.2", "64", "a+b", "größer", "x" * 80, "with space"]
NOT_PLAIN = {"../x": "would be a path", "/tmp/x": "would be a path", "a/b": "would be a path",
             "a\\b": "would be a path", ".": "would be a path", "..": "would be a path",
             ".hidden": "would be a path", "new\nline": "would be a path", "nul\x00": "would be a path",
             "x" * 81: "is 81 bytes long", "ü" * 41: "is 82 bytes long", "": "non-empty string",
             "  ": "non-empty string", 7: "non-empty string", None: "non-empty string"}


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_a_plain_name_passes(name):
    from simbatch.files.outpaths import check_path_name

    assert check_path_name(name, "here") == name


@pytest.mark.parametrize("name, cause", list(NOT_PLAIN.items()), ids=[repr(n)[:12] for n in NOT_PLAIN])
def test_a_name_that_is_no_plain_name_is_one_line(name, cause):
    from simbatch.errors import SimbatchError
    from simbatch.files.outpaths import check_path_name

    with pytest.raises(SimbatchError) as err:
        check_path_name(name, "f.yaml: variants")
    assert err.value.where == "f.yaml: variants" and cause in err.value.cause and "\n" not in str(err.value)


def test_a_name_written_beside_it_is_refused():
    from simbatch.errors import SimbatchError
    from simbatch.files.outpaths import check_path_name

    with pytest.raises(SimbatchError, match="'comparison.csv' is the name of a file written beside it"):
        check_path_name("comparison.csv", "here", reserved=("comparison.csv",))


def test_every_name_that_becomes_a_path_meets_the_same_check(tmp_path):
    """The scenario's name, a variant's, a policy's kind and an output folder's entries: one cause."""
    from simbatch.errors import SimbatchError
    from simbatch.files.outpaths import check_path_name
    from simbatch.policies import Policy, register_policy
    from simbatch.report.outputs import write_files
    from simbatch.scenario.spec import from_dict

    base = yaml.safe_load((ROOT / "scenarios" / "classroom.yaml").read_text())
    long = "x" * 81
    with pytest.raises(SimbatchError) as want:
        check_path_name(long, "here")
    causes = []
    for attempt in (lambda: from_dict({**base, "name": long}, "f.yaml"),
                    lambda: from_dict({**base, "variants": {long: {"seed": 1}}}, "f.yaml"),
                    lambda: register_policy(type("Long", (Policy,), {"kind": long, "Params": base_params()})),
                    lambda: write_files(tmp_path / "out", {long: lambda p: p.write_text("x")})):
        with pytest.raises(SimbatchError) as err:
            attempt()
        causes.append(err.value.cause)
    assert causes == [want.value.cause] * 4
    assert list(tmp_path.iterdir()) == []


def base_params():
    import dataclasses

    return dataclasses.make_dataclass("Params", [])


@pytest.mark.parametrize("name", ["../escaped", "/ABS", "a/b", ".hidden"])
def test_an_output_folder_writes_no_entry_outside_itself(tmp_path, name):
    """write_files is where every output folder is written: a name that is a path is refused
    before anything is written, whoever built the writers (the Python API included)."""
    from simbatch.errors import SimbatchError
    from simbatch.report.outputs import write_files

    name = name.replace("/ABS", str(tmp_path / "abs"))
    with pytest.raises(SimbatchError, match="would be a path"):
        write_files(tmp_path / "sub" / "out", {"ok.txt": lambda p: p.write_text("x"),
                                               name: lambda p: p.write_text("x")})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
def test_an_out_folder_behind_a_folder_one_may_not_enter(tmp_path, capsys, monkeypatch, argv):
    """--out under a folder the user may not enter was a PermissionError traceback (exit 1) from
    check_out_dir (issue 33). Here stat() is refused below ``locked`` as the kernel refuses it to a
    user without search permission there (root is never refused; tests/test_unreadable_files.py
    has the real case, as an unprivileged user)."""
    monkeypatch.setattr(runs, "simulate", lambda *a, **k: pytest.fail("simulated before checking --out"))
    locked = tmp_path / "locked"
    locked.mkdir()
    real = Path.stat

    def stat(self, *args, **kwargs):
        if str(self).startswith(f"{locked}{os.sep}"):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    out = locked / "sub" / "o"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"simbatch: error: --out {out}: cannot enter {locked} (permission denied), so nothing can be "
                   "written there"], err
    assert list(locked.iterdir()) == []
