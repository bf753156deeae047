"""Trace readers: turn a request-trace file into a :class:`Workload`.

Every reader maps file columns onto three roles (arrival, prompt, output, plus
optional hash_ids / session_id / priority) and shares one loader and one set of
vectorised checks, so a bad value anywhere is reported the same way:
``SimbatchError("<path>:<line>", "<column>: expected ..., got '<raw>'")`` with
1-based file lines (the CSV header is line 1). Arrivals come back in seconds,
re-based so the first request arrives at 0.0, sorted (stable).

Well-formed files are parsed without pandas (:mod:`simbatch.workload.parse`, whose
functions give up, returning None, on anything they cannot prove they read as pandas
does); the rest, and every error, go through pandas as before.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import simbatch.workload.parse as parse
from simbatch.errors import SimbatchError
from simbatch.files.textfile import read_text
from simbatch.workload.request import Workload
from simbatch.workload.transforms import take

FORMATS = ("azure", "mooncake", "lengths", "burstgpt", "generic")
TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6}  # units per second (divide, so ms stay exact)
GENERIC_KEYS = ("arrival", "prompt", "output", "time_unit", "hash_ids", "session_id", "priority")
_AZURE = {"arrival": "TIMESTAMP", "prompt": "ContextTokens", "output": "GeneratedTokens"}
_MOONCAKE = {"arrival": "timestamp", "prompt": "input_length", "output": "output_length",
             "hash_ids": "hash_ids", "time_unit": "ms"}
_LENGTHS = {"prompt": "num_prefill_tokens", "output": "num_decode_tokens"}
# BurstGPT (github.com/HPMLL/BurstGPT, data/BurstGPT_*.csv): Timestamp (s from the trace's
# start), Model, Request tokens, Response tokens, Total tokens, Log Type.
_BURSTGPT = {"arrival": "Timestamp", "prompt": "Request tokens", "output": "Response tokens"}
_MISSING = object()  # a JSONL key absent from one line (told apart from an explicit null)


@dataclass(slots=True)
class _Table:
    """Raw column values as loaded, plus the file line of every row (for errors)."""

    path: str
    columns: dict[str, list]
    lines: np.ndarray

    def cells(self, name: str) -> list:
        """Column ``name``'s raw values, or the error naming the header when it is missing."""
        if name not in self.columns:
            have = ", ".join(self.columns) or "none"
            raise SimbatchError(f"{self.path}:1", f"missing column '{name}' (columns: {have})")
        return self.columns[name]

    def column(self, name: str):
        """Column ``name`` as a pandas Series of its raw values, for parsing with pandas."""
        import pandas as pd

        return pd.Series(self.cells(name), dtype=object)

    def fail(self, row: int, name: str, expected: str) -> None:
        raw = self.columns[name][row]
        got = "nothing (key missing)" if raw is _MISSING else repr(raw)
        raise SimbatchError(f"{self.path}:{self.lines[row]}", f"{name}: expected {expected}, got {got}")


def read_azure(path: str | Path) -> Workload:
    """Read an Azure LLM inference 2023 CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``)."""
    return _read(path, _AZURE, "azure", _text(path))


def read_mooncake(path: str | Path) -> Workload:
    """Read a Mooncake JSONL trace (ms ``timestamp``, lengths, 512-token ``hash_ids``)."""
    return _read(path, _MOONCAKE, "mooncake", _text(path))


