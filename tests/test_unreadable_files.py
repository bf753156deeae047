"""Every user file is read by one loader (simbatch.files.textfile), with the same one-line messages
(issue 14, item 5): a file the user may not read, one that is not UTF-8, a folder or /dev/null
where a file belongs. Through the CLI: exit code 2, one line on stderr, nothing written.

"The one loader" is checked by making it fail: ``Path.read_bytes`` raises PermissionError for
one file only, and the command must report exactly that, so a reader that opened the file
some other way would run on and fail the test. The permission case is also run for real, in
a subprocess that may not read the file (root reads any file, so as root the subprocess runs
as ``nobody`` or without the capabilities that let root ignore permission bits).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from simbatch.cli import main

ROOT = Path(__file__).resolve().parents[1]
CLASSROOM = (ROOT / "scenarios" / "classroom.yaml").read_text()
REQUESTS = CLASSROOM[CLASSROOM.index("  requests:"):CLASSROOM.index("model:")]
TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n1,20,4\n2,30,3\n"


def scenario_with(folder: Path, workload: str) -> Path:
    """classroom.yaml with its workload section replaced, written in ``folder``."""
    path = folder / "s.yaml"
    path.write_text(CLASSROOM.replace(REQUESTS, workload))
    return path


def trace_scenario(folder: Path) -> tuple[list[str], Path]:
    (folder / "t.csv").write_text(TRACE)
    return ["run", str(scenario_with(folder, "  trace: t.csv\n"))], folder / "t.csv"


def empirical_scenario(folder: Path) -> tuple[list[str], Path]:
    (folder / "t.csv").write_text(TRACE)
    workload = ("  synthetic:\n    num_requests: 4\n    arrival: {kind: poisson, rate: 1}\n"
                "    prompt: {kind: empirical, trace: t.csv, column: prompt}\n"
                "    output: {kind: constant, value: 8}\n")
    return ["run", str(scenario_with(folder, workload))], folder / "t.csv"


def scenario_file(folder: Path) -> tuple[list[str], Path]:
    path = folder / "s.yaml"
    path.write_text(CLASSROOM)
    return ["run", str(path)], path


def hf_config(folder: Path) -> tuple[list[str], Path]:
    shutil.copy(ROOT / "simbatch" / "catalog" / "hf_configs" / "llama-3.1-8b.json", folder / "config.json")
    path = folder / "s.yaml"
    path.write_text(CLASSROOM.replace("model: llama-2-7b", "model: {config: config.json}"))
    return ["run", str(path)], folder / "config.json"


def measured_log(folder: Path) -> tuple[list[str], Path]:
    assert main(["run", "classroom", "--out", str(folder / "measured")]) == 0
    return ["validate", "classroom", "--against", str(folder / "measured" / "requests.csv")], \
        folder / "measured" / "requests.csv"


def profile_files(name: str):
    def make(folder: Path) -> tuple[list[str], Path]:
        from test_costmodel_profile import synthetic_profile

        from simbatch.catalog.profiles import write_profile

        write_profile(synthetic_profile(), folder / "prof")
        path = folder / "s.yaml"
        path.write_text(CLASSROOM.replace("cost_model: {kind: roofline}", "cost_model: {kind: profile, path: prof}"))
        return ["run", str(path)], folder / "prof" / name
    return make


def policy_file(folder: Path) -> tuple[list[str], Path]:
    path = folder / "mine.py"
    path.write_text("from simbatch.policies.continuous import ContinuousPolicy\n\n\n"
                    "class Mine(ContinuousPolicy):\n    kind = 'mine_unreadable'\n")
    return ["run", "classroom", "--policy-file", str(path)], path


def run_folder(name: str):
    """``simbatch report`` on a run folder, with ``name`` (summary.json, requests.csv) the target."""
    def make(folder: Path) -> tuple[list[str], Path]:
        assert main(["run", "classroom", "--out", str(folder / "run")]) == 0
        return ["report", str(folder / "run")], folder / "run" / name
    return make


FILES = {"run's summary": run_folder("summary.json"), "run's table": run_folder("requests.csv"),
         "scenario file": scenario_file, "trace file": trace_scenario, "empirical trace": empirical_scenario,
         "config.json": hf_config, "log file": measured_log, "profile header": profile_files("profile.yaml"),
         "profile's measurements": profile_files("measurements.csv"), "policy file": policy_file}
WHAT = {"empirical trace": "trace file"}  # the loader names the file by what it is read as


def run_cli(argv: list[str], out: Path, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main([*argv, "--out", str(out)])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("kind", sorted(FILES))
def test_every_user_file_is_read_by_the_one_loader(tmp_path, capsys, monkeypatch, kind):
    argv, target = FILES[kind](tmp_path)
    real = Path.read_bytes

    def read_bytes(self):
        if self.resolve() == target.resolve():
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    code, err = run_cli(argv, tmp_path / "out", capsys)
    what = WHAT.get(kind, kind)
    assert code == 2 and len(err) == 1, err
    assert f"{target.name}: cannot read the {what}: permission denied" in err[0], err
    assert not (tmp_path / "out").exists()


FOLDER = (lambda p: p.mkdir(), "is a folder, not a {what}")
BINARY = (lambda p: p.write_bytes(b"\x00\xe9\xff" * 50), "not UTF-8 text (byte 0xe9 at offset 1); save the {what} as UTF-8")


# A profile.yaml that is a folder is not a profile folder at all: the cost model says so first;
# likewise a summary.json that is a folder makes no run folder.
@pytest.mark.parametrize("kind, make, cause", [(k, *FOLDER) for k in sorted(FILES)
                                               if k not in ("profile header", "run's summary")]
                         + [(k, *BINARY) for k in sorted(FILES)])
def test_a_folder_or_binary_file_is_named_as_such(tmp_path, capsys, kind, make, cause):
    argv, target = FILES[kind](tmp_path)
    target.unlink()
    make(target)
    code, err = run_cli(argv, tmp_path / "out", capsys)
    assert code == 2 and len(err) == 1, err
    assert cause.format(what=WHAT.get(kind, kind)) in err[0], err


@pytest.mark.parametrize("make", [trace_scenario, empirical_scenario])
def test_dev_null_as_a_trace_is_not_a_regular_file(tmp_path, capsys, make):
    argv, _ = make(tmp_path)
    scenario = Path(argv[1])
    scenario.write_text(scenario.read_text().replace("t.csv", "/dev/null"))
    code, err = run_cli(argv, tmp_path / "out", capsys)
    assert code == 2 and err == ["simbatch: error: /dev/null: is not a regular file (a device or pipe?), "
                                 "not a trace file"]


def test_a_latin1_trace_names_its_line(tmp_path, capsys):
    argv, trace = trace_scenario(tmp_path)
    trace.write_bytes((TRACE + "3,4\xe9,5\n").encode("latin-1"))
    code, err = run_cli(argv, tmp_path / "out", capsys)
    assert code == 2 and len(err) == 1 and f"{trace}:5: not UTF-8 text (byte 0xe9" in err[0], err


@pytest.fixture
def open_folder(tmp_path):
    """A folder the unprivileged user of :func:`unprivileged` can reach and write in, so that a
    test fails where it means to. As root, pytest's ``tmp_path`` lies in a folder only root may
    enter (``/tmp/pytest-of-root`` is 0700), where ``nobody`` would fail on the way, not on the
    file under test; so as root a fresh folder in the system's temporary folder, open to all
    (sticky, as ``/tmp`` is), removed afterwards."""
    if os.geteuid() != 0:
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="simbatch-test-perm-"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def unprivileged(folder: Path) -> list[str] | None:
    """A command prefix under which, run in ``folder``, simbatch imports, a file there can be
    read and a mode-000 one cannot, or None: nothing when not root; as root, ``nobody`` (if it
    can run this interpreter, reach the package and ``folder``), else root without
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (the capabilities that let root ignore permission
    bits). The readable file tells a refused file from a folder on the way that was refused."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    candidates = [[setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"],
                  [setpriv, "--bounding-set=-dac_override,-dac_read_search"]]
    probe, readable = folder / "probe", folder / "readable"
    probe.write_text("x")
    probe.chmod(0)
    readable.write_text("x")
    readable.chmod(0o644)
    code = (f"import simbatch.cli\nopen({str(readable)!r}).read()\n"
            f"try:\n    open({str(probe)!r}).read()\nexcept PermissionError:\n    print('denied')")
    try:
        for prefix in candidates:
            try:
                out = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True,
                                     timeout=60, cwd=folder)
            except OSError:
                continue
            if out.stdout.strip() == "denied":
                return prefix
    finally:
        probe.unlink()
        readable.unlink()
    return None


