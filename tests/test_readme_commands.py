"""Every command the README and the docs show, run as a newcomer runs them (issue 15).

A wheel built from this checkout is installed (``pip install --no-deps --no-index``) into a
fresh virtual environment that borrows numpy, pandas, simpy... from this interpreter
(``--system-site-packages``): nothing is downloaded, and neither the source tree nor an
editable install can stand in for the installed package.

The commands are read from the fenced ``bash`` blocks of README.md and docs/*.md, so a
command added there is run here without editing this file. Blocks run top to bottom, as
one reader would type them in one session: a block that names ``scenarios/...``,
``../shared`` or a bundled scenario reading ``../../shared`` runs in a copy of the checkout
with ``../shared`` beside it (the README's reader is in a clone); any other runs in a
scratch folder outside any checkout, so bundled names must resolve from the install.
Where a command would take long, a smaller workload is added (``--set
workload.synthetic.num_requests=...``, a shorter trace window, one seed for capacity, one
policy and the shipped profile for torch validation) except in the README's first block,
whose printed table must be the README's. Each command must exit 0, print no traceback and
write what the README says it writes. About 50 CPU-seconds in all (2-core machine).

Not run: synopsis lines (``SCENARIO [--out DIR]``; their options are checked against the
command's ``--help`` instead), ``pip install`` (the fixture's install stands for it),
``python -m pytest`` (CI itself), scripts that are not ``simbatch`` commands, and commands on
the reader's own files (``my_policy.py``). Commands that need ``../shared`` skip where it is
absent, those that need torch (or CUDA) skip without it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
import yaml
from wheelkit import ROOT, build_wheel, copy_checkout, make_venv

SHARED = ROOT.parent / "shared"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SMALL_REQUESTS = 300  # a synthetic workload's requests where a command is not run as written
SMALL_WINDOW_S = 60  # a trace window's length where a command is not run as written
TORCH_REQUESTS = 4  # the torch backend runs in real time: a handful of requests


@dataclass
class Command:
    """One ``simbatch`` command of a document's bash block."""

    where: str  # file:line
    text: str  # as written (continuation lines joined, comment dropped)
    words: list[str]

    @property
    def sub(self) -> str:
        return self.words[1] if self.words[0] == "simbatch" else self.words[3]

    @property
    def args(self) -> list[str]:
        return self.words[2:] if self.words[0] == "simbatch" else self.words[4:]

    def option(self, name: str) -> str | None:
        """The value given to ``--name`` (the last one), else None."""
        args, value = self.args, None
        for i, word in enumerate(args):
            if word == name and i + 1 < len(args):
                value = args[i + 1]
            elif word.startswith(name + "="):
                value = word.split("=", 1)[1]
        return value

    @property
    def scenario(self) -> str | None:
        """The positional scenario (a path or a bundled name), if the command takes one."""
        args, i = self.args, 0
        while i < len(args):
            if args[i].startswith("-"):
                i += 1 if "=" in args[i] or args[i] in FLAGS else 2
                if args[i - 1] == "--against":  # several logs after one flag
                    while i < len(args) and not args[i].startswith("-"):
                        i += 1
                continue
            return args[i]
        return None


FLAGS = {"--report", "--traces", "--check-fast-path", "--quick", "-h", "--help"}  # options without a value


@dataclass
class Block:
    """One fenced bash block: its simbatch commands in order, and what was left out and why."""

    where: str
    commands: list[Command] = field(default_factory=list)
    synopses: list[Command] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (text, why)


def logical_lines(body: str, first_line: int):
    """(line number, text) of a block's lines, backslash continuations joined."""
    pending, start = "", first_line
    for offset, line in enumerate(body.splitlines()):
        if not pending:
            start = first_line + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""


