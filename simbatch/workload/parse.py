"""Vectorised, pandas-free parsing of trace files and columns (the readers' fast path).

Reading the Azure conversation trace through pandas cost 0.3 s of imports before a
45 ms parse (issue 18). These functions parse the common shapes of a trace with
C-level operations only (the csv module, ``json.loads`` mapped over lines, one
regular expression over a whole column, numpy casts): no Python statement runs
per row. Each returns ``None`` when it cannot prove that its answer is the one
:mod:`simbatch.workload.readers`' pandas path gives (quotes, ragged rows,
numbers with spaces or underscores, non-ISO dates, values out of range...); the
reader then takes that path, which also words every error. So a well-formed
file never imports pandas, and a malformed one gets the same message as before.
"""

from __future__ import annotations

import json
import re
from itertools import chain, compress, repeat
from json.scanner import make_scanner

import numpy as np

MAX_DIGITS = 18  # an int64 holds every 18-digit count
_INT_TEXT = re.compile(r"-?[0-9]{1,18}(?:\n-?[0-9]{1,18})*")
_NUMBER_TEXT = re.compile(r"[0-9.eE+-]*")
# Date, date and minutes, or date and seconds with up to nine decimals: the ISO 8601 forms
# numpy and pandas' ISO parser read alike (tests/test_workload_readers.py checks the two agree).
_ISO = r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[ T][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?)?"
_ISO_TEXT = re.compile(f"{_ISO}(?:\n{_ISO})*")
NS_PER_S = 10**9
JSON_SPACE = " \t\r\n"  # what json.loads skips around a value
_SCAN = make_scanner(json.JSONDecoder())


def csv_columns(text: str) -> tuple[list[str], dict[str, list[str]], np.ndarray] | None:
    """A CSV file's text as (header, column name -> cells, file line of each row), dropping
    blank lines; None unless every other row has the header's fields (two or more) and no
    field is quoted (then splitting at commas is what the csv module does)."""
    if '"' in text or "\x00" in text or text.count("\r") != text.count("\r\n"):
        return None
    lines = text.replace("\r\n", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()  # the final line's newline
    if not lines:
        return None
    raw = lines[0].split(",")
    header = [c.strip() for c in raw]
    if len(raw) < 2 or not all(raw) or len(set(raw)) != len(raw) or len(set(header)) != len(header):
        return None  # pandas renames empty and repeated names (and reads one column its own way)
    rows = list(map(str.split, lines[1:], repeat(",")))
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    blank = np.fromiter(map(len, lines[1:]), dtype=np.int64, count=len(rows)) == 0
    if not np.all((lengths == len(header)) | blank):
        return None  # ragged rows: the pandas path says which
    body = list(compress(rows, ~blank)) if blank.any() else rows
    cells = list(zip(*body)) if body else [()] * len(header)
    return header, {name: list(col) for name, col in zip(header, cells)}, np.flatnonzero(~blank) + 2


def jsonl_records(text: str) -> tuple[list[dict], np.ndarray] | None:
    """A JSONL file's text (universal newlines) as (records, file line of each), blank lines
    dropped; None if a line is not exactly one JSON object (as ``json.loads`` reads it)."""
    lines = text.split("\n")
    kept = np.fromiter(map(len, map(str.strip, lines)), dtype=np.int64, count=len(lines)) > 0
    body = list(map(str.strip, compress(lines, kept), repeat(JSON_SPACE)))
    try:  # json.loads minus its Python wrapper: the C scanner, value and end of each line
        # (its StopIteration at a line that holds no value ends map early: counted below)
        scanned = list(map(_SCAN, body, repeat(0)))
    except (json.JSONDecodeError, RecursionError):
        return None
    records, ends = (list(x) for x in zip(*scanned)) if scanned else ([], [])
    if len(scanned) != len(body) or ends != list(map(len, body)) or set(map(type, records)) - {dict}:
        return None  # a line without a value, something after it, or not an object
    return records, np.flatnonzero(kept) + 1


def record_columns(records: list[dict], missing) -> dict[str, list]:
    """Records as columns, names in first-seen order; ``missing`` fills a key absent from a
    record."""
    shapes = set(map(tuple, records))
    if len(shapes) == 1:  # every record has the same keys in the same order
        names = next(iter(shapes))
        cells = list(zip(*map(tuple, map(dict.values, records)))) if names else []
        return {name: list(col) for name, col in zip(names, cells)}
    names = dict.fromkeys(chain.from_iterable(records))
    return {k: [rec.get(k, missing) for rec in records] for k in names}


def int_lists(raw: list) -> list[tuple[int, ...]] | None:
    """JSON lists of integers as tuples; None if a cell is anything else."""
    if set(map(type, raw)) != {list} or set(map(type, chain.from_iterable(raw))) - {int}:
        return None
    return list(map(tuple, raw))


def int_column(raw: list, signed: bool) -> np.ndarray | None:
    """Integer cells (decimal text, or JSON integers) as int64; None for anything else."""
    if not raw:
        return None
    kinds = set(map(type, raw))
    if kinds == {int}:
        try:
            return np.array(raw, dtype=np.int64)
        except OverflowError:
            return None
    if kinds != {str}:
        return None
    text = "\n".join(raw)
    if not _INT_TEXT.fullmatch(text) or (not signed and "-" in text):
        return None
    return np.fromiter(map(int, raw), dtype=np.int64, count=len(raw))  # int() of checked digits


def number_column(raw: list) -> np.ndarray | None:
    """Finite numbers (plain decimal text, or JSON numbers) as float64; None for anything else,
    and for text a cell of which is signed (pandas reads "-0" as the integer 0)."""
    if not raw:
        return None
    kinds = set(map(type, raw))
    if kinds <= {int, float}:
        try:
            values = np.array(raw, dtype=np.float64)
        except OverflowError:
            return None
        ints_exact = int not in kinds or np.all(np.abs(values) < 2.0**53)
        return values if ints_exact and np.isfinite(values).all() else None
    if kinds != {str}:
        return None
    text = "\n".join(raw)
    if not text.isascii() or not _NUMBER_TEXT.fullmatch(text.replace("\n", "")):
        return None
    if text.startswith("-") or "\n-" in text or "" in raw:
        return None
    try:
        values = np.array(raw).astype(np.float64)
    except ValueError:
        return None
    return values if np.isfinite(values).all() else None


def iso_seconds(raw: list) -> np.ndarray | None:
    """ISO 8601 timestamps (``2023-11-16 18:15:46.6805900``) as seconds after the earliest, as
    pandas' ``(t - t.min()).dt.total_seconds()`` gives them; None for any other text."""
    if not raw or set(map(type, raw)) != {str}:
        return None
    text = "\n".join(raw)
    if not text.isascii() or not _ISO_TEXT.fullmatch(text):
        return None
    try:
        ns = np.array(raw, dtype="datetime64[ns]").astype(np.int64)
        us = np.array(raw, dtype="datetime64[us]").astype(np.int64)  # wide range: no wrap-around
    except ValueError:  # a day, hour... out of range: pandas words the error
        return None
    if not np.array_equal(ns // 1000, us):
        return None  # beyond datetime64[ns]'s years 1678-2262
    ns = ns - ns.min()
    if ns.max() >= 2**53:
        return None  # pandas nudges values off whole seconds there
    # pandas' total_seconds: whole seconds plus the remainder, divided separately.
    whole, rest = np.divmod(ns, NS_PER_S)
    return whole + rest / NS_PER_S
