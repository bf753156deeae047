"""What every reader of measured logs shares: opening the file, checking values, assembling the run.

Moved out of :mod:`simbatch.measured.readers` so that readers of further formats
(:mod:`simbatch.measured.readers_bench`) use the same checks and messages without
an import cycle. Every check raises ``SimbatchError(where, cause)``: ``where`` is
``"<path>"``, ``"<path>:<line>"`` or ``"<path>: entry N"``, ``cause`` names the
field and quotes the bad value.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from simbatch.core.horizon import MAX_TIME_S
from simbatch.errors import SimbatchError
from simbatch.files.textfile import read_text, regular_file
from simbatch.measured.run import MeasuredRun
from simbatch.workload.readers import MAX_COUNT

Fail = Callable[[int, str], None]  # fail(entry index, cause): raises
CLOCK_RESOLUTION_S = 1e-6  # the coarsest step a log's clock may have where its times lie


# --- shared: columns ------------------------------------------------------------

def _seconds(t, name: str, per_second: float, minimum: float | None) -> np.ndarray:
    """A numeric time column in seconds (durations: ``minimum`` 0)."""
    values = pd.to_numeric(t.column(name), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if minimum is not None:
        bad |= values < minimum
    if bad.any():
        t.fail(int(np.argmax(bad)), name, "a finite number" + (" >= 0" if minimum is not None else ""))
    return values / per_second


# --- shared: files --------------------------------------------------------------

# Files are opened by the one loader of user files (simbatch.files.textfile): the same messages as
# for scenarios and traces.
def _existing(path: str | Path) -> Path:
    return regular_file(path, "log file")


def _text(p: Path) -> str:
    text = read_text(p, "log file")
    if not text.strip():
        raise SimbatchError(str(p), "file is empty")
    return text


def _first_line(p: Path, text: str) -> tuple[int, str]:
    """The first line that is not blank, and its number. Only that line is copied (a
    DistServe log is one line of every request: splitting the whole text copied it all)."""
    start, lineno = 0, 1
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end]
        if line and not line.isspace():
            return lineno, line.rstrip("\r")
        start, lineno = end + 1, lineno + 1
    raise SimbatchError(str(p), "file is empty")  # unreachable after _text, kept for safety


def _json_doc(p: Path) -> Any:
    return _parse_json(str(p), _text(p))


def _parse_json(path: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SimbatchError(f"{path}:{e.lineno}", f"invalid JSON ({e.msg})") from None
    except (RecursionError, MemoryError):
        raise SimbatchError(path, "JSON nested too deeply or too large to parse") from None


# --- shared: values -------------------------------------------------------------

def _entry_fail(path: str, label: str = "") -> Fail:
    def fail(i: int, cause: str) -> None:
        raise SimbatchError(f"{path}: {label}entry {i + 1}", cause)
    return fail


def _raise(where: str, cause: str) -> None:
    raise SimbatchError(where, cause)


def _show(value: Any, limit: int = 60) -> str:
    """A value quoted for a one-line message (long ones cut)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _number(fail: Callable[[str], None], name: str, value: Any, minimum: float | None) -> float:
    """A finite real number (not a bool), at least ``minimum`` when given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(f"{name}: expected a number, got {_show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        fail(f"{name}: expected a finite number, got {_show(value)}")
    if minimum is not None and value < minimum:
        fail(f"{name}: expected a number >= {minimum}, got {_show(value)}")
    return value  # ints stay exact (ns timestamps) until the caller re-bases them


def _count(fail: Callable[[str], None], name: str, value: Any, minimum: int, maximum: int = MAX_COUNT) -> int:
    """A whole number in [``minimum``, ``maximum``], by default a token count's bound, the traces'
    :data:`MAX_COUNT` (integral floats such as 12.0 accepted; an output of ``10**30`` tokens
    wrapped round in int64 and was blamed on the scenario)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        fail(f"{name}: expected a whole number, got {_show(value)}")
    if value < minimum:
        fail(f"{name}: expected a whole number >= {minimum}, got {_show(value)}")
    if value > maximum:
        why = " (more tokens than any model's context)" if maximum == MAX_COUNT else ""
        fail(f"{name}: expected a whole number of at most {maximum:,}{why}, got {_show(value)}")
    return int(value)