def without_comment(line: str) -> str:
    """The line up to its shell comment (a ``#`` after a blank, outside quotes); kept as
    written otherwise, so that bash expands its globs as the reader's shell does."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def is_synopsis(text: str) -> bool:
    """A usage line with placeholders (``SCENARIO``, ``[--out DIR]``, ``cpu|cuda``), not a command."""
    return bool(re.search(r"\b[A-Z][A-Z0-9_]{2,}\b|\[|\.\.\.|\|", text))


def why_not_run(words: list[str]) -> str | None:
    """Why a segment that is not a simbatch command is left out, or None for a simbatch command."""
    if words[:1] == ["simbatch"] or words[:3] == ["python", "-m", "simbatch"]:
        return None
    if words[:1] == ["pip"] or words[:3] == ["python", "-m", "pip"]:
        return "an install: the test's own wheel install stands for it"
    if words[:3] == ["python", "-m", "pytest"]:
        return "the test suite itself (CI)"
    return "not a simbatch command"


def read_blocks(path: Path) -> list[Block]:
    """The bash blocks of one Markdown file that hold at least one simbatch command or synopsis."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^```(?:bash|sh|shell)\n(.*?)^```", text, re.S | re.M):
        first = text.count("\n", 0, match.start(1)) + 1
        block = Block(f"{path.relative_to(ROOT)}:{first - 1}")
        for line_no, line in logical_lines(match.group(1), first):
            for segment in without_comment(line).split("&&"):
                segment = segment.strip()
                words = shlex.split(segment)
                if not words:
                    continue
                command = Command(f"{path.relative_to(ROOT)}:{line_no}", segment, words)
                why = why_not_run(words)
                if why is not None:
                    block.left_out.append((segment, why))
                elif is_synopsis(segment):
                    block.synopses.append(command)
                else:
                    block.commands.append(command)
        if block.commands or block.synopses:
            blocks.append(block)
    return blocks


@cache
def all_blocks() -> tuple[Block, ...]:
    """Every document's blocks, README.md's first."""
    return tuple(b for doc in DOCUMENTS for b in read_blocks(doc))


def scenario_yaml(name: str | None) -> dict:
    """The scenario a command names, read from the checkout (a path or a bundled name)."""
    if name is None:
        return {}
    for candidate in (ROOT / name, ROOT / "scenarios" / f"{name}.yaml"):
        if candidate.is_file():
            return yaml.safe_load(candidate.read_text(encoding="utf-8")) or {}
    return {}


def reads_shared(command: Command) -> bool:
    """Whether a command reads ``../shared`` (named, or through its scenario's trace)."""
    if any("../shared" in w for w in command.words):
        return True
    workload = scenario_yaml(command.scenario).get("workload") or {}
    return "--against" not in command.words and "../../shared" in str(workload)


def in_a_clone(block: Block) -> bool:
    """A block whose commands name the checkout's files or what lies beside it runs in a clone."""
    return any(w.startswith(("scenarios/", "benchmarks/", "calibration/")) or "../shared" in w
               for c in block.commands for w in c.words) or any(reads_shared(c) for c in block.commands)


def torch_mode(command: Command) -> bool:
    """Whether the command runs the torch backend (validate without --against, calibrate
    without --from-log)."""
    if command.sub == "validate":
        return "--against" not in command.words
    return command.sub == "calibrate" and "--from-log" not in command.words


def needs_torch(command: Command) -> str | None:
    """Why the command needs what this machine may lack (torch, CUDA), or None."""
    if not torch_mode(command):
        return None
    if importlib.util.find_spec("torch") is None:
        return "needs torch"
    device = command.option("--device") or "cpu"
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return "needs a CUDA GPU"
    return None


def own_file(command: Command) -> str | None:
    """A file of the reader's own (``my_policy.py``, ``my-vllm.yaml``) the docs only name."""
    return next((w for w in command.words if re.match(r"^my[-_]", Path(w).name)), None)


