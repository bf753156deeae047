"""Executors: the same interface in-process, in a process pool and on Dask, and the same sweep results."""

import operator
import sys
from functools import partial
from pathlib import Path

import pandas as pd
import pytest

from simbatch.errors import SimbatchError, fail
from simbatch.runs.executors import InlineExecutor, ProcessExecutor, make_executor
from simbatch.scenario.spec import from_dict
from simbatch.sweep import parse_grid_args, run_sweep

SCENARIO = {
    "name": "tiny",
    "workload": {"synthetic": {"num_requests": 50, "arrival": {"kind": "poisson", "rate": 20},
                               "prompt": {"kind": "lognormal", "median": 300, "sigma": 0.8, "max": 2000},
                               "output": {"kind": "lognormal", "median": 40, "sigma": 0.8, "max": 200}}},
    "model": "llama-2-7b",
    "hardware": "a100-80gb",
    "policy": {"kind": "continuous"},
    "slo": {"ttft_ms": 300, "tpot_ms": 30},
}
GRID = ["policy.kind=static,chunked_prefill", "workload.rate_scale=0.5,2", "seed=0,1"]


@pytest.fixture(scope="module")
def dask_executor():
    pytest.importorskip("distributed")
    from simbatch.runs.dask import DaskExecutor

    executor = DaskExecutor("local", workers=2)
    yield executor
    executor.close()


def check_map(executor):
    done = []
    items = list(range(-5, 5))
    assert executor.map(operator.neg, items, lambda i, r: done.append((i, r))) == [-x for x in items]
    assert sorted(done) == [(i, -x) for i, x in enumerate(items)]  # once per item, any order
    with pytest.raises(SimbatchError) as err:  # a worker's user error comes back whole
        executor.map(partial(fail, "where"), ["cause"])
    assert (err.value.where, err.value.cause) == ("where", "cause")


def check_submit(executor):
    """submit + wait_any: every job's result once, whatever order they finish in; a job may be
    submitted while others run (what the capacity searches do); errors come back whole."""
    futures = {executor.submit(operator.neg, x): x for x in range(4)}
    results = {}
    while futures:
        done = executor.wait_any(list(futures))
        assert done and done <= set(futures)
        for f in done:
            x = futures.pop(f)
            results[x] = f.result()
            if x < 2:  # a follow-up job, submitted before the others are read
                futures[executor.submit(operator.neg, 10 + x)] = 10 + x
    assert results == {x: -x for x in (0, 1, 2, 3, 10, 11)}
    bad = executor.submit(partial(fail, "where"), "cause")
    assert executor.wait_any([bad]) == {bad}
    with pytest.raises(SimbatchError) as err:
        bad.result()
    assert (err.value.where, err.value.cause) == ("where", "cause")
    with pytest.raises(ValueError):
        executor.wait_any([])


def test_inline_executor_maps_in_order():
    check_map(InlineExecutor())
    check_submit(InlineExecutor())


def test_process_executor_maps_in_order():
    for workers in (2, 1):  # one worker runs in this process, as map does
        executor = ProcessExecutor(workers)
        try:
            check_map(executor)
            check_submit(executor)
            assert (executor.pool is None) == (workers == 1)
        finally:
            executor.close()


def test_process_executor_drops_queued_jobs_on_close():
    import time

    executor = ProcessExecutor(2)
    running = [executor.submit(time.sleep, 0.5) for _ in range(2)]
    queued = [executor.submit(time.sleep, 0.5) for _ in range(6)]
    executor.close()
    # The pool hands up to workers + EXTRA_QUEUED_CALLS jobs to its call queue ahead of the
    # workers, and those count as started; every job behind them must be dropped (without
    # cancel_futures none is). How many were handed over by close time is a race, so the
    # bound is the guaranteed one.
    from concurrent.futures.process import EXTRA_QUEUED_CALLS

    assert all(f.done() for f in running + queued)
    assert sum(f.cancelled() for f in queued) >= len(queued) - (2 + EXTRA_QUEUED_CALLS)


def test_dask_executor_maps_in_order(dask_executor):
    check_map(dask_executor)
    check_submit(dask_executor)
    assert dask_executor.name == "dask" and len(dask_executor.client.scheduler_info()["workers"]) == 2


def test_make_executor_by_name():
    assert make_executor("inline").name == "inline"
    assert make_executor("process", 3).workers == 3
    with pytest.raises(SimbatchError, match="unknown executor 'gpu'"):
        make_executor("gpu")


def test_dask_without_the_extra_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(SimbatchError) as err:
        make_executor("dask", 2, "local")
    assert err.value.where == "--dask" and "pip install 'simbatch[dask]'" in err.value.cause


def test_sweep_results_do_not_depend_on_the_executor(tmp_path, dask_executor):
    scenario = from_dict(SCENARIO, "tiny.yaml", Path("."))
    grid = parse_grid_args(GRID)
    process = ProcessExecutor(2)
    try:
        tables = {name: run_sweep(scenario, grid, tmp_path / name, ex)
                  for name, ex in (("inline", InlineExecutor()), ("process", process), ("dask", dask_executor))}
    finally:
        process.close()
    inline = tables["inline"].drop(columns="wall_s")
    assert len(inline) == 8 and inline["completed"].eq(50).all()
    assert inline["request_throughput"].nunique() == 8  # every point is a different run
    for name in ("process", "dask"):
        pd.testing.assert_frame_equal(tables[name].drop(columns="wall_s"), inline)
        on_disk = pd.read_csv(tmp_path / name / "sweep.csv").drop(columns="wall_s")
        pd.testing.assert_frame_equal(on_disk, pd.read_csv(tmp_path / "inline" / "sweep.csv").drop(columns="wall_s"))


def _children(pid: int) -> set[int]:
    """Live processes whose parent is ``pid`` (from /proc)."""
    from pathlib import Path

    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the guard is Linux's prctl")
def test_a_killed_sweep_leaves_no_live_worker(tmp_path):
    """kill -9 of a sweep left its pool workers running its jobs a minute later (issue 14)."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen([sys.executable, "-m", "simbatch", "sweep", "sweep_chat", "--jobs", "2",
                             "--set", "workload.synthetic.num_requests=20000", "--out", str(tmp_path / "sw")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while len(workers) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        workers = _children(proc.pid)
    assert len(workers) >= 2, "the sweep never started its workers"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers)
