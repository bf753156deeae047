"""Writing a table as CSV twice as fast as ``DataFrame.to_csv``, byte for byte the same.

A run's ``requests.csv`` and ``steps.csv`` hold tens of thousands of rows of
plain numbers; pandas formats each float64 column through numpy's ``astype(str)``
and its CSV writer, which took 0.6 s of a 2.2 s ``simbatch run`` on the Azure
conversation trace (issue 18). Python's own ``repr`` gives the same shortest
round-trip text for a float64 (both switch to exponent notation below 1e-4 and
from 1e16), ``str`` the same for integers and booleans, so each column is
turned into strings once and the rows are joined in C.

Only what is proven identical takes this path: int, uint, bool and float64
columns, and object columns of strings or missing values (quoted as the csv
module's minimal quoting does). Any other dtype (float32, categories, dates,
nullable integers), any column name that needs quoting and a one-column
table go to pandas
unchanged. ``tests/test_csv_table.py`` checks the bytes against pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

_QUOTE = (",", '"', "\n", "\r")


def write_csv(path, table) -> None:
    """Write ``table`` (a DataFrame, or a mapping of column name to 1-D array) to ``path`` as
    ``table.to_csv(path, index=False)`` would (``pd.DataFrame(table)`` for a mapping)."""
    if isinstance(table, Mapping):
        columns = [np.asarray(v) for v in table.values()]
        names, rows = [str(c) for c in table], (len(columns[0]) if columns else 0)
    else:
        columns = [series for _, series in table.items()]
        names, rows = [str(c) for c in table.columns], len(table)
    # One column: the csv module quotes an empty row as "" (a row of one empty field).
    plain = len(names) > 1 and not any(map(_needs_quote, names))
    texts = _column_texts(columns) if plain else None
    if texts is None:
        _pandas_csv(path, table)
        return
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(",".join(names) + "\n")
        if rows:
            f.write("\n".join(map(",".join, zip(*texts))))
            f.write("\n")


def _pandas_csv(path, table) -> None:
    import pandas as pd

    frame = pd.DataFrame(table, columns=list(table)) if isinstance(table, Mapping) else table
    frame.to_csv(path, index=False)


def _column_texts(columns: list) -> list[list[str]] | None:
    """Each column as its CSV cells, or None if one has a dtype this writer leaves to pandas."""
    out = []
    for series in columns:
        cells = _cells(series)
        if cells is None:
            return None
        out.append(cells)
    return out


def _cells(series) -> list[str] | None:
    if not isinstance(series.dtype, np.dtype):
        return None  # pandas' extension types (nullable integers, categories...)
    values = np.asarray(series)
    kind = values.dtype.kind
    if kind in "iub":
        return list(map(str, values.tolist()))
    if values.dtype == np.float64:
        cells = list(map(repr, values.tolist()))
        missing = np.isnan(values)
        if missing.any():
            for i in np.flatnonzero(missing).tolist():
                cells[i] = ""  # pandas' na_rep
        return cells
    if kind == "O":
        return _text_cells(values.tolist())
    return None


def _text_cells(values: list) -> list[str] | None:
    cells = []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            cells.append("")
        elif isinstance(v, str):
            cells.append('"' + v.replace('"', '""') + '"' if _needs_quote(v) else v)
        else:
            return None  # numbers, lists... in an object column: pandas decides
    return cells


def _needs_quote(text: str) -> bool:
    return any(c in text for c in _QUOTE)
