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
    if isinstance(table, Mapping):
        return len(next(iter(table.values()))) if table else 0
    return len(table)


def take_rows(table, rows: np.ndarray) -> Columns:
    """The ``rows`` (indices or a boolean mask) of every column of ``table``."""
    return {name: column(table, name)[rows] for name in names(table)}


def names(table) -> list[str]:
    """Column names of ``table`` in order."""
    return list(table) if isinstance(table, Mapping) else [str(c) for c in table.columns]


def group_rows(values: np.ndarray) -> dict[int, np.ndarray]:
    """Row indices of each distinct value of ``values``, ascending (``groupby(...).indices``)."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    keys, starts = np.unique(values[order], return_index=True)
    return dict(zip(keys.tolist(), np.split(order, starts[1:])))


def to_frame(table: Columns):
    """``table`` as a pandas DataFrame (pandas is imported here, only when a caller wants one)."""
    import pandas as pd

    return pd.DataFrame(table, columns=list(table))
