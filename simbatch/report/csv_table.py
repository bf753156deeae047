"""Writing a table as CSV fast and in bounded memory, byte for byte what ``DataFrame.to_csv`` writes.

A run's ``requests.csv`` and ``steps.csv`` hold up to millions of rows of
plain numbers (a million requests make 3.9 million steps). pandas formats each
float64 column through numpy's ``astype(str)`` and its CSV writer, which took
0.6 s of a 2.2 s ``simbatch run`` on the Azure conversation trace (issue 18).
Python's own ``repr`` gives the same shortest round-trip text for a float64
(both switch to exponent notation below 1e-4 and from 1e16), ``str`` the same
for integers and booleans, so cells are made in Python and the rows joined in C.

The table is written :data:`BLOCK_ROWS` rows at a time: only one block's cells
exist as strings at once. Building every cell of a million-request run first
took 5.9 GiB and 38 s on its own (issue 15, item 4); a block is a few MiB.
Per column, the cheapest exact text is chosen (:func:`_formatter`): integers
in a narrow range (replica, batch sizes, token counts) are looked up in a table
of their texts; whole float64 blocks of integral values below 1e16
(``useful_flops``) are written as integers plus ``.0``, which is what ``repr``
writes for them, at a third of its cost; other floats go through ``repr``.

Only what is proven identical takes this path: int, uint, bool and float64
columns, and object columns of strings or missing values (quoted as the csv
module's minimal quoting does). Any other dtype (float32, categories, dates,
nullable integers), any column name that needs quoting and a one-column
table go to pandas unchanged. ``tests/test_csv_table.py`` checks the bytes
against pandas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

_QUOTE = (",", '"', "\n", "\r")
BLOCK_ROWS = 1 << 16  # rows made into text at once: 65,536 x 16 columns of short strings, ~60 MiB at most
# An integer column spanning at most this many values is written from a table of their texts (built
# once: ~4 MiB at most), when the table is no longer than the column.
LOOKUP_SPAN = 1 << 16
# From 1e16 on, repr writes a float in exponent notation ("1e+16"), not as an integer plus ".0".
_EXACT_INTEGRAL = 1e16

Cells = Callable[[int, int], list]  # cells(start, stop): the CSV text of rows start..stop-1 of a column


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
    formatters = [_formatter(c) for c in columns] if plain else [None]
    if None in formatters:
        _pandas_csv(path, table)
        return
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(",".join(names) + "\n")
        for start in range(0, rows, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, rows)
            f.write("\n".join(map(",".join, zip(*(cells(start, stop) for cells in formatters)))))
            f.write("\n")


def _pandas_csv(path, table) -> None:
    import pandas as pd

    frame = pd.DataFrame(table, columns=list(table)) if isinstance(table, Mapping) else table
    frame.to_csv(path, index=False)


def _formatter(series) -> Cells | None:
    """How to write a column's cells, block by block; None if its dtype is left to pandas."""
    if not isinstance(series.dtype, np.dtype):
        return None  # pandas' extension types (nullable integers, categories...)
    values = np.asarray(series)
    kind = values.dtype.kind
    if kind == "b":
        texts = np.array(["False", "True"], dtype=object)
        return lambda a, b: texts[values[a:b].view(np.uint8)].tolist()
    if kind in "iu":
        return _int_cells(values)
    if values.dtype == np.float64:
        return lambda a, b: _float_cells(values[a:b])
    if kind == "O":
        cells = _text_cells(values.tolist())  # checked whole first: pandas takes the table otherwise
        return None if cells is None else lambda a, b: cells[a:b]
    return None


def _int_cells(values: np.ndarray) -> Cells:
    """Integers as ``str`` writes them: from a table of texts when their range is narrow."""
    if len(values):
        low, high = int(values.min()), int(values.max())
        span = high - low + 1
        if span <= min(LOOKUP_SPAN, len(values)):
            texts = np.array([str(i) for i in range(low, high + 1)], dtype=object)
            return lambda a, b: texts[values[a:b] - low].tolist()
    return lambda a, b: list(map(str, values[a:b].tolist()))


def _float_cells(values: np.ndarray) -> list[str]:
    """float64 values as ``repr`` writes them, NaN as an empty cell (pandas' ``na_rep``)."""
    missing = np.isnan(values)
    present = values[~missing] if missing.any() else values
    if _integral(present):
        whole = np.where(missing, 0.0, values).astype(np.int64)
        cells = list(map("%d.0".__mod__, whole.tolist()))  # repr(3.0) == "3.0"
    else:
        cells = list(map(repr, values.tolist()))
    for i in np.flatnonzero(missing).tolist():
        cells[i] = ""
    return cells


def _integral(values: np.ndarray) -> bool:
    """Whether ``repr`` writes every value as an integer plus ``.0``: whole numbers below 1e16,
    no infinity, and no -0.0 (``repr`` keeps its sign)."""
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.abs(values) < _EXACT_INTEGRAL) and np.all(values == np.trunc(values))
                    and not np.any((values == 0) & np.signbit(values)))


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
