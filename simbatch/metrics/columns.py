"""Tables as named numpy columns: what the metrics compute and a run keeps, without pandas.

A run's request and step tables are built as ``{column name: 1-D array}`` dicts
(:func:`~simbatch.metrics.requests.request_columns`,
:func:`~simbatch.metrics.summary.step_columns`), so ``simbatch run`` never
imports pandas (0.3 s of a 2 s command, issue 18). Every metric reads a table
through :func:`column`, which takes such a dict or a pandas DataFrame alike;
:func:`to_frame` makes the DataFrame the public functions return.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

Columns = dict  # column name -> 1-D numpy array, all of one length, in table order


def column(table, name: str, dtype=None) -> np.ndarray:
    """Column ``name`` of ``table`` (a :data:`Columns` dict or a DataFrame) as a numpy array."""
    return np.asarray(table[name], dtype=dtype)


def num_rows(table) -> int:
    """Rows of ``table`` (a :data:`Columns` dict, 0 when it has no column, or a DataFrame)."""
    if isinstance(table, RowsView):
        return table.num_rows  # without taking a column
    if isinstance(table, Mapping):
        return len(next(iter(table.values()))) if table else 0
    return len(table)


def take_rows(table, rows: np.ndarray) -> Columns:
    """The ``rows`` (indices or a boolean mask) of every column of ``table``."""
    return {name: column(table, name)[rows] for name in names(table)}


class RowsView(Mapping):
    """The ``rows`` of ``table``, each column taken only when read (what :func:`take_rows`
    gives, without copying the columns nobody reads: one replica's share of a
    million-request run's 3.9 million steps is 18 columns, of which its metrics read 4)."""

    def __init__(self, table, rows: np.ndarray):
        self._table, self._rows = table, rows
        self._taken: dict[str, np.ndarray] = {}  # columns read so far (a metric may read one twice)
        self.num_rows = int(np.count_nonzero(rows)) if np.asarray(rows).dtype == bool else len(rows)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._taken:
            self._taken[name] = column(self._table, name)[self._rows]
        return self._taken[name]

    def __iter__(self):
        return iter(names(self._table))

    def __len__(self) -> int:
        return len(names(self._table))


def names(table) -> list[str]:
    """Column names of ``table`` in order."""
    return list(table) if isinstance(table, Mapping) else [str(c) for c in table.columns]


def group_rows(values: np.ndarray) -> dict[int, np.ndarray]:
    """Row indices of each distinct value of ``values``, ascending (``groupby(...).indices``)."""
    values = np.asarray(values)
    if _small_counts(values):  # replica numbers: counted, not sorted twice
        order, counts = group_order(values)
        keys = np.flatnonzero(counts)
        return dict(zip(keys.tolist(), np.split(order, np.cumsum(counts[keys])[:-1])))
    order = np.argsort(values, kind="stable")
    keys, starts = np.unique(values[order], return_index=True)
    return dict(zip(keys.tolist(), np.split(order, starts[1:])))


# Keys below this are sorted by numpy's radix sort (an 8- or 16-bit copy, sorted stably).
_RADIX_KEYS = 1 << 16


def _small_counts(values: np.ndarray) -> bool:
    """Whether ``values`` are integers in ``[0, 2**16)`` (replica numbers), so :func:`group_order`
    takes them."""
    if values.dtype.kind not in "iu" or values.ndim != 1:
        return False
    return values.size == 0 or (int(values.min()) >= 0 and int(values.max()) < _RADIX_KEYS)


def group_order(values: np.ndarray, size: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(np.argsort(values, kind="stable"), np.bincount(values, minlength=size))`` of
    non-negative integers (replica numbers), the order in linear time.

    The same permutation as that stable argsort (a stable sort's result is unique),
    found by numpy's radix sort on a uint8 / uint16 copy of the keys when they fit
    (a third to half the time of sorting int64 keys on 3.9 million steps)."""
    values = np.asarray(values)
    counts = np.bincount(values.astype(np.intp, copy=False), minlength=size)
    if counts.size <= 1 << 8:
        keys = values.astype(np.uint8)
    elif counts.size <= _RADIX_KEYS:
        keys = values.astype(np.uint16)
    else:
        keys = values
    return np.argsort(keys, kind="stable"), counts


def to_frame(table: Columns):
    """``table`` as a pandas DataFrame (pandas is imported here, only when a caller wants one)."""
    import pandas as pd

    return pd.DataFrame(table, columns=list(table))
