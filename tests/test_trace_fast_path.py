"""The readers' pandas-free fast path (simbatch.workload.parse) reads what the pandas path reads.

Each fast function may give up (None); whenever it answers, the answer must be the pandas
path's, value for value and bit for bit. And a run of a well-formed trace never imports pandas.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simbatch.workload.parse as parse
from simbatch.errors import SimbatchError
from simbatch.workload import readers

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"

cell = st.one_of(st.from_regex(r"-?[0-9]{1,12}", fullmatch=True),
                 st.sampled_from(["", " 7", "1.0", "x", "1_0", "+5", "٣", "-0", "99999999999999999999"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(cell, min_size=3, max_size=3), max_size=12), st.sampled_from(["\n", "\r\n"]),
       st.booleans(), st.lists(st.integers(0, 12), max_size=3))
def test_csv_columns_match_pandas(tmp_path_factory, rows, newline, trailing, blanks):
    lines = [",".join(r) for r in rows]
    for i in blanks:
        lines.insert(min(i, len(lines)), "")
    text = "a,b,c" + newline + newline.join(lines) + (newline if trailing else "")
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_bytes(text.encode())
    fast = parse.csv_columns(text)
    try:
        slow = readers._load_csv_pandas(path, text)
    except SimbatchError:
        assert fast is None
        return
    if fast is not None:
        assert fast[1] == slow.columns and np.array_equal(fast[2], slow.lines)


@settings(max_examples=200, deadline=None)
@given(st.lists(cell, min_size=1, max_size=20), st.sampled_from([1, None]))
def test_int_column_matches_pandas(raw, minimum):
    fast = parse.int_column(raw, signed=minimum is None)
    t = readers._Table("t.csv", {"n": raw}, np.arange(2, len(raw) + 2))
    try:
        slow = readers._ints_pandas(t, "n", minimum)
    except SimbatchError:
        assert fast is None or np.any(np.abs(fast) > readers.MAX_COUNT) or (minimum and np.any(fast < minimum))
        return
    if fast is not None:
        assert fast.dtype == slow.dtype and np.array_equal(fast, slow)


numbers = st.one_of(st.floats(0, 1e12, allow_nan=False).map(repr), st.integers(0, 10**15).map(str),
                    st.floats(0, 1e6).map(lambda x: f"{x:.7f}"), st.floats(1e-9, 1e9).map(lambda x: f"{x:.3e}"),
                    st.sampled_from(["1.", ".5", "+2", "1e400", "-0", "nan", "1_0", " 3", ""]))


@settings(max_examples=200, deadline=None)
@given(st.lists(numbers, min_size=1, max_size=20))
def test_number_column_matches_pandas(raw):
    fast = parse.number_column(raw)
    if fast is not None:
        slow = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
        assert np.array_equal(fast, slow) and not np.signbit(fast).any()


def test_json_numbers_match_pandas():
    raw = [0, 1.5, 2**52, -0.0, 12, 3e-9]
    fast = parse.number_column(raw)
    slow = pd.to_numeric(pd.Series(raw, dtype=object)).to_numpy(dtype=np.float64)
    assert fast.tobytes() == slow.tobytes()
    assert parse.number_column([1, True]) is None and parse.number_column([float("nan")]) is None


def stamps(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        day = f"2023-{rng.integers(11, 13):02d}-{rng.integers(1, 29):02d}"
        clock = f"{rng.integers(0, 24):02d}:{rng.integers(0, 60):02d}"
        digits = "".join(map(str, rng.integers(0, 10, rng.integers(1, 10))))
        out.append(str(rng.choice([day, f"{day} {clock}", f"{day}T{clock}:{rng.integers(0, 60):02d}",
                               f"{day} {clock}:{rng.integers(0, 60):02d}.{digits}"])))
    return out


@pytest.mark.parametrize("raw", [stamps(0, 3000), stamps(1, 5), [s for s in stamps(2, 400) if len(s) <= 16],
                                 ["2023-11-16 18:15:46.6805900", "2023-11-16 18:15:50.9951690"]],
                         ids=["mixed", "few", "whole-minutes", "azure"])
def test_iso_seconds_match_pandas(raw):
    t = readers._Table("t.csv", {"t": raw}, np.arange(2, len(raw) + 2))
    assert parse.iso_seconds(raw).tobytes() == readers._arrivals_pandas(t, "t", 1.0).tobytes()


@pytest.mark.parametrize("raw", [["2023-11-16", "3000-01-01"], ["2023-02-30"], ["2023-11-16 18:15:46."],
                                 [" 2023-11-16"], ["2023-11-16 18:15:46+01:00"], ["2023-01-01", "2023-06-01"]])
def test_iso_seconds_leave_the_rest_to_pandas(raw):
    assert parse.iso_seconds(raw) is None


@pytest.mark.parametrize("text", [
    '{"a": 1}\n{"a": 2, "b": [1, 2]}\n',
    '\n  {"a": 1}  \r\n\n{"b": null}',
    '{"a": [1\n2]}\n{}, {}\n',  # joining lines would read two objects from three lines
    '{"a": 1} x\n', '[1]\n', '\u00a0{"a": 1}\n', '{"a": NaN}\n', '',
])
def test_jsonl_records_match_json_loads(tmp_path, text):
    path = tmp_path / "t.jsonl"
    path.write_text(text, encoding="utf-8")
    fast = parse.jsonl_records(path.read_text(encoding="utf-8-sig"))
    try:
        records, lines = readers._jsonl_records_one_by_one(path, path.read_text(encoding="utf-8-sig"))
    except SimbatchError:
        assert fast is None
        return
    assert fast is not None and json.dumps(fast[0]) == json.dumps(records) and np.array_equal(fast[1], lines)


def test_record_columns_fill_missing_keys():
    missing = object()
    cols = parse.record_columns([{"a": 1, "b": 2}, {"b": 3}], missing)
    assert cols == {"a": [1, missing], "b": [2, 3]}
    assert parse.record_columns([{"a": 1, "b": 2}, {"a": 3, "b": 4}], missing) == {"a": [1, 3], "b": [2, 4]}


def test_a_run_of_a_well_formed_trace_never_imports_pandas():
    if not SHARED.is_dir():
        pytest.skip("../shared/traces not present")
    code = ("import sys; from simbatch.runs.one import run; from simbatch.scenario.spec import load_scenario; "
            "out = run(load_scenario('azure_code', ['workload.num_requests=200'])); "
            "print(out.summary['completed'], 'pandas' in sys.modules, 'matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["200", "False", "False"]