def read_burstgpt(path: str | Path) -> Workload:
    """Read a BurstGPT CSV (``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log
    Type``; the Azure 2024 week-long traces share the 2023 layout: :func:`read_azure`).

    Its README says failed requests are the rows whose ``Response tokens`` is 0 (the
    ``BurstGPT_without_fails_*.csv`` files leave them out): such rows, and any with no
    request token, computed nothing, so they are dropped with a note saying how many."""
    text = _text(path)
    t = _load(path, text)
    if len(t.lines) == 0:
        raise SimbatchError(str(path), "empty trace: no requests")
    prompt = _ints(t, _BURSTGPT["prompt"], minimum=0)
    output = _ints(t, _BURSTGPT["output"], minimum=0)
    keep = (prompt > 0) & (output > 0)
    if not keep.any():
        raise SimbatchError(str(path), "every row is a failed request (0 request or response tokens)")
    arrival = _arrivals(t, _BURSTGPT["arrival"], 1.0)
    w = Workload(arrival, prompt, output, source=f"burstgpt:{Path(path).name}")
    dropped = int(len(keep) - keep.sum())
    if dropped:
        w = take(w, np.flatnonzero(keep))
        w.notes.append(f"{Path(path).name}: {dropped:,} failed request(s) dropped (0 request or response "
                       f"tokens, as BurstGPT marks failures)")
    return _sorted_from_zero(w, str(path))


def read_lengths(path: str | Path) -> Workload:
    """Read a ``num_prefill_tokens,num_decode_tokens`` CSV (Vidur's processed traces).

    Uses ``arrived_at`` (seconds) when present; otherwise every ``arrival_s`` is
    NaN and the caller must supply arrivals (``build_workload`` does, from an
    ``arrival:`` spec).
    """
    text = _text(path)
    return _read(path, _lengths_roles(text), "lengths", text)


def _lengths_roles(text: str) -> dict:
    return {**_LENGTHS, "arrival": "arrived_at"} if "arrived_at" in _header(text) else _LENGTHS


def read_generic(path: str | Path, columns: dict, where: str | None = None) -> Workload:
    """Read any CSV / JSONL trace through a column mapping.

    ``columns`` = ``{arrival, prompt, output, time_unit: s|ms|us, hash_ids,
    session_id, priority}``; ``prompt`` and ``output`` are required. ``arrival``
    may be numeric (in ``time_unit``) or datetime strings; without it arrivals
    are NaN, as in :func:`read_lengths`. ``where`` labels mapping errors.
    """
    check_column_mapping(columns, GENERIC_KEYS, ("prompt", "output"), where or "columns",
                         "missing: the column holding the token count")
    return _read(path, columns, "generic", _text(path))


def check_column_mapping(columns: object, allowed: tuple, required: tuple, where: str, missing: str) -> None:
    """A generic reader's column mapping (request traces and measured logs alike): a mapping of
    ``allowed`` keys to column names, every ``required`` key present (else ``missing``), and
    ``time_unit`` one of :data:`TIME_UNITS`."""
    if not isinstance(columns, dict):
        raise SimbatchError(where, f"expected a mapping of {', '.join(allowed)}, got {columns!r}")
    for key, value in columns.items():
        if key not in allowed:
            raise SimbatchError(f"{where}.{key}", f"unknown key; allowed: {', '.join(allowed)}")
        if not isinstance(value, str) or not value:
            raise SimbatchError(f"{where}.{key}", f"expected a column name, got {value!r}")
    for key in required:
        if key not in columns:
            raise SimbatchError(f"{where}.{key}", missing)
    if columns.get("time_unit", "s") not in TIME_UNITS:
        raise SimbatchError(f"{where}.time_unit", f"expected one of {', '.join(TIME_UNITS)}, "
                            f"got {columns['time_unit']!r}")


def read_trace(path: str | Path, fmt: str | None = None, columns: dict | None = None,
               where: str = "workload") -> Workload:
    """Read a trace in ``fmt`` (inferred by :func:`detect_format` when None)."""
    check_trace_format(fmt, where)
    text = _text(path)  # read once: detecting the format and reading the rows share it
    fmt = fmt or _detect(Path(path), text)
    if fmt == "generic":
        if columns is None:
            raise SimbatchError(f"{where}.columns", unrecognised(Path(path), text))
        check_column_mapping(columns, GENERIC_KEYS, ("prompt", "output"), f"{where}.columns",
                             "missing: the column holding the token count")
        return _read(path, columns, "generic", text)
    if columns is not None:
        raise SimbatchError(f"{where}.columns", f"only allowed with format: generic (this is {fmt})")
    if fmt == "burstgpt":
        return read_burstgpt(path)
    roles = _lengths_roles(text) if fmt == "lengths" else {"azure": _AZURE, "mooncake": _MOONCAKE}[fmt]
    return _read(path, roles, fmt, text)


