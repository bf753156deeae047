"""A run's tables as CSV or Parquet (``--format auto|csv|parquet``, issue 15 item 4): the same
content either way, ``auto`` picks Parquet only for tables too long for a spreadsheet, and
everything that reads a run folder reads both."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from simbatch.cli import main
from simbatch.errors import SimbatchError
from simbatch.report import outputs
from simbatch.report.load import load_results, load_run

TABLES = ("requests", "steps")


def _run(args: list[str]) -> int:
    return main(["run", "classroom", *args])


def _tables(folder) -> set[str]:
    return {p.name for p in folder.iterdir() if p.stem in TABLES}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One run written both ways: (csv folder, parquet folder)."""
    base = tmp_path_factory.mktemp("formats")
    assert _run(["--out", str(base / "csv"), "--format", "csv"]) == 0
    assert _run(["--out", str(base / "parquet"), "--format", "parquet"]) == 0
    return base / "csv", base / "parquet"


def test_parquet_holds_what_the_csv_holds(both):
    csv, parquet = both
    assert _tables(csv) == {"requests.csv", "steps.csv"}
    assert _tables(parquet) == {"requests.parquet", "steps.parquet"}
    for name in TABLES:
        from_csv, from_parquet = pd.read_csv(csv / f"{name}.csv"), pd.read_parquet(parquet / f"{name}.parquet")
        assert len(from_csv) > 0
        pd.testing.assert_frame_equal(from_parquet, from_csv)  # columns, order, dtypes and values
    assert (csv / "summary.json").read_text() == (parquet / "summary.json").read_text()


def test_missing_values_and_every_column_kind_round_trip(tmp_path):
    """NaN (an unfinished request's times) is a Parquet null and reads back as NaN, as the CSV's
    empty cell does; ints, bools and floats keep their values."""
    table = {"id": np.arange(5), "done": np.array([True, False, True, True, False]),
             "finish_s": np.array([1.5, np.nan, 2.25, 1e-7, np.nan]), "big": np.arange(5) * 10**15}
    for fmt in ("csv", "parquet"):
        outputs.write_run(tmp_path / fmt, {"x": 1}, table, table, ["log"], format=fmt)
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "parquet" / "requests.parquet").column("finish_s").null_count == 2
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "parquet" / "requests.parquet"),
                                  pd.read_csv(tmp_path / "csv" / "requests.csv"))


def test_auto_writes_parquet_only_past_a_spreadsheets_rows():
    rows = outputs.SPREADSHEET_ROWS
    small, large = {"a": np.zeros(rows)}, {"a": np.zeros(rows + 1)}
    assert outputs.table_format("auto", small, small) == "csv"
    assert outputs.table_format("auto", small, large) == "parquet"  # one long table: both go Parquet
    assert outputs.table_format("auto", pd.DataFrame(large), {}) == "parquet"
    assert outputs.table_format("csv", large) == "csv" and outputs.table_format("parquet", small) == "parquet"


def test_auto_on_the_command_line_and_csv_forcing_it(tmp_path, monkeypatch):
    """classroom's step table (320 rows) over a threshold lowered to 100: ``auto`` (the default)
    writes Parquet, ``--format csv`` still CSV; under the real threshold the default is CSV."""
    assert _run(["--out", str(tmp_path / "default")]) == 0
    assert _tables(tmp_path / "default") == {"requests.csv", "steps.csv"}
    monkeypatch.setattr(outputs, "SPREADSHEET_ROWS", 100)
    assert _run(["--out", str(tmp_path / "auto")]) == 0
    assert _tables(tmp_path / "auto") == {"requests.parquet", "steps.parquet"}  # 4 requests: with the steps
    assert _run(["--out", str(tmp_path / "forced"), "--format", "csv"]) == 0
    assert _tables(tmp_path / "forced") == {"requests.csv", "steps.csv"}