def prefix_or_skip(folder: Path) -> list[str]:
    """:func:`unprivileged`'s prefix, or a skip that says why the condition cannot be set up."""
    prefix = unprivileged(folder)
    if prefix is None:
        pytest.skip(f"running as root, and neither `nobody` nor root without CAP_DAC_OVERRIDE (setpriv: "
                    f"{shutil.which('setpriv') or 'not installed'}) can run {sys.executable}, import simbatch "
                    f"and read a file in {folder} while refused a mode-000 one")
    return prefix


def simbatch_as(prefix: list[str], argv: list[str], cwd: Path, lock_cwd: bool = False):
    """``python -m simbatch ARGV`` under ``prefix`` in ``cwd``; ``lock_cwd``: ``cwd`` is made
    mode 000 once the child is in it (it could not enter it afterwards, not being root)."""
    def enter():
        os.chdir(cwd)
        if lock_cwd:
            os.chmod(cwd, 0)
    try:
        return subprocess.run([*prefix, sys.executable, "-m", "simbatch", *argv], capture_output=True, text=True,
                              timeout=120, preexec_fn=enter)
    finally:
        cwd.chmod(0o755)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="permission bits and setpriv are Linux's here")
@pytest.mark.parametrize("make", [scenario_file, trace_scenario], ids=["scenario", "trace"])
def test_a_file_the_user_may_not_read(open_folder, make):
    prefix = prefix_or_skip(open_folder)
    argv, target = make(open_folder)
    target.chmod(0)
    out = simbatch_as(prefix, [*argv, "--out", str(open_folder / "out")], open_folder)
    err = out.stderr.strip().splitlines()
    what = "scenario file" if target.suffix == ".yaml" else "trace file"
    assert out.returncode == 2 and err == [f"simbatch: error: {target if what == 'trace file' else argv[1]}: "
                                           f"cannot read the {what}: permission denied"], out.stderr
    assert not (open_folder / "out").exists()


