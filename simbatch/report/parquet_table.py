"""A run's tables as Parquet: written from numpy columns by pyarrow, read back as DataFrames.

A million-request run's ``steps.csv`` is 450 MB of decimal text that takes
tens of seconds to write (every float through ``repr``); the same columns as
Parquet are written in about a second, a fraction of the size, and read back
with their types (issue 15, item 4). pyarrow is imported here only, so a run
that writes CSV never loads it; and numeric columns are handed to pyarrow as
buffers (:func:`_arrow_array`), not through ``pyarrow.array``, which imports
pandas (0.3 s or more) to ask whether a numpy array is a pandas object.

A missing value (NaN: a request's ``finish_s`` when it did not finish) is
written as a Parquet null, which is what the CSV's empty cell is; pandas
reads either back as NaN.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from simbatch.errors import SimbatchError

# Snappy (pyarrow's default, which every Parquet reader reads), and dictionary encoding for all but
# float columns: a run's floats (times, latencies) are nearly all distinct, so their dictionary is
# built only to be dropped. On speed_c's 3.9 million steps (2-core machine): 1.1 s and 166 MB this
# way, 1.7 s and 170 MB with pyarrow's defaults, 1.9 s and 140 MB with zstd.
COMPRESSION = "snappy"


def has_pyarrow() -> bool:
    """Whether pyarrow (the ``parquet`` extra, 170 MB installed) is here: Parquet needs it, CSV
    does not, so a plain install can leave it out."""
    return importlib.util.find_spec("pyarrow") is not None


def require_pyarrow(where: str) -> None:
    """A one-line error at ``where`` when Parquet is asked for and pyarrow is not installed."""
    if not has_pyarrow():
        raise SimbatchError(where, "Parquet needs pyarrow, which this installation lacks: "
                                   "pip install 'simbatch[parquet]' (or write CSV)")


def write_parquet(path, table) -> None:
    """Write ``table`` (a DataFrame, or a mapping of column name to 1-D array) to ``path`` as Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(table, Mapping):
        arrow = pa.table({str(name): _arrow_array(np.asarray(values)) for name, values in table.items()})
    else:
        arrow = pa.Table.from_pandas(table, preserve_index=False)
    dictionary = [f.name for f in arrow.schema if not pa.types.is_floating(f.type)]
    pq.write_table(arrow, path, compression=COMPRESSION, use_dictionary=dictionary)


def _arrow_array(values: np.ndarray):
    """A 1-D numpy column as a pyarrow array: numbers and booleans from their buffers (no copy of
    an aligned int or float column), NaN marked null; anything else through ``pyarrow.array``."""
    import pyarrow as pa

    kind = values.dtype.kind
    if kind == "O" and values.ndim == 1 and (texts := _texts(values)) is not None:
        return texts
    if values.ndim != 1 or kind not in "iufb":
        return pa.array(values, from_pandas=True)
    values = np.ascontiguousarray(values, values.dtype.newbyteorder("="))
    if kind == "b":
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, _bits(values)])
    missing = np.isnan(values) if kind == "f" else None
    nulls = int(missing.sum()) if missing is not None else 0
    validity = _bits(~missing) if nulls else None
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [validity, pa.py_buffer(values)], null_count=nulls)


def _texts(values: np.ndarray):
    """An object column of strings (a step's ``stop_reason``) as a pyarrow string array, built
    from its buffers: ``pyarrow.array`` would import pandas, which a run does not otherwise
    load. None when some value is not a string."""
    import pyarrow as pa

    data = [v.encode() if isinstance(v, str) else None for v in values.tolist()]
    if None in data:
        return None
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, data), np.int64, len(data)), out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


def _bits(flags: np.ndarray):
    """Booleans as an Arrow bitmap (least significant bit first)."""
    import pyarrow as pa

    return pa.py_buffer(np.packbits(flags, bitorder="little"))


def parquet_columns(path: Path) -> list[str]:
    """The column names of a Parquet file (from its footer; no data is read)."""
    require_pyarrow(str(path))
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise SimbatchError(str(path), f"unreadable Parquet: {exc}".splitlines()[0]) from None


def read_parquet(path: Path, columns: tuple[str, ...] | None = None):
    """``columns`` of a Parquet file (all when None) as a pandas DataFrame; a :class:`SimbatchError`
    names the file when it is unreadable (truncated: its footer is at the end) or lacks a column."""
    require_pyarrow(str(path))
    import pyarrow.parquet as pq

    missing = [c for c in columns or () if c not in parquet_columns(path)]
    if missing:
        raise SimbatchError(str(path), f"missing columns: {', '.join(missing)}")
    try:
        return pq.read_table(path, columns=list(columns) if columns else None).to_pandas()
    except (OSError, ValueError) as exc:
        raise SimbatchError(str(path), f"unreadable Parquet: {exc}".splitlines()[0]) from None
