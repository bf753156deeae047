"""Sweeps: grid parsing and expansion, run ids, resume, the table, the CLI, the progress bar."""

import io
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from simbatch.cli import main
from simbatch.errors import SimbatchError
from simbatch.runs.executors import InlineExecutor
from simbatch.scenario.spec import from_dict, load_scenario
from simbatch.sweep import METRIC_COLUMNS, expand, parse_grid_args, run_id, run_sweep, section_grid, sweep_grid
from simbatch.sweep.progress import Progress, format_duration

TINY = {
    "name": "tiny",
    "workload": {"requests": [{"prompt": 64 * (i + 1), "output": 4 + 3 * i, "arrival_s": 0.05 * i}
                              for i in range(8)]},
    "model": "llama-2-7b",
    "hardware": "a100-80gb",
    "policy": {"kind": "continuous", "max_num_seqs": 4},
    "slo": {"ttft_ms": 500},
}


def scenario(extra: dict | None = None):
    return from_dict({**TINY, **(extra or {})}, "tiny.yaml", Path("."))


class CountingExecutor(InlineExecutor):
    """In-process, remembering how many jobs it ran."""

    def __init__(self):
        self.jobs = 0

    def map(self, fn, items, on_done=None):
        items = list(items)
        self.jobs += len(items)
        return super().map(fn, items, on_done)


# --- grid parsing -----------------------------------------------------------------------------

def test_grid_values_are_yaml_scalars_and_flow_values():
    grid = parse_grid_args(["policy.kind=static,continuous", "workload.rate_scale=0.5, 1,2",
                            "policy.preferred_batch_sizes=[8,16],[4, 8]", "name='a,b',c"])
    assert grid.axes == {"policy.kind": ["static", "continuous"], "workload.rate_scale": [0.5, 1, 2],
                         "policy.preferred_batch_sizes": [[8, 16], [4, 8]], "name": ["a,b", "c"]}
    assert grid.size == 2 * 3 * 2 * 2


@pytest.mark.parametrize("item, where, cause", [
    ("policy.kind", "--grid policy.kind", "expected KEY=V1,V2"),
    ("=static", "--grid =static", "expected KEY=V1,V2"),
    ("policy.kind=", "--grid policy.kind", "empty value"),
    ("workload.rate_scale=1,,2", "--grid workload.rate_scale", "empty value"),
    ("workload.rate_scale=1,2,", "--grid workload.rate_scale", "empty value"),
    ("policy..kind=static", "--grid policy..kind", "malformed key"),
    ("seed=1,1", "--grid seed", "given twice"),
])
def test_malformed_grid_flags_name_the_flag(item, where, cause):
    with pytest.raises(SimbatchError) as err:
        parse_grid_args([item])
    assert err.value.where == where and cause in err.value.cause


def test_a_key_given_twice_on_the_command_line_is_an_error():
    with pytest.raises(SimbatchError, match="given twice"):
        parse_grid_args(["seed=0", "seed=1"])


def test_yaml_section_seeds_and_command_line_merge_in_order():
    section = {"grid": {"policy.kind": ["static", "continuous"], "workload.rate_scale": 2}, "seeds": [0, 1]}
    grid = section_grid(section, "s.yaml").merged(parse_grid_args(["workload.rate_scale=1,3", "cluster.replicas=1"]))
    assert list(grid.axes) == ["policy.kind", "workload.rate_scale", "seed", "cluster.replicas"]
    assert grid.axes["workload.rate_scale"] == [1, 3]  # --grid replaced the YAML axis in place
    assert grid.labels["seed"] == "s.yaml: sweep.seeds"
    combos = grid.combinations()
    assert combos[0] == {"policy.kind": "static", "workload.rate_scale": 1, "seed": 0, "cluster.replicas": 1}
    assert combos[1]["seed"] == 1 and combos[-1]["policy.kind"] == "continuous"  # first axis slowest