def smaller(command: Command, as_written: bool) -> list[str]:
    """What to add so the command runs in seconds (nothing where it runs as written)."""
    if as_written:
        return []
    extra = []
    workload = scenario_yaml(command.scenario).get("workload") or {}
    replaced = "--against" in command.words  # the logs are the workload
    torch = torch_mode(command)
    synthetic = workload.get("synthetic") or {}
    cap = TORCH_REQUESTS if torch else SMALL_REQUESTS
    if not replaced and synthetic.get("num_requests", 0) > cap:
        extra += ["--set", f"workload.synthetic.num_requests={cap}"]
    if not replaced and isinstance(workload.get("window"), list):
        start = workload["window"][0]
        extra += ["--set", f"workload.window=[{start},{start + SMALL_WINDOW_S}]"]
    if command.sub == "capacity" and command.option("--seeds") is None:
        extra += ["--seeds", "0"]
    if torch and command.sub == "validate" and command.option("--policies") is None:
        extra += ["--policies", "continuous"]
    shipped = ROOT / "calibration" / "profiles" / f"cpu-{scenario_yaml(command.scenario).get('model')}-float32-tp1"
    if torch and command.sub == "validate" and (command.option("--device") or "cpu") == "cpu" \
            and command.option("--profile") is None and shipped.is_dir():
        # The shipped CPU profile, measured on another machine (a warning says so): validate
        # would otherwise calibrate this one first (11 s more here; the calibration itself is
        # tests/test_calibrate.py's).
        extra += ["--profile", str(shipped.relative_to(ROOT))]
    return extra


def promised_outputs(command: Command) -> list[str]:
    """The files the README and docs say the command writes (relative to its folder)."""
    out = command.option("--out")
    files = []
    if out is not None:
        files += {
            "run": ["summary.json", "requests.csv", "steps.csv", "run.log"],  # README "Using it"
            "compare": ["comparison.csv", "comparison.png"],  # README "Two commands"
            "sweep": ["sweep.csv", "sweep.parquet"],  # README "Sweeps"
            "capacity": ["capacity.csv", "probes.csv"],  # docs/capacity.md
            "validate": ["validation.json"],  # docs/validation.md
        }.get(command.sub, [])
        if "--report" in command.words:
            files += ["report.html", "report.md"]  # docs/reports.md
        files = [f"{out}/{f}" for f in files]
        if command.sub == "compare" and not scenario_yaml(command.scenario).get("variants"):
            policies = (command.option("--policies") or "static,dynamic,continuous,chunked_prefill").split(",")
            files += [f"{out}/{p}/summary.json" for p in policies]  # one folder per policy
            if "--traces" in command.words:
                files += [f"{out}/{p}/trace.json" for p in policies]  # docs/trace_export.md
    if command.sub == "report":
        files += [f"{command.scenario}/report.html", f"{command.scenario}/report.md"]
    if command.option("--trace-out"):
        files.append(command.option("--trace-out"))
    return files


@dataclass
class Ran:
    command: Command
    argv: str
    cwd: Path
    proc: subprocess.CompletedProcess | None
    skipped: str | None = None


