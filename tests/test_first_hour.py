"""The first hour with simbatch (issue 33, section 3): what a new user meets in their first
commands does not surprise them. Each test replays the reported case."""

from __future__ import annotations

from pathlib import Path

import pytest

from simbatch.api import run
from simbatch.cli import main
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import load_scenario
from simbatch.version import __version__

ROOT = Path(__file__).resolve().parents[1]
SMALL = "workload.synthetic.num_requests=300"


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# --- run --set policy.kind takes the knobs compare uses ------------------------------------

def test_set_policy_kind_takes_the_knobs_compare_uses():
    """`run chat --set policy.kind=chunked_prefill` printed TTFT p99 422 ms where compare's row
    said 542: the switch dropped policies.chunked_prefill (chunk_size 512) for the defaults."""
    by_set = load_scenario("chat", [SMALL, "policy.kind=chunked_prefill"])
    by_compare = load_scenario("chat", [SMALL]).with_policy("chunked_prefill")
    assert by_set.data["policy"] == by_compare.data["policy"] == {
        "max_num_seqs": 256, "chunk_size": 512, "kind": "chunked_prefill"}
    assert run(by_set).summary["ttft_ms"] == run(by_compare).summary["ttft_ms"]


def test_a_knob_set_after_the_kind_still_wins():
    s = load_scenario("chat", ["policy.chunk_size=256", "policy.kind=chunked_prefill"])
    assert s.data["policy"]["chunk_size"] == 256 and s.data["policy"]["max_num_seqs"] == 256
    assert s.policy_source == "policies.chunked_prefill, --set policy.chunk_size"