@pytest.mark.parametrize("section, where", [
    ({"grid": {"seed": []}}, "s.yaml: sweep.grid.seed"),
    ({"grids": {}}, "s.yaml: sweep.grids"),
    ({"grid": [1, 2]}, "s.yaml: sweep.grid"),
    ({"grid": {"seed": [0]}, "seeds": [1]}, "s.yaml: sweep.seeds"),
    ([1], "s.yaml: sweep"),
])
def test_bad_sweep_sections(section, where):
    with pytest.raises(SimbatchError) as err:
        section_grid(section, "s.yaml")
    assert err.value.where == where


def test_nothing_to_sweep_is_an_error():
    with pytest.raises(SimbatchError, match="nothing to sweep"):
        sweep_grid(scenario(), [])


# --- points and run ids -----------------------------------------------------------------------

def test_run_id_ignores_key_order_and_the_sweep_section():
    a = {"b": 1, "a": {"y": 2, "x": [1, 2]}}
    b = {"a": {"x": [1, 2], "y": 2}, "b": 1}
    assert run_id(a) == run_id(b) and len(run_id(a)) == 12
    with_sweep = scenario({"sweep": {"grid": {"seed": [3]}}})
    (point,), _ = expand(with_sweep, sweep_grid(with_sweep))
    assert "sweep" not in point.data
    assert point.run_id == run_id({**TINY, "seed": 3})


def test_policy_keys_apply_only_to_policies_that_have_them():
    grid = parse_grid_args(["policy.kind=static,continuous", "policy.max_num_seqs=2,4"])
    points, notes = expand(scenario(), grid)
    assert [(p.params["policy.kind"], p.params["policy.max_num_seqs"]) for p in points] == [
        ("static", None), ("continuous", 2), ("continuous", 4)]
    assert points[0].data["policy"] == {"kind": "static"}  # a new kind starts from its defaults
    assert points[1].data["policy"] == {"kind": "continuous", "max_num_seqs": 2}
    assert "does not apply to policy.kind=static" in notes[0] and "4 grid points are 3 distinct runs" in notes[1]


def test_a_policy_key_that_applies_to_no_point_is_an_error():
    with pytest.raises(SimbatchError) as err:
        expand(scenario(), parse_grid_args(["policy.kind=static", "policy.max_num_seqs=2,4"]))
    assert err.value.where == "--grid policy.max_num_seqs" and "applies to no point" in err.value.cause


@pytest.mark.parametrize("item", ["policy.max_num_seqz=1,2", "colour=1,2", "workload.requestz=1",
                                  "cluster.replicas=1,0", "hardware=a100-80gb,b200-nope", "seed=0,-1"])
def test_bad_grid_values_fail_before_anything_runs_naming_the_axis(tmp_path, item):
    key = item.partition("=")[0]
    ex = CountingExecutor()
    with pytest.raises(SimbatchError) as err:
        run_sweep(scenario(), parse_grid_args([item]), tmp_path / "out", ex)
    assert err.value.where == f"--grid {key}"
    assert ex.jobs == 0 and not (tmp_path / "out").exists()


# --- running, resuming, the table -------------------------------------------------------------

GRID = ["policy.kind=static,continuous", "policy.max_num_seqs=2,4", "seed=0,1"]