def check_trace_format(fmt, where: str) -> None:
    """A trace format given in a scenario must be one of :data:`FORMATS` (None: inferred)."""
    if fmt is not None and fmt not in FORMATS:
        raise SimbatchError(f"{where}.format", f"unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")


def detect_format(path: str | Path) -> str:
    """Guess a trace's format from its extension and first line."""
    return _detect(Path(path), _text(path))


def _detect(p: Path, text: str) -> str:
    if _is_jsonl(p, text):
        try:
            first = json.loads(_first_line(text))
        except json.JSONDecodeError:
            return "generic"  # the reader will say which line is broken
        keys = set(first) if isinstance(first, dict) else set()
        return "mooncake" if {"timestamp", "input_length", "output_length"} <= keys else "generic"
    header = _header(text)
    if set(_AZURE.values()) <= header:
        return "azure"
    if set(_BURSTGPT.values()) <= header:
        return "burstgpt"
    return "lengths" if set(_LENGTHS.values()) <= header else "generic"


def unrecognised(p: Path, text: str) -> str:
    """Why trace ``p`` (``text``) matched no known format, from what its first line holds, and the fix."""
    line = _first_line(text).strip()
    if not line:
        return f"{p} is empty"
    if _is_jsonl(p, text):
        try:
            first = json.loads(line)
        except json.JSONDecodeError:
            return f"{p}: its first line is not JSON"
        found = sorted(first) if isinstance(first, dict) else [type(first).__name__]
    else:
        found = sorted(_header(text))
    known = "; ".join(f"{name}: {', '.join(cols[k] for k in ('arrival', 'prompt', 'output') if k in cols)}"
                      for name, cols in (("azure", _AZURE), ("mooncake", _MOONCAKE), ("lengths", _LENGTHS)))
    tabs = " (tab-separated? traces are comma-separated)" if "\t" in line else ""
    shown = ", ".join(found[:8]) + (", ..." if len(found) > 8 else "")
    return (f"{p} has fields {shown}{tabs}, which match no known format ({known}); map yours with "
            f"workload.columns: {{arrival: ..., prompt: ..., output: ...}}")


# --- loading ---------------------------------------------------------------

def _text(path: str | Path) -> str:
    """The trace's text, through the one loader of user files (:mod:`simbatch.files.textfile`)."""
    return read_text(path, "trace file")


