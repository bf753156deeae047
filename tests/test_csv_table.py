"""The fast CSV writer writes exactly what ``DataFrame.to_csv(index=False)`` writes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simbatch.report.csv_table import write_csv


def _same_as_pandas(tmp_path, table: pd.DataFrame) -> None:
    ours, theirs = tmp_path / "ours.csv", tmp_path / "pandas.csv"
    write_csv(ours, table)
    table.to_csv(theirs, index=False)
    assert ours.read_bytes() == theirs.read_bytes()


def test_floats_of_every_magnitude_match_pandas(tmp_path):
    rng = np.random.default_rng(0)
    mags = 10.0 ** rng.uniform(-20, 20, 5000)
    values = np.concatenate([mags * rng.choice([-1, 1], 5000), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e16,
                                                                 9999999999999998.0, 1e-4, 0.0001001, 1e-5,
                                                                 0.1, 1 / 3, 2.5e-310]])
    _same_as_pandas(tmp_path, pd.DataFrame({"x": values, "n": np.arange(len(values)),
                                            "b": np.arange(len(values)) % 3 == 0}))


def test_text_missing_values_and_quoting_match_pandas(tmp_path):
    table = pd.DataFrame({"name": ["a", 'say "hi"', "x,y", "two\nlines", None, ""],
                          "v": [1.5, np.nan, 2.0, 3.0, 4.0, 5.0],
                          "u": np.array([1, 2, 3, 4, 5, 2**63], dtype=np.uint64)})
    _same_as_pandas(tmp_path, table)


@pytest.mark.parametrize("table", [
    pd.DataFrame({"f32": np.array([0.1, 2.5], dtype=np.float32)}),
    pd.DataFrame({"cat": pd.Categorical(["a", "b"])}),
    pd.DataFrame({"nullable": pd.array([1, None], dtype="Int64")}),
    pd.DataFrame({"mixed": [1, "a"]}),
    pd.DataFrame({"one": [1.0, np.nan]}),
    pd.DataFrame({"a": [1, 2], "nullable": pd.array([1, None], dtype="Int64")}),
    pd.DataFrame({"a,b": [1, 2]}),
    pd.DataFrame({"empty": pd.Series([], dtype=float), "e2": pd.Series([], dtype=int)}),
], ids=["float32", "category", "nullable", "mixed-object", "one-column", "nullable-beside", "quoted-name",
    "no-rows"])
def test_other_tables_fall_back_to_pandas_and_still_match(tmp_path, table):
    _same_as_pandas(tmp_path, table)


def test_a_real_runs_tables_match_pandas(tmp_path):
    from simbatch.api import run
    from simbatch.scenario.spec import load_scenario

    out = run(load_scenario("chat"))
    _same_as_pandas(tmp_path, out.requests)
    _same_as_pandas(tmp_path, out.steps)


def test_blocks_and_each_columns_shortcut_match_pandas(tmp_path, monkeypatch):
    """Rows written a few at a time (block edges fall mid-table), integer columns narrow enough for
    the table of texts (negative ones too) or not, and float blocks that are all whole numbers
    (written as integers plus .0) beside blocks that are not (-0.0, 1e16, a NaN, a fraction)."""
    import simbatch.report.csv_table as csv_table

    monkeypatch.setattr(csv_table, "BLOCK_ROWS", 7)
    n = 60
    whole = np.arange(n, dtype=float) * 1e9
    whole[[8, 20, 33]] = [-0.0, 1e16, np.nan]  # each spoils its own block's integer shortcut only
    whole[45] = 0.5
    table = pd.DataFrame({"narrow": np.arange(n) % 5 - 2, "wide": np.arange(n) * 10**12,
                          "flops": whole, "b": np.arange(n) % 2 == 0,
                          "ints_as_floats": np.where(np.arange(n) % 9 == 0, np.nan, np.arange(n) * 3.0),
                          "big": np.array([2**64 - 1 - i for i in range(n)], dtype=np.uint64)})
    _same_as_pandas(tmp_path, table)
    mapping = tmp_path / "mapping.csv"
    csv_table.write_csv(mapping, {name: table[name].to_numpy() for name in table.columns})
    assert mapping.read_bytes() == (tmp_path / "pandas.csv").read_bytes()


def test_a_table_longer_than_a_block_is_written_whole(tmp_path):
    from simbatch.report.csv_table import BLOCK_ROWS

    n = BLOCK_ROWS * 2 + 3
    rng = np.random.default_rng(1)
    _same_as_pandas(tmp_path, pd.DataFrame({"i": np.arange(n), "x": rng.uniform(0, 3e4, n)}))