@pytest.fixture
def locked(open_folder):
    """``open_folder/locked``, holding a scenario and a trace, that no one but root may enter
    (mode 000); opened again afterwards so that it can be removed."""
    folder = open_folder / "locked"
    folder.mkdir()
    trace_scenario(folder)
    folder.chmod(0)
    yield folder
    folder.chmod(0o755)


def _scenario_behind(locked: Path) -> tuple[list[str], str]:
    return ["run", str(locked / "s.yaml")], f"{locked / 's.yaml'}: cannot read the scenario file: permission denied"


def _trace_behind(locked: Path) -> tuple[list[str], str]:
    scenario = scenario_with(locked.parent, f"  trace: {locked / 't.csv'}\n")
    return ["run", str(scenario)], f"{locked / 't.csv'}: cannot read the trace file: permission denied"


def _out_behind(locked: Path) -> tuple[list[str], str]:
    return ["run", "classroom", "--out", str(locked / "sub" / "o")], \
        f"--out {locked / 'sub' / 'o'}: cannot enter {locked} (permission denied), so nothing can be written there"


def _out_locked(locked: Path) -> tuple[list[str], str]:
    return ["run", "classroom", "--out", str(locked)], \
        f"--out {locked}: cannot enter {locked} (permission denied), so nothing can be written there"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="permission bits and setpriv are Linux's here")
@pytest.mark.parametrize("case", [_scenario_behind, _trace_behind, _out_behind, _out_locked],
                         ids=["scenario", "trace", "out", "out itself"])
def test_a_folder_the_user_may_not_enter(open_folder, locked, case):
    """A scenario, a trace or an --out folder behind a folder the user may not enter (issue 33:
    ``Path.exists`` raised PermissionError, a traceback with exit 1): one line, exit 2."""
    prefix = prefix_or_skip(open_folder)
    argv, message = case(locked)
    out = simbatch_as(prefix, argv, open_folder)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [f"simbatch: error: {message}"], out.stderr
    assert sorted(p.name for p in open_folder.iterdir()) == ["locked", *(["s.yaml"] if "trace" in message else [])]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="permission bits and setpriv are Linux's here")
@pytest.mark.parametrize("argv, message", [
    (["run", "s.yaml"], "s.yaml: cannot read the scenario file: permission denied"),
    (["run", "classroom", "--out", "o"], "--out o: cannot enter the working directory {cwd} (permission denied), "
                                         "so nothing can be written there"),
    (["sweep", "classroom", "--grid", "seed=0,1"], "the sweep folder runs/classroom-sweep: cannot enter the working "
                                                   "directory {cwd} (permission denied), so nothing can be written there"),
    (["report", "."], ".: cannot read the results folder: permission denied"),
], ids=["scenario", "out", "sweep", "report"])
def test_a_working_directory_the_user_may_not_enter(open_folder, argv, message):
    """The issue 33 situation itself: a user in a folder they may not enter (pytest's root-owned
    temporary folder, for ``nobody``). A bundled name still runs; anything read or written
    there is one line, exit 2."""
    prefix = prefix_or_skip(open_folder)
    cwd = open_folder / "cwd"
    cwd.mkdir()
    scenario_file(cwd)
    out = simbatch_as(prefix, argv, cwd, lock_cwd=True)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [f"simbatch: error: {message.format(cwd=cwd)}"], out.stderr
    assert sorted(p.name for p in cwd.iterdir()) == ["s.yaml"]
    ran = simbatch_as(prefix, ["run", "classroom"], cwd, lock_cwd=True)
    assert ran.returncode == 0 and "classroom" in ran.stdout, ran.stderr


def test_a_closed_pipe_ends_quietly_and_the_files_are_still_written(tmp_path):
    """`simbatch run classroom | head -1` ended in a BrokenPipeError traceback (issue 14, item 7).
    Here the reader is gone before anything is printed, so every print meets a closed pipe."""
    proc = subprocess.Popen([sys.executable, "-m", "simbatch", "run", "classroom", "--out", str(tmp_path / "o")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err, err
    written = sorted(p.name for p in (tmp_path / "o").iterdir() if not p.name.startswith("."))
    assert written == ["requests.csv", "run.log", "steps.csv", "summary.json"]