def _first_line(text: str) -> str:
    """The first line of ``text`` that is not blank, with its newline ("" if none)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end + 1
        if text[start:end].strip():
            return text[start:end]
        start = end
    return ""


def _header(text: str) -> set[str]:
    return {c.strip() for c in _first_line(text).strip().split(",")}


def _is_jsonl(p: Path, text: str) -> bool:
    if p.suffix.lower() in (".jsonl", ".json"):
        return True
    return p.suffix.lower() != ".csv" and _first_line(text).lstrip().startswith("{")


def _load(path: str | Path, text: str | None = None) -> _Table:
    """The raw columns of the trace at ``path`` (``text``: its text, when already read)."""
    p = Path(path)
    text = _text(p) if text is None else text
    return _load_jsonl(p, text) if _is_jsonl(p, text) else _load_csv(p, text)


def _load_csv(p: Path, text: str) -> _Table:
    fast = parse.csv_columns(text)
    if fast is None:
        return _load_csv_pandas(p, text)
    _, columns, lines = fast
    return _Table(str(p), columns, lines)


def _load_csv_pandas(p: Path, text: str) -> _Table:
    # pandas' C parser does the heavy lifting; rows keep their raw strings so a
    # bad value is quoted back exactly. Blank lines are kept while parsing so
    # that row i is file line i + 2, then dropped.
    import pandas as pd

    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise SimbatchError(str(p), "file is empty") from None
    except pd.errors.ParserError as e:
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e))
        if not m:
            raise SimbatchError(str(p), f"malformed CSV ({str(e).strip()})") from None
        raise SimbatchError(f"{p}:{m[2]}", f"expected {m[1]} fields, got {m[3]}") from None
    if len(df.columns) == 0:  # pandas reads a blank first line as a header with no columns
        raise SimbatchError(f"{p}:1", "the first line, the CSV header, is empty")
    df.columns = [str(c).strip() for c in df.columns]
    lines = np.arange(2, len(df) + 2)
    keep = _check_short_rows(p, df, lines, text)
    return _Table(str(p), {c: df[c][keep].tolist() for c in df.columns}, lines[keep])


def _check_short_rows(p: Path, df, lines: np.ndarray, text: str) -> np.ndarray:
    """Drop blank lines and reject rows with too few fields (pandas pads them with '')."""
    keep = np.ones(len(df), dtype=bool)
    suspects = np.flatnonzero(df.iloc[:, -1].to_numpy() == "") if len(df) else []
    if len(suspects) == 0:
        return keep
    raw = text.splitlines()
    for i in suspects:
        text = raw[lines[i] - 1]
        if not text.strip():
            keep[i] = False
            continue
        got = len(next(csv.reader([text])))
        if got != df.shape[1]:
            raise SimbatchError(f"{p}:{lines[i]}", f"expected {df.shape[1]} fields, got {got}")
    return keep


def _load_jsonl(p: Path, text: str) -> _Table:
    fast = parse.jsonl_records(text)
    records, lines = fast if fast is not None else _jsonl_records_one_by_one(p, text)
    return _Table(str(p), parse.record_columns(records, _MISSING), lines)


def _jsonl_records_one_by_one(p: Path, text: str) -> tuple[list[dict], np.ndarray]:
    """Each line's record, with its line, or the error naming the first bad line."""
    records, lines = [], []
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise SimbatchError(f"{p}:{lineno}", f"invalid JSON ({e.msg})") from None
        if not isinstance(rec, dict):
            raise SimbatchError(f"{p}:{lineno}", f"expected a JSON object, got {type(rec).__name__}")
        records.append(rec)
        lines.append(lineno)
    return records, np.array(lines, dtype=np.int64)


# --- converting columns ------------------------------------------------------

def _read(path: str | Path, roles: dict, source_kind: str, text: str) -> Workload:
    t = _load(path, text)
    if len(t.lines) == 0:
        raise SimbatchError(str(path), "empty trace: no requests")
    prompt = _ints(t, roles["prompt"], minimum=1)
    output = _ints(t, roles["output"], minimum=1)
    arrival = (_arrivals(t, roles["arrival"], TIME_UNITS[roles.get("time_unit", "s")])
               if "arrival" in roles else np.full(len(prompt), np.nan))
    hash_ids = _hash_ids(t, roles["hash_ids"]) if "hash_ids" in roles else None
    session = _sessions(t, roles["session_id"]) if "session_id" in roles else None
    priority = _ints(t, roles["priority"], minimum=None) if "priority" in roles else None
    w = Workload(arrival, prompt, output, hash_ids, session, priority,
                 source=f"{source_kind}:{Path(path).name}")
    return _sorted_from_zero(w, str(path))


# More tokens than any model's context (the longest are about 10 million) is a broken count,
# and 2**63 or more would wrap around to a negative int64.
MAX_COUNT = 10**9


