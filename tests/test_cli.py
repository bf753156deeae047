"""The command line: outputs on success; one line, exit 2 and no files on bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from simbatch.cli import main

ROOT = Path(__file__).resolve().parents[1]
CLASSROOM = str(ROOT / "scenarios" / "classroom.yaml")

SCENARIO = """\
name: t
workload:
{workload}
model: {model}
hardware: {hardware}
policy: {{kind: continuous}}
"""


def write_scenario(tmp_path, workload="  requests: [{prompt: 10, output: 3}]", model="llama-2-7b",
                   hardware="a100-80gb"):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(workload=workload, model=model, hardware=hardware))
    return path


def test_run_writes_summary_and_tables(tmp_path, capsys):
    assert main(["run", CLASSROOM, "--out", str(tmp_path / "o")]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["completed"] == 4 and summary["policy"]["kind"] == "static"
    requests = pd.read_csv(tmp_path / "o" / "requests.csv")
    assert list(requests["id"]) == [0, 1, 2, 3]
    steps = pd.read_csv(tmp_path / "o" / "steps.csv")
    assert steps["padded_tokens"].sum() > 0  # static batching pads
    assert "TTFT" in capsys.readouterr().out


def test_set_overrides_reach_the_run(tmp_path):
    assert main(["run", CLASSROOM, "--set", "policy.kind=continuous", "--set", "policy.max_num_seqs=4",
                 "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["policy"]["kind"] == "continuous" and summary["policy"]["max_num_seqs"] == 4
    assert summary["padding_waste_frac"] == 0


def test_compare_writes_table_plot_and_runs(tmp_path, capsys):
    assert main(["compare", CLASSROOM, "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "comparison.csv")
    assert list(table["policy"]) == ["static", "dynamic", "continuous", "chunked_prefill"]
    assert (tmp_path / "comparison.png").stat().st_size > 10_000
    for kind in table["policy"]:
        assert (tmp_path / kind / "summary.json").exists()
    # the classroom example: continuous batching hands freed slots on, so the
    # last request finishes earlier than under static batching
    e2e = dict(zip(table["policy"], table["e2el_p99_ms"]))
    assert e2e["continuous"] < e2e["static"]


@pytest.mark.parametrize("kwargs, argv_extra, where, cause", [
    ({"workload": "  trace: nowhere.csv"}, [], "nowhere.csv", "not found"),
    ({"model": "llama-9"}, [], "s.yaml:4: model", "llama-2-7b"),
    ({"hardware": "tpu-v9"}, [], "s.yaml:5: hardware", "a100-80gb"),
    ({"workload": "  requests: [{prompt: -5, output: 3}]"}, [], "s.yaml:3: workload.requests[0].prompt", ""),
    # a window long enough that the request is not refused at arrival (issue 34 §8), so the KV check speaks
    ({"workload": "  requests: [{prompt: 200000, output: 3}]", "model": "{base: llama-2-7b, max_context: 1000000}"},
     [], "s.yaml:2: workload", "needs"),
    ({}, ["--set", "policy.kind=fifo"], "s.yaml: policy.kind (from --set policy.kind)", "allowed"),
    ({}, ["--set", "policy"], "--set policy", "KEY=VALUE"),
    ({}, ["--set", "policy.max_num_seqs=lots"], "s.yaml: policy.max_num_seqs (from --set", "integer"),
    ({"model": "llama-2-70b"}, ["--set", "cluster.tensor_parallel=3"],
     "s.yaml: cluster.tensor_parallel (from --set", "does not split"),
    ({"workload": "  synthetic: {num_requests: 5, arrival: {kind: poisson, rate: 1.0e-300}, "
                  "prompt: {kind: constant, value: 9}, output: {kind: constant, value: 2}}"},
     [], "s.yaml:2: workload", "cannot resolve a microsecond"),
    ({"workload": "  trace: t.jsonl"}, [], "workload.columns", "has fields"),
])
def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path, capsys, kwargs, argv_extra, where, cause):
    path = write_scenario(tmp_path, **kwargs)
    (tmp_path / "t.jsonl").write_text('{"arrival_s": 0, "prompt": 5, "output": 2}\n')  # no known format
    out_dir = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out_dir), *argv_extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("simbatch: error: ") and "\n" not in err
    assert where in err and cause in err
    assert not out_dir.exists()


def test_malformed_trace_row_names_file_and_line(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                                    "2023-11-16 18:15:46.6805900,374,44\r\n"
                                    "2023-11-16 18:15:47.0000000,12x,44\r\n")
    path = write_scenario(tmp_path, workload="  trace: t.csv")
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "t.csv:3" in err and "ContextTokens" in err
    assert not (tmp_path / "o").exists()


def test_console_script_reports_errors_without_traceback(tmp_path):
    path = write_scenario(tmp_path, model="nope")
    proc = subprocess.run([sys.executable, "-m", "simbatch", "run", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_core_runs_without_torch():
    code = ("import sys; import simbatch.api as a; out = a.run(a.load_scenario(sys.argv[1])); "
            "assert 'torch' not in sys.modules; print(out.summary['completed'])")
    proc = subprocess.run([sys.executable, "-c", code, CLASSROOM], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "4"


def test_errors_name_the_line_of_the_field_or_the_override(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nworkload:\n  requests:\n    - {prompt: 10, output: 0}\n"
                    "model: llama-2-7b\nhardware: a100-80gb\npolicy:\n  kind: continuous\n  max_num_seqs: 0\n")
    assert main(["run", str(path)]) == 2
    assert f"{path}:9: policy.max_num_seqs: must be >= 1" in capsys.readouterr().err
    assert main(["run", str(path), "--set", "policy.max_num_seqs=4"]) == 2
    assert f"{path}:4: workload.requests[0].output" in capsys.readouterr().err
    assert main(["run", str(path), "--set", "policy.max_num_seqs=x"]) == 2
    assert "(from --set policy.max_num_seqs)" in capsys.readouterr().err


def test_errors_inside_parallel_runs_reach_the_user_as_one_line(tmp_path, capsys):
    path = write_scenario(tmp_path, workload="  trace: missing.csv")
    assert main(["compare", str(path), "--jobs", "2", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("simbatch: error: ") and "missing.csv" in err and "\n" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, where, cause", [
    (["compare", "--policies", ""], "--policies", "is empty"),
    (["compare", "--routers", ","], "--routers", "is empty"),
    (["compare", "--variants", " , "], "--variants", "is empty"),
    (["compare", "--jobs", "0"], "--jobs", "must be >= 1"),
    (["compare", "--jobs", "-3"], "--jobs", "must be >= 1"),
    (["capacity", "--slo", "ttft_p99_ms=500", "--seeds", ","], "--seeds", "is empty"),
    (["capacity", "--slo", "ttft_p99_ms=500", "--hardware", ""], "--hardware", "is empty"),
])
def test_an_empty_list_or_no_workers_is_refused_not_read_as_all(tmp_path, capsys, argv, where, cause):
    """``--policies ''`` ran all four policies and ``--jobs 0`` was accepted (issue 14, item 9)."""
    path = write_scenario(tmp_path)
    assert main([argv[0], str(path), *argv[1:], "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"simbatch: error: {where}: {cause}") and "\n" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("override, where, cause", [
    ("cluster.replicas=1000000000", "cluster.replicas", "must be at most 10,000"),
    ("kv_cache.block_size=1000000000000", "kv_cache.block_size", "one block of llama-2-7b needs more memory"),
])
def test_sizes_that_cannot_be_built_are_refused_up_front(capsys, override, where, cause):
    """A billion replicas hung building them; a huge block was blamed on the model's weights."""
    assert main(["run", CLASSROOM, "--set", override]) == 2
    err = capsys.readouterr().err.strip()
    assert f"classroom.yaml: {where} (from --set {where})" in err and cause in err and "\n" not in err