def test_sweep_writes_a_tidy_table_and_resumes(tmp_path):
    out, grid = tmp_path / "sw", parse_grid_args(GRID)
    ex = CountingExecutor()
    first = run_sweep(scenario(), grid, out, ex)
    assert ex.jobs == 6 and first.attrs == {"points": 8, "runs": 6, "reused": 0, "ran": 6}
    assert list(first.columns) == ["run_id", "policy.kind", "policy.max_num_seqs", "seed", *METRIC_COLUMNS, "wall_s"]
    assert first["run_id"].is_unique and (first["completed"] == 8).all()
    assert str(first["policy.max_num_seqs"].dtype) == "Int64"
    csv, parquet = pd.read_csv(out / "sweep.csv"), pd.read_parquet(out / "sweep.parquet")
    assert list(csv.columns) == list(first.columns) and len(parquet) == 6
    assert csv["ttft_ms.p99"].tolist() == first["ttft_ms.p99"].tolist()
    spec = yaml.safe_load((out / "sweep.yaml").read_text())
    assert spec["grid"]["seed"] == [0, 1] and spec["scenario"]["name"] == "tiny"
    record = json.loads((out / "runs" / f"{first.run_id[2]}.json").read_text())
    assert record["params"] == {"policy.kind": "continuous", "policy.max_num_seqs": 2, "seed": 0}
    assert not list(out.rglob("*.tmp"))

    (out / "runs" / f"{first.run_id[3]}.json").unlink()
    ex = CountingExecutor()
    again = run_sweep(scenario(), grid, out, ex)
    assert ex.jobs == 1 and again.attrs["reused"] == 5 and again.attrs["ran"] == 1
    same = [c for c in first.columns if c != "wall_s"]
    pd.testing.assert_frame_equal(again[same], first[same])
    kept = again.index != 3
    assert again["wall_s"][kept].tolist() == first["wall_s"][kept].tolist()


def test_a_grown_grid_reuses_the_runs_it_has(tmp_path):
    out, notes = tmp_path / "sw", []
    run_sweep(scenario(), parse_grid_args(["seed=0,1"]), out, CountingExecutor())
    ex = CountingExecutor()
    table = run_sweep(scenario(), parse_grid_args(["seed=1,2"]), out, ex, note=notes.append)
    assert ex.jobs == 1 and list(table["seed"]) == [1, 2]
    assert notes == [f"1 of 2 runs already done in {out / 'runs'}",
                     f"1 run file(s) in {out / 'runs'} are not points of this grid; left out of the table"]


def test_a_failing_run_keeps_the_finished_ones(tmp_path):
    # 10% of the GPU's memory leaves Llama-2-7B no room for a KV cache: found only when that point runs
    grid = parse_grid_args(["kv_cache.gpu_memory_utilization=0.9,0.1"])
    with pytest.raises(SimbatchError) as err:
        run_sweep(scenario(), grid, tmp_path / "sw", CountingExecutor())
    assert "kv_cache.gpu_memory_utilization=0.1" in err.value.where
    assert len(list((tmp_path / "sw" / "runs").glob("*.json"))) == 1
    assert not (tmp_path / "sw" / "sweep.csv").exists()


# --- command line -----------------------------------------------------------------------------

def write_tiny(tmp_path, sweep=None) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, **({"sweep": sweep} if sweep else {})}, sort_keys=False))
    return path