class Reader:
    """One reader following every document in one terminal session, in two places: a clone
    of the checkout (``../shared`` beside it) and a scratch folder outside any checkout.
    A block runs in the clone when it names the checkout's files or what lies beside it.
    Commands run in document order within a block, each once per place (the README's and
    docs/reports.md's identical ``simbatch compare chat --out runs/chat --report`` run once)."""

    def __init__(self, tmp: Path, bindir: Path):
        self.tmp, self.bindir = tmp, bindir
        self.env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "VIRTUAL_ENV": str(bindir.parent), "MPLBACKEND": "Agg"}
        self.env.pop("PYTHONPATH", None)  # the checkout must not shadow the installed package
        self.places: dict[bool, Path] = {}
        self.done: dict[tuple[Path, str], Ran] = {}

    def folder(self, block: Block) -> Path:
        """The block's working folder: the clone or the scratch folder."""
        return self.place(in_a_clone(block))

    def place(self, clone: bool) -> Path:
        """The clone (made on first use, ``../shared`` beside it) or the scratch folder."""
        if clone not in self.places:
            if clone:
                self.places[clone] = copy_checkout(self.tmp / "clone" / "simbatch")
                if SHARED.is_dir():
                    (self.tmp / "clone" / "shared").symlink_to(SHARED, target_is_directory=True)
            else:
                self.places[clone] = self.tmp / "scratch"
                self.places[clone].mkdir()
        return self.places[clone]

    def run(self, block: Block, index: int) -> Ran:
        """Run the block's commands up to ``index`` (those before it first, as the reader did).
        In the clone, the README's first block comes first: every reader starts there (docs
        then read its ``runs/chat``)."""
        first = all_blocks()[0]
        if block is not first and in_a_clone(block) and in_a_clone(first):
            self.run(first, len(first.commands) - 1)
        for command in block.commands[:index + 1]:
            ran = self._prepare(block, command)
            key = (ran.cwd, ran.argv)
            if key not in self.done:
                self.done[key] = self._run(ran)
        return self.done[key]

    def _prepare(self, block: Block, command: Command) -> Ran:
        cwd = self.folder(block)
        why = own_file(command) and f"names the reader's own file {own_file(command)}"
        why = why or (reads_shared(command) and not SHARED.is_dir() and f"needs {SHARED} (absent)")
        why = why or needs_torch(command)
        argv = " ".join([command.text, *map(shlex.quote, smaller(command, block is all_blocks()[0]))])
        return Ran(command, argv, cwd, None, skipped=why or None)

    def _run(self, ran: Ran) -> Ran:
        if not ran.skipped:
            # bash, as the reader's shell: globs such as vllm-*.exp expand in the working folder.
            ran.proc = subprocess.run(["bash", "-c", ran.argv], cwd=ran.cwd, env=self.env, capture_output=True,
                                      text=True, timeout=600)
        return ran


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> Reader:
    pytest.importorskip("setuptools", reason="building the wheel needs setuptools")
    tmp = tmp_path_factory.mktemp("readme")
    bindir = make_venv(tmp / "venv", build_wheel(tmp))
    return Reader(tmp, bindir)


def command_ids():
    return [(b, i) for b in all_blocks() for i in range(len(b.commands))]


@pytest.mark.parametrize("block,index", command_ids(),
                         ids=[f"{b.where}:{b.commands[i].text[:60]}" for b, i in command_ids()])
def test_command_runs_and_writes_what_the_docs_promise(reader, block, index):
    ran = reader.run(block, index)
    if ran.skipped:
        pytest.skip(f"{ran.command.where}: {ran.skipped}")
    said = f"{ran.command.where}: `{ran.argv}` in {ran.cwd}\n{ran.proc.stdout[-1500:]}\n{ran.proc.stderr[-3000:]}"
    assert ran.proc.returncode == 0, said
    assert "Traceback" not in ran.proc.stderr, said
    missing = [f for f in promised_outputs(ran.command) if not (ran.cwd / f).exists()]
    assert not missing, f"{said}\nmissing: {missing}"


def test_the_installed_package_is_the_one_that_ran(reader, tmp_path):
    """The venv's simbatch is the wheel's copy, not the checkout (editable or on the path)."""
    where = subprocess.run(["simbatch", "run", "--help"], cwd=tmp_path, env=reader.env, capture_output=True)
    assert where.returncode == 0
    probe = subprocess.run([str(reader.bindir / "python"), "-c", "import simbatch; print(simbatch.__file__)"],
                           cwd=tmp_path, env=reader.env, capture_output=True, text=True)
    assert Path(probe.stdout.strip()).is_relative_to(reader.bindir.parent), probe.stdout + probe.stderr


