"""Reading measured logs from the command line (``validate --against``, ``calibrate --from-log``).

Both commands take the same options for how a log is read: ``--format``, ``--columns`` and
``--log-option KEY=VALUE``, the readers' Python options (:func:`simbatch.measured.read_measured`'s
``arrivals``, ``experiment``, ``prompt_tokens``, ``system``; docs/measured.md, "On the command
line"). A value that is a list in Python (one number per request) is a file here, one number a
line (or several a line, separated by commas or spaces).
"""

from __future__ import annotations

import re
from pathlib import Path

from simbatch.errors import SimbatchError

# --log-option keys: how each value is read from its text.
LOG_OPTIONS = ("arrivals", "experiment", "prompt_tokens", "system")
# A reader's error at one of these places is about the option the command line gave as this.
FLAGS = {"format": "--format", "columns": "--columns", "options": "--log-option",
         **{key: f"--log-option {key}" for key in LOG_OPTIONS}}


def add_log_arguments(p, mode: str) -> None:
    """``--format``, ``--columns`` and ``--log-option`` (repeatable), each "with ``mode``"."""
    p.add_argument("--format", default=None, help=f"with {mode}: the logs' format (default: inferred per file)")
    p.add_argument("--columns", default=None, metavar="ROLE=COL,...",
                   help=f"with {mode}: a CSV/JSONL log's columns, e.g. arrival=arrival_s,prompt=prompt_tokens,"
                        "output=output_tokens,first_token=first_token_s,finish=finish_s (implies the generic format)")
    p.add_argument("--log-option", dest="log_options", action="append", default=[], metavar="KEY=VALUE",
                   help=f"with {mode}: an option of the logs' reader, given to every log (repeatable): "
                        "arrivals=FILE (vllm: send times in seconds, one number a line), prompt_tokens=N or "
                        "prompt_tokens=FILE (genai-perf: prompt lengths), experiment=K (genai-perf: which load "
                        "level, from 0), system=NAME (generic: what served it)")


def given(args) -> list[str]:
    """The log-reading flags given (to refuse them where no log is read)."""
    flags = [flag for dest, flag in (("format", "--format"), ("columns", "--columns")) if getattr(args, dest)]
    return flags + (["--log-option"] if args.log_options else [])


def read_logs(args, paths: list) -> list:
    """Each of ``paths`` read as the flags say; a reader's error about an option names its flag."""
    from simbatch.measured import read_measured

    columns, options = parse_columns(args.columns), parse_log_options(args.log_options)
    try:
        return [read_measured(path, format=args.format, columns=columns, **options) for path in paths]
    except SimbatchError as exc:
        if exc.where in FLAGS:
            raise SimbatchError(FLAGS[exc.where], exc.cause) from None
        raise


def parse_columns(text: str | None) -> dict | None:
    """``--columns arrival=a,prompt=p,...`` as the readers' mapping (None when not given)."""
    if text is None:
        return None
    columns = {}
    for item in (part.strip() for part in text.split(",")):
        role, sep, column = item.partition("=")
        if not sep or not role.strip() or not column.strip():
            raise SimbatchError(f"--columns {item}", "expected ROLE=COLUMN, e.g. arrival=arrival_s")
        columns[role.strip()] = column.strip()
    return columns


def parse_log_options(items: list[str]) -> dict:
    """``--log-option KEY=VALUE`` items as the readers' keyword options, each value read by its key."""
    options = {}
    for item in items:
        key, sep, value = (part.strip() for part in item.partition("="))
        where = f"--log-option {item}"
        if not sep or not key or not value:
            raise SimbatchError(where, "expected KEY=VALUE, e.g. experiment=0")
        if key not in LOG_OPTIONS:
            raise SimbatchError(where, f"unknown key {key!r}; allowed: {', '.join(LOG_OPTIONS)}")
        if key in options:
            raise SimbatchError(where, f"{key} is given twice")
        options[key] = _option_value(key, value, where)
    return options


def _option_value(key: str, value: str, where: str):
    """``system``: the text; ``experiment``: a whole number; ``arrivals``: a file of numbers;
    ``prompt_tokens``: a whole number, or a file of them."""
    if key == "system":
        return value
    if key == "experiment" or (key == "prompt_tokens" and re.fullmatch(r"[+-]?\d+", value)):
        if not re.fullmatch(r"[+-]?\d+", value):
            raise SimbatchError(where, f"expected a whole number, got {value!r}")
        return int(value)
    return numbers_file(Path(value), where)


def numbers_file(path: Path, where: str) -> list[float | int]:
    """The numbers in a text file, in order: one a line, or several separated by commas or
    spaces; blank lines and ``#`` comments skipped. Whole numbers stay ints (the readers check)."""
    from simbatch.files.textfile import read_text

    try:
        text = read_text(path, "numbers file")
    except SimbatchError as exc:  # not there, a folder, unreadable: said under the flag that named it
        raise SimbatchError(where, str(exc)) from None
    values = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for token in re.split(r"[,\s]+", line.split("#", 1)[0].strip()):
            if token:
                values.append(_number(token, f"{where}: {path}:{lineno}"))
    if not values:
        raise SimbatchError(f"{where}: {path}", "holds no numbers")
    return values


def _number(token: str, where: str) -> float | int:
    try:
        return int(token) if re.fullmatch(r"[+-]?\d+", token) else float(token)
    except ValueError:
        raise SimbatchError(where, f"not a number: {token!r}") from None