def test_cli_sweep_runs_the_yaml_grid_plus_flags(tmp_path, capsys):
    path = write_tiny(tmp_path, {"grid": {"policy.kind": ["static", "continuous"]}, "seeds": [0, 1]})
    argv = ["sweep", str(path), "--grid", "workload.rate_scale=1,2", "--executor", "inline", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    table = pd.read_csv(tmp_path / "o" / "sweep.csv")
    assert len(table) == 8 and list(table.columns[:4]) == ["run_id", "policy.kind", "seed", "workload.rate_scale"]
    captured = capsys.readouterr()
    assert "8 runs (8 run now, 0 reused) on inline" in captured.out
    assert "8/8 runs" in captured.err  # the final progress line (stderr is not a terminal here)
    assert main(argv) == 0
    assert "1 run now" not in capsys.readouterr().out and len(pd.read_csv(tmp_path / "o" / "sweep.csv")) == 8


@pytest.mark.parametrize("args, message", [
    (["--grid", "policy.max_num_seqz=1,2"], "--grid policy.max_num_seqz: unknown field"),
    (["--grid", "policy.kind"], "expected KEY=V1,V2"),
    (["--grid", "seed="], "--grid seed: empty value"),
    (["--grid", "seed=0", "--executor", "inline", "--dask", "local"], "--dask: needs --executor dask"),
    (["--grid", "seed=0", "--jobs", "0"], "--jobs: must be >= 1"),
    ([], "nothing to sweep"),
])
def test_cli_bad_input_is_one_line_exit_2_and_no_files(tmp_path, capsys, args, message):
    out = tmp_path / "o"
    assert main(["sweep", str(write_tiny(tmp_path)), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_cli_yaml_grid_errors_point_at_the_line(tmp_path, capsys):
    path = write_tiny(tmp_path, {"grid": {"policy.max_num_seqz": [1, 2]}})
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "max_num_seqz" in s)
    assert f"{path}:{line}: sweep.grid.policy.max_num_seqz: unknown field" in capsys.readouterr().err


def test_bundled_sweep_scenario_loads_and_runs_as_a_plain_scenario():
    from simbatch.api import run

    path = Path(__file__).resolve().parents[1] / "scenarios" / "sweep_chat.yaml"
    sc = load_scenario(path, ["workload.synthetic.num_requests=20"])
    assert sweep_grid(sc).size == 18
    assert run(sc).summary["completed"] == 20  # a plain run ignores the sweep section


# --- progress bar -----------------------------------------------------------------------------

def test_progress_bar_on_a_terminal_and_off_it():
    now = [0.0]
    live = io.StringIO()
    bar = Progress(4, done=1, stream=live, live=True, width=8, clock=lambda: now[0])
    now[0] = 10.0
    bar.update()
    assert live.getvalue().endswith("\r[####....] 2/4 runs, elapsed 0:10, ETA 0:20")
    bar.close()
    quiet = io.StringIO()
    bar = Progress(2, stream=quiet, live=False, width=4, clock=lambda: now[0])
    bar.update()
    bar.update()
    assert quiet.getvalue() == ""
    bar.close()
    assert quiet.getvalue() == "[####] 2/2 runs, elapsed 0:00, ETA 0:00\n"
    assert format_duration(3725) == "1:02:05" and format_duration(59.6) == "1:00"
    resumed = io.StringIO()
    Progress(3, done=3, stream=resumed, live=False, width=3, clock=lambda: now[0]).close()
    assert resumed.getvalue() == "[###] 3/3 runs, elapsed 0:00, ETA 0:00\n"  # all reused: nothing left


def test_new_policy_kind_takes_the_scenarios_policies_section_like_compare():
    from simbatch.scenario.spec import from_dict
    from simbatch.sweep.grid import expand, parse_grid_args

    sc = from_dict({"workload": {"requests": [{"prompt": 10, "output": 2}]}, "model": "llama-2-7b",
                    "hardware": "a100-80gb", "policy": {"kind": "continuous", "max_num_seqs": 8},
                    "policies": {"static": {"batch_size": 3}}})
    points, _ = expand(sc, parse_grid_args(["policy.kind=static,continuous,dynamic"]))
    policies = {p.data["policy"]["kind"]: p.data["policy"] for p in points}
    assert policies["static"] == {"kind": "static", "batch_size": 3}
    assert policies["continuous"] == {"kind": "continuous", "max_num_seqs": 8}
    assert policies["dynamic"] == {"kind": "dynamic"}
    assert policies["static"] == sc.with_policy("static").data["policy"]


def test_cli_sweep_report_writes_what_simbatch_report_writes(tmp_path, capsys):
    """`simbatch sweep ... --report` (as `compare --report`): the sweep's report in its folder,
    the same report `simbatch report DIR` makes of it, sweep table included."""
    path = write_tiny(tmp_path, {"grid": {"workload.rate_scale": [1, 2]}})
    out = tmp_path / "o"
    assert main(["sweep", str(path), "--executor", "inline", "--out", str(out), "--report"]) == 0
    assert f"wrote {out / 'report.html'}" in capsys.readouterr().out
    assert main(["report", str(out), "--out", str(tmp_path / "again")]) == 0
    md = (out / "report.md").read_text()
    assert md == (tmp_path / "again" / "report.md").read_text()
    assert '<a id="sweep"></a>' in md and (out / "report.html").stat().st_size > 0
