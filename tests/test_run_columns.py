"""A run's tables as numpy columns: the same metrics as from DataFrames, and no pandas to get them."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from simbatch.metrics import replica_summaries, request_columns, request_table, step_columns, steps_table, summarize
from simbatch.metrics.columns import group_rows, num_rows, take_rows
from simbatch.metrics.disaggregation import disaggregation_summary
from simbatch.runs.one import RunOutput, run
from simbatch.scenario.spec import load_scenario


@pytest.fixture(scope="module", params=["classroom", "disaggregated"])
def out(request):
    return run(load_scenario(request.param, ["workload.num_requests=40"] if request.param != "classroom" else []))


def test_tables_are_the_dataframes_columns(out):
    log, wl = out.result.log, out.result.workload
    for columns, frame in ((request_columns(log, wl), request_table(log, wl)),
                           (step_columns(log), steps_table(log))):
        assert list(columns) == list(frame.columns)
        for name, values in columns.items():
            if values.dtype == object:  # a text column (stop_reason): pandas gives it its string dtype
                assert pd.api.types.is_string_dtype(frame[name]) and list(values) == frame[name].tolist()
                continue
            assert values.dtype == frame[name].dtype and np.array_equal(values, frame[name].to_numpy(), equal_nan=True)
    assert out.requests.equals(request_table(log, wl)) and out.steps.equals(steps_table(log))


def test_metrics_of_columns_and_of_dataframes_are_identical(out):
    log, wl, r = out.result.log, out.result.workload, out.result
    kw = {"slo": {"ttft_ms": 500, "tpot_ms": 50}, "peak_flops": r.peak_flops, "peak_bandwidth": r.peak_bandwidth}
    cols = (request_columns(log, wl), step_columns(log))
    frames = (request_table(log, wl), steps_table(log))
    as_text = [json.dumps(summarize(log, wl, requests=req, steps=st, **kw)) for req, st in (cols, frames)]
    assert as_text[0] == as_text[1]
    duration = out.summary["duration_s"]
    reps = [replica_summaries(req, st, duration, r.replica_info(), r.peak_flops, r.peak_bandwidth)
            for req, st in (cols, frames)]
    assert json.dumps(reps[0]) == json.dumps(reps[1])
    if r.disaggregation is not None:
        d = [disaggregation_summary(req, st, duration, r.disaggregation) for req, st in (cols, frames)]
        assert json.dumps(d[0]) == json.dumps(d[1])


def test_run_output_pickles_and_takes_either_form(out):
    back = pickle.loads(pickle.dumps(out))
    assert back.summary == out.summary and back.requests.equals(out.requests)
    given = RunOutput(out.result, out.summary, out.requests, out.steps)  # as validation builds one
    assert given.request_columns.keys() == out.request_columns.keys()
    assert all(np.array_equal(given.step_columns[k], v) for k, v in out.step_columns.items())


def test_column_helpers():
    table = {"r": np.array([2, 0, 2, 1]), "x": np.array([1.0, 2.0, 3.0, 4.0])}
    groups = group_rows(table["r"])
    assert list(groups) == [0, 1, 2] and groups[2].tolist() == [0, 2]
    theirs = pd.DataFrame(table).groupby("r").indices  # what replica_summaries grouped with before
    assert list(theirs) == list(groups) and all(np.array_equal(groups[k], v) for k, v in theirs.items())
    assert take_rows(table, groups[2])["x"].tolist() == [1.0, 3.0]
    assert num_rows(table) == 4 and num_rows({}) == 0 and num_rows(pd.DataFrame(table)) == 4


def test_running_and_summarising_never_import_pandas():
    code = ("import sys; from simbatch.runs.one import run; from simbatch.scenario.spec import load_scenario; "
            "out = run(load_scenario('classroom')); "
            "print(out.summary['completed'], sorted(m for m in ('pandas', 'matplotlib', 'pyarrow') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "4 []"