def _numbers(fail: Callable[[str], None], name: str, values: Any) -> np.ndarray:
    if not isinstance(values, list):
        fail(f"{name}: expected a list of numbers, got {_show(values)}")
    return np.array([_number(fail, f"{name}[{j}]", v, 0.0) for j, v in enumerate(values)], dtype=np.float64)


def _given_times(name: str, values: Any, n: int) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SimbatchError(name, f"expected {n} numbers, got {_show(values)}") from None
    if arr.shape != (n,):
        raise SimbatchError(name, f"expected {n} numbers (one per request), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise SimbatchError(name, f"entry {int(np.argmax(~np.isfinite(arr))) + 1}: not a finite number")
    return arr


def _is_inf(rate: Any) -> bool:
    if isinstance(rate, str):
        return rate.strip().lower() in ("inf", "infinity")
    return isinstance(rate, float) and math.isinf(rate) and rate > 0


def _len(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def _check_order(fail: Fail, arrival, first, finish, ok, names: tuple[str, str, str],
                 unit: float = 1.0) -> None:
    """First token no earlier than arrival; finish no earlier than the first token."""
    live = np.ones(len(arrival), bool) if ok is None else ok
    for later, earlier, (later_name, earlier_name) in ((first, arrival, names[1::-1]),
                                                       (finish, first, names[:0:-1])):
        bad = live & (later < earlier)
        if bad.any():
            i = int(np.argmax(bad))
            fail(i, f"{later_name} {float(later[i] * unit)!r} is before {earlier_name} "
                    f"{float(earlier[i] * unit)!r}")


def _check_clock(source: str, arrival: np.ndarray, first: np.ndarray, finish: np.ndarray) -> None:
    """Every time of the log within simulated time's horizon (:data:`MAX_TIME_S`) of the first
    send, on a clock that still resolves a microsecond there: times of 1e308 s gave ``inf``
    latencies (and numpy warnings) in ``pairs.csv``, with exit code 0. The request is named by
    its place in the file (``entry N``), the time by what it marks."""
    with np.errstate(invalid="ignore", over="ignore"):
        t0 = float(np.min(arrival))
        for name, times in (("arrival", arrival), ("first token", first), ("finish", finish)):
            late = np.nan_to_num(times, nan=t0) - t0 > MAX_TIME_S
            if late.any():
                i = int(np.argmax(late))
                raise SimbatchError(f"{source}: entry {i + 1}", f"{name} {float(times[i]):.4g} s comes "
                                    f"{float(times[i]) - t0:.3g} s after the first send, beyond {MAX_TIME_S:.0e} s "
                                    "(32 years), where simulated time cannot resolve a microsecond")
            coarse = np.spacing(np.abs(np.nan_to_num(times))) > CLOCK_RESOLUTION_S
            if coarse.any():
                i = int(np.argmax(coarse))
                raise SimbatchError(f"{source}: entry {i + 1}", f"{name} {float(times[i]):.4g} s: a clock reading "
                                    "this large cannot resolve a microsecond (a float of seconds holds one only "
                                    "below about 8.6e9 s); is the unit right?")


def _assemble(source: str, system: str, arrival, prompt, output, first, finish, ok=None,
              token_times=None, notes=None) -> MeasuredRun:
    """Check the clock (:func:`_check_clock`), sort by arrival (stable; a note if the log was not
    in send order), re-base to the first arrival."""
    notes = list(notes or [])
    _check_clock(source, np.asarray(arrival, np.float64), np.asarray(first, np.float64),
                 np.asarray(finish, np.float64))
    order = np.argsort(arrival, kind="stable")
    if (np.diff(arrival) < 0).any():
        notes.append(f"{source}: rows not in send order; sorted {len(arrival)} by arrival")
    t0 = float(arrival[order[0]])
    ok = None if ok is None or ok.all() else ok[order]
    tokens = None if token_times is None else [token_times[i] - t0 for i in order]
    return MeasuredRun(source=source, system=system,
                       arrival_s=np.asarray(arrival, np.float64)[order] - t0,
                       prompt_tokens=np.asarray(prompt, np.int64)[order],
                       output_tokens=np.asarray(output, np.int64)[order],
                       first_token_s=np.asarray(first, np.float64)[order] - t0,
                       finish_s=np.asarray(finish, np.float64)[order] - t0,
                       ok=ok, token_times=tokens, notes=notes, clock_start_s=t0)