@pytest.mark.parametrize("synopsis", [s for b in all_blocks() for s in b.synopses], ids=lambda s: s.where)
def test_synopsis_options_exist(reader, synopsis, tmp_path):
    """Every ``--option`` (and every ``a|b`` choice) a synopsis line shows is in the command's --help."""
    helped = subprocess.run(["simbatch", synopsis.sub, "--help"], cwd=tmp_path, env=reader.env,
                            capture_output=True, text=True)
    assert helped.returncode == 0, helped.stderr
    shown = set(re.findall(r"--[a-z][a-z0-9-]*", helped.stdout))
    named = set(re.findall(r"--[a-z][a-z0-9-]*", synopsis.text))
    assert named <= shown, f"{synopsis.where}: {sorted(named - shown)} not in `simbatch {synopsis.sub} --help`"
    for option, choices in re.findall(r"(--[a-z-]+) ([a-z0-9_.]+(?:\|[a-z0-9_.:]+)+)", synopsis.text):
        for choice in choices.split("|"):
            assert choice in helped.stdout, f"{synopsis.where}: {option} {choice} not in --help"


def first_table(lines: list[str]) -> list[str]:
    """A comparison table's title, header, rule and rows (the lines from ``name: ... requests``)."""
    start = next(i for i, line in enumerate(lines) if re.match(r"^\S+: .* requests$", line))
    end = start + 3
    while end < len(lines) and lines[end].strip() and not lines[end].startswith(("wrote", "note")):
        end += 1
    return [line.rstrip() for line in lines[start:end]]


def test_the_first_command_prints_the_readme_table(reader):
    """"The first prints this table": the README's first command, run as written, and the
    table in the plain block that follows it, line for line."""
    block = all_blocks()[0]
    ran = reader.run(block, 0)
    assert ran.proc is not None and ran.proc.returncode == 0, ran.proc and ran.proc.stderr[-2000:]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"The first prints this table.*?^```\n(.*?)^```", readme, re.S | re.M)
    assert shown, "README: no table after 'The first prints this table'"
    assert first_table(ran.proc.stdout.splitlines()) == first_table(shown.group(1).splitlines())


def test_every_document_command_is_covered():
    """The reader sees the README's commands: the first block, the usage synopsis and the
    sweep/capacity/report/timeline block are all found (a parser that found none would pass)."""
    readme = [b for b in all_blocks() if b.where.startswith("README.md")]
    subs = {c.sub for b in readme for c in b.commands}
    assert {"compare", "sweep", "capacity", "run", "validate"} <= subs
    assert {s.sub for b in readme for s in b.synopses} >= {"run", "compare", "sweep", "capacity", "report",
                                                          "calibrate", "validate"}
    assert all_blocks()[0].commands[0].words[:2] == ["simbatch", "compare"]


def test_what_is_not_run_is_an_install_the_suite_or_a_script_of_the_checkout():
    """Segments left out are only installs, the suite, and ``python <script>`` of this
    checkout (which must exist): a new kind of command in a document is not silently skipped."""
    for block in all_blocks():
        for text, why in block.left_out:
            if why == "not a simbatch command":
                words = shlex.split(text)
                assert words[0] == "python" and (ROOT / words[1]).is_file(), f"{block.where}: `{text}`"


def readme_python() -> list[tuple[str, str]]:
    """(file:line, code) of README.md's fenced ``python`` blocks (the "From Python" API tour)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [(f"README.md:{text.count(chr(10), 0, m.start()) + 1}", m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


@pytest.mark.parametrize("where,code", readme_python(), ids=[w for w, _ in readme_python()])
def test_readme_python_runs_from_the_install(reader, where, code):
    """The README's Python runs in the venv, in the clone when it names ``scenarios/`` (as
    ``load_scenario("scenarios/classroom.yaml")`` does), else in the scratch folder."""
    cwd = reader.place(clone="scenarios/" in code)
    ran = subprocess.run([str(reader.bindir / "python"), "-c", code], cwd=cwd, env=reader.env,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, f"{where} in {cwd}\n{ran.stderr[-3000:]}"