def _ints(t: _Table, name: str, minimum: int | None) -> np.ndarray:
    raw = t.cells(name)
    values = parse.int_column(raw, signed=minimum is None or minimum < 0)
    if values is not None and not np.any(np.abs(values) > MAX_COUNT) and not (
            minimum is not None and np.any(values < minimum)):
        return values
    return _ints_pandas(t, name, minimum)


def _ints_pandas(t: _Table, name: str, minimum: int | None) -> np.ndarray:
    import pandas as pd

    raw = t.column(name)
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    # Integral floats ("374.0") are accepted: some tools write counts that way.
    bad = ~np.isfinite(values) | (values != np.floor(values)) | (np.abs(values) > MAX_COUNT)
    # JSON true / false would pass pd.to_numeric as 1 / 0
    bad |= np.fromiter((type(v) is bool for v in raw), dtype=bool, count=len(raw))
    if minimum is not None:
        bad |= values < minimum
    if bad.any():
        row = int(np.argmax(bad))
        expected = "a positive integer" if minimum == 1 else "an integer"
        if abs(values[row]) > MAX_COUNT:
            expected += f" of at most {MAX_COUNT:,} (more tokens than any model's context)"
        t.fail(row, name, expected)
    return values.astype(np.int64)


def _arrivals(t: _Table, name: str, per_second: float) -> np.ndarray:
    raw = t.cells(name)
    numbers = parse.number_column(raw)
    if numbers is not None:
        return numbers / per_second
    seconds = parse.iso_seconds(raw)
    return seconds if seconds is not None else _arrivals_pandas(t, name, per_second)


def _arrivals_pandas(t: _Table, name: str, per_second: float) -> np.ndarray:
    import pandas as pd

    raw = t.column(name)
    if raw.iloc[0] is _MISSING:
        t.fail(0, name, "a number or a timestamp")
    numbers = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    if np.isfinite(numbers[0]):  # the first row decides: numeric offsets or datetimes
        bad = ~np.isfinite(numbers)
        if bad.any():
            t.fail(int(np.argmax(bad)), name, "a number")
        return numbers / per_second
    try:
        stamps = pd.to_datetime(raw, format="mixed", errors="coerce")
    except (ValueError, TypeError) as e:
        raise SimbatchError(t.path, f"{name}: cannot parse timestamps ({e})") from None
    bad = stamps.isna().to_numpy()
    if bad.any():
        t.fail(int(np.argmax(bad)), name, "a number or a timestamp like 2023-11-16 18:17:03.97")
    return (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=np.float64)


def _hash_ids(t: _Table, name: str) -> list[tuple[int, ...]]:
    fast = parse.int_lists(t.cells(name))
    return fast if fast is not None else _hash_ids_one_by_one(t, name)


def _hash_ids_one_by_one(t: _Table, name: str) -> list[tuple[int, ...]]:
    out = []
    for i, v in enumerate(t.cells(name)):
        if isinstance(v, str):  # CSV cell such as "[1, 2, 3]" or "1 2 3"
            parts = [s for s in re.split(r"[\s,;\[\]]+", v) if s]
            v = [int(s) for s in parts] if all(re.fullmatch(r"-?\d+", s) for s in parts) else None
        if not isinstance(v, list) or not all(type(x) is int for x in v):
            t.fail(i, name, "a list of integers")
        out.append(tuple(v))
    return out


def _sessions(t: _Table, name: str) -> list[str | None]:
    return [None if v is _MISSING or v is None or v == "" else str(v) for v in t.cells(name)]


def _sorted_from_zero(w: Workload, path: str) -> Workload:
    """Sort rows by arrival (stable) with a note if needed; re-base to the first arrival."""
    a = w.arrival_s
    if np.isnan(a).all():
        return w
    if (np.diff(a) < 0).any():
        w = take(w, np.argsort(a, kind="stable"))
        w.notes.append(f"{path}: arrivals not in time order; sorted {len(a)} rows")
    w.arrival_s = w.arrival_s - w.arrival_s[0]
    return w