def test_a_kind_without_a_policies_section_starts_from_its_defaults(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text((ROOT / "scenarios" / "chat.yaml").read_text().replace(
        "  chunked_prefill: {max_num_seqs: 256, chunk_size: 512}\n", ""))
    s = load_scenario(path, ["policy.kind=chunked_prefill"])
    assert s.data["policy"] == {"kind": "chunked_prefill"} and s.policy_source == "defaults"


def test_run_prints_the_knobs_it_used(capsys):
    assert main(["run", "chat", "--set", SMALL, "--set", "policy.kind=chunked_prefill"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "policy: chunked_prefill (max_num_seqs 256, chunk_size 512) from policies.chunked_prefill" in out
    assert main(["run", "chat", "--set", SMALL]) == 0
    assert "policy: continuous (max_num_seqs 256, max_num_batched_tokens 8192) from policy" in \
        capsys.readouterr().out.splitlines()


# --- --version, list, did you mean ---------------------------------------------------------

def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"simbatch {__version__}"


def test_list_shows_every_bundled_scenario_with_its_description(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))
    assert [line.split()[0] for line in lines[:-1]] == names
    assert any(line.startswith("chat ") and "Synthetic chat traffic fitted to the Azure" in line for line in lines)
    assert lines[-1].startswith(f"({len(names)} scenarios in ")


@pytest.mark.parametrize("typed, meant", [("chta", "chat"), ("classrom", "classroom"), ("azure-conv", "azure_conv")])
def test_a_mistyped_bundled_name_gets_a_suggestion(capsys, tmp_path, typed, meant):
    assert main(["run", typed, "--out", str(tmp_path / "o")]) == 2
    err = one_error_line(capsys)
    assert err == (f"simbatch: error: {typed}: no scenario file or bundled scenario of that name; "
                   f"did you mean {meant!r}? (`simbatch list` shows the bundled ones)")
    assert not (tmp_path / "o").exists()


def test_a_name_like_no_other_points_at_the_list(capsys):
    assert main(["run", "xyzzy"]) == 2
    assert one_error_line(capsys).endswith("xyzzy: no scenario file or bundled scenario of that name "
                                           "(`simbatch list` shows the bundled ones)")


def test_a_missing_yaml_path_is_still_not_found():
    with pytest.raises(SimbatchError, match="scenario file not found"):
        load_scenario("no/such/chta")


# --- a missing trace -----------------------------------------------------------------------

def trace_scenario(folder: Path, trace: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "azure_conv.yaml"
    text = (ROOT / "scenarios" / "azure_conv.yaml").read_text()
    path.write_text(text.replace("../../shared/traces/AzureLLMInferenceTrace_conv.csv", trace))
    return path


def test_a_missing_trace_names_the_scenario_file_line_and_field(tmp_path, capsys):
    path = trace_scenario(tmp_path / "s", "nope.csv")
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert one_error_line(capsys) == (
        f"simbatch: error: {path}:8: workload.trace: trace file not found: {tmp_path / 's' / 'nope.csv'} "
        f"(the path is relative to the scenario's folder); put the file there, or point at it with "
        f"--set workload.trace=/path/to/nope.csv")
    assert not (tmp_path / "o").exists()


def test_a_missing_empirical_trace_names_its_field(tmp_path, capsys):
    assert main(["run", "chat", "--set", "workload.synthetic.prompt={kind: empirical, trace: x.csv, "
                                         "column: prompt}"]) == 2
    err = one_error_line(capsys)
    assert "workload.synthetic.prompt.trace (from --set workload.synthetic.prompt): trace file not found: " in err
    assert err.endswith("--set workload.synthetic.prompt.trace=/path/to/x.csv")


def test_a_bundled_trace_scenario_inside_an_installed_package(tmp_path, monkeypatch):
    """After a plain `pip install .` the bundled scenarios sit in site-packages, where
    ../../shared/traces means nothing: say the trace is not shipped, and how to give it."""
    import simbatch.files.bundled as bundled

    packaged = tmp_path / "site" / "simbatch" / "scenarios"
    path = trace_scenario(packaged, "../../shared/traces/AzureLLMInferenceTrace_conv.csv")
    monkeypatch.setattr(bundled, "PACKAGED_SCENARIOS", packaged.resolve())
    with pytest.raises(SimbatchError) as err:
        load_scenario(path).build_workload()
    assert err.value.where == f"{path}: workload.trace"
    assert err.value.cause == (
        "AzureLLMInferenceTrace_conv.csv is not in this installation (simbatch ships no traces, and a bundled "
        "scenario's relative paths are read inside the installed package): point at your copy with "
        "--set workload.trace=/path/to/AzureLLMInferenceTrace_conv.csv, or run from a clone of the "
        "repository with the file in <clone>/../shared/traces/ (docs/scenarios.md, 'Traces')")


# --- capacity's progress line ----------------------------------------------------------------

def test_capacity_shows_no_eta_over_the_runs_asked_so_far(monkeypatch):
    """The ETA extrapolated to the runs asked so far (the total grows as the searches go) and
    read 2-3 s through most of a 22 s search: the capacity line counts runs and gives none."""
    import io
    import sys

    from simbatch.commands.capacity import _SearchBar

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    bar = _SearchBar().make(3)
    bar.update()
    assert bar.line() == "1 run done, 2 under way, elapsed 0:00 (no ETA)"
    bar.total += 5
    bar.update(2)
    assert bar.line() == "3 runs done, 5 under way, elapsed 0:00 (no ETA)"


# --- run --out over another command's folder -------------------------------------------------

def test_run_out_refuses_a_comparisons_folder(tmp_path, capsys):
    """`run --out` over a `compare --report` folder deleted the comparison, its report and every
    policy's run, and said nothing: one line, exit 2, the folder as it was."""
    out = tmp_path / "cmp"
    assert main(["compare", "classroom", "--policies", "static,continuous", "--out", str(out), "--report"]) == 0
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["run", "classroom", "--out", str(out)]) == 2
    assert one_error_line(capsys) == (
        f"simbatch: error: --out {out}: holds a `simbatch compare` output (comparison.csv), which "
        f"`simbatch run` would replace whole; give a new folder, or remove that one first")
    assert sorted(p.name for p in out.iterdir()) == before and "report.html" in before


def test_compare_out_refuses_a_run_folder_and_each_replaces_its_own(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["run", "classroom", "--out", str(out)]) == 0
    assert main(["run", "classroom", "--set", "policy.kind=continuous", "--out", str(out)]) == 0  # its own: replaced
    capsys.readouterr()
    assert main(["compare", "classroom", "--policies", "static", "--out", str(out)]) == 2
    assert "holds a `simbatch run` output (summary.json), which `simbatch compare` would replace whole" in \
        one_error_line(capsys)
    assert (out / "summary.json").is_file() and not (out / "comparison.csv").exists()


def test_the_python_api_keeps_the_same_rule(tmp_path):
    from simbatch.api import compare, write_compare

    out = tmp_path / "cmp"
    runs, table = compare(load_scenario("classroom"), ["static"], jobs=1)
    write_compare(out, runs, table)
    with pytest.raises(SimbatchError, match=r"holds a `simbatch compare` output \(comparison.csv\)"):
        runs["static"].write(out)
    assert (out / "comparison.csv").is_file()


# --- calibrate: a verdict, and a poor profile never silently replaces a good one -------------

GOOD_PROFILE = ROOT / "calibration" / "profiles" / "cpu-tiny-float32-tp1"


def shaken(profile):
    """``profile`` as a busy machine measures it: its whole steps timed 4x slow or 4x fast by turns."""
    from simbatch.catalog.profiles import Profile

    m = profile.measurements.copy()
    steps = m.index[m["op"] == "step_forward"]
    factors = [4.0 if i % 2 else 0.25 for i in range(len(steps))]
    for col in ("median_s", "p10_s", "p90_s"):
        m.loc[steps, col] = m.loc[steps, col] * factors
    return Profile(profile.header, m)


def test_a_profile_gets_a_verdict():
    from simbatch.calibrate.verdict import verdict_line
    from simbatch.catalog.profiles import read_profile

    good = read_profile(GOOD_PROFILE)
    assert verdict_line(good) == "verdict: good: 21.7 % median error on its 47 whole steps (worst 58.3 %)"
    poor = verdict_line(shaken(good))
    assert poor.startswith("verdict: POOR: 89.7 % median error on its 47 whole steps (worst 405.2 %), over the "
                           "25.0 % a machine that holds still gives; load average (1, 5, 15 min) ")  # the header's
    assert poor.endswith(": the timings moved under other work; calibrate again on an idle machine "
                         "(or with --threads 1)")


def test_calibrate_report_ends_with_the_verdict(capsys):
    assert main(["calibrate", "--report", str(GOOD_PROFILE)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("verdict: good: 21.7 %")


def test_a_poor_profile_does_not_replace_a_good_one_without_force(tmp_path):
    import shutil

    from simbatch.calibrate.verdict import check_overwrite
    from simbatch.catalog.profiles import read_profile

    out = tmp_path / "profile"
    shutil.copytree(GOOD_PROFILE, out)
    good = read_profile(out)
    poor = shaken(good)
    with pytest.raises(SimbatchError) as err:
        check_overwrite(poor, out, force=False)
    assert err.value.where == f"--out {out}" and err.value.cause.startswith(
        "holds a good profile (21.7 % median whole-step error); this calibration's is poor (")
    assert err.value.cause.endswith("or replace the good one with --force")
    check_overwrite(poor, out, force=True)  # --force replaces it
    check_overwrite(good, out, force=False)  # a good one replaces a good one
    check_overwrite(poor, tmp_path / "new", force=False)  # nothing there: written, with its verdict


def test_the_progress_line_redraws_on_a_terminal_and_is_plain_elsewhere():
    import io

    from simbatch.sweep.progress import StatusLine

    ticks = iter(range(100))
    live = io.StringIO()
    line = StatusLine("calibrate", stream=live, live=True, clock=lambda: next(ticks))
    line("operators 1/39, ETA 0:05: linear 1 tokens")
    line("steps 2/15")
    line.close()
    first = "calibrate: operators 1/39, ETA 0:05: linear 1 tokens (1.0 s)"
    assert live.getvalue() == f"\r{first}\r" + "calibrate: steps 2/15 (2.0 s)".ljust(len(first)) + "\n"
    plain = io.StringIO()
    line = StatusLine("calibrate", stream=plain, live=False, clock=lambda: 0.0)
    line("steps 1/15")
    line("steps 2/15")
    line.close()
    assert plain.getvalue() == "calibrate: steps 1/15 (0.0 s)\ncalibrate: steps 2/15 (0.0 s)\n"