def test_the_written_line_names_the_files(tmp_path, capsys):
    assert _run(["--out", str(tmp_path / "p"), "--format", "parquet"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        f"wrote {tmp_path / 'p'}/summary.json, requests.parquet, steps.parquet, run.log"


@pytest.mark.parametrize("args, cause", [
    (["--format", "xml"], "--format: unknown table format 'xml'; allowed: auto, csv, parquet"),
    (["--format", ""], "--format: unknown table format ''; allowed: auto, csv, parquet"),
    (["--format", "parquet", "--no-out"], "--format: needs --out DIR"),
])
def test_a_bad_format_is_a_one_line_error(tmp_path, capsys, args, cause):
    out = tmp_path / "out"
    argv = [a for a in args if a != "--no-out"] + ([] if "--no-out" in args else ["--out", str(out)])
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"simbatch: error: {cause}"), err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_report_reads_both_formats_alike(both, tmp_path):
    csv, parquet = both
    a, b = load_run(csv), load_run(parquet)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert main(["report", str(parquet)]) == 0
    assert (parquet / "report.html").is_file()


def test_compare_writes_every_policy_in_one_format(tmp_path):
    out = tmp_path / "cmp"
    assert main(["compare", "classroom", "--policies", "static,continuous", "--out", str(out),
                 "--format", "parquet", "--jobs", "1"]) == 0
    for policy in ("static", "continuous"):
        assert _tables(out / policy) == {"requests.parquet", "steps.parquet"}
    data = load_results(out)
    assert list(data.runs) == ["static", "continuous"] and all(len(r.steps) > 0 for r in data.runs.values())
    assert main(["compare", "classroom", "--format", "xml"]) == 2


def test_a_truncated_or_doubled_table_is_named(both, tmp_path):
    import shutil

    _, parquet = both
    cut = tmp_path / "cut"
    shutil.copytree(parquet, cut)
    data = (cut / "requests.parquet").read_bytes()
    (cut / "requests.parquet").write_bytes(data[: len(data) // 2])  # the footer (schema) is at the end
    with pytest.raises(SimbatchError, match=r"requests\.parquet: unreadable Parquet"):
        load_run(cut)
    twice = tmp_path / "twice"
    shutil.copytree(parquet, twice)
    pd.read_parquet(parquet / "steps.parquet").to_csv(twice / "steps.csv", index=False)
    with pytest.raises(SimbatchError, match="holds both steps.csv and steps.parquet"):
        load_run(twice)
    (twice / "steps.csv").unlink()
    (twice / "steps.parquet").unlink()
    with pytest.raises(SimbatchError, match=r"steps.csv: missing \(a run folder holds summary.json, and "
                                            r"steps.csv or steps.parquet\)"):
        load_run(twice)


def test_a_foreign_parquet_request_table_is_caught_by_its_row_count(both, tmp_path):
    import shutil

    _, parquet = both
    short = tmp_path / "short"
    shutil.copytree(parquet, short)
    pd.read_parquet(parquet / "requests.parquet").iloc[:-1].to_parquet(short / "requests.parquet")
    with pytest.raises(SimbatchError, match=r"requests\.parquet: 3 rows, but summary.json counts 4 requests"):
        load_run(short)


def test_a_parquet_request_table_reads_as_a_measured_log(both):
    from simbatch.measured.readers import read_measured

    csv, parquet = both
    a, b = read_measured(csv / "requests.csv"), read_measured(parquet / "requests.parquet")
    assert b.source.endswith("requests.parquet") and len(b.arrival_s) == 4
    for name in ("arrival_s", "prompt_tokens", "output_tokens", "first_token_s", "finish_s"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_csv_runs_load_neither_pandas_nor_pyarrow(tmp_path):
    """Writing CSV needs neither; Parquet loads pyarrow (not pandas)."""
    def modules(fmt: str) -> str:
        code = ("import sys; from simbatch.cli import main; "
                f"main(['run', 'classroom', '--out', {str(tmp_path / fmt)!r}, '--format', {fmt!r}]); "
                "print(sorted(m for m in ('pandas', 'pyarrow') if m in sys.modules), file=sys.stderr)")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        return done.stderr.strip().splitlines()[-1]

    assert modules("csv") == "[]"
    assert modules("parquet") == "['pyarrow']"
