"""Writing a command's results to disk, all or nothing, a whole folder at a time.

Every output folder is first written complete as a temporary sibling
(``.NAME.tmp-PID-XXXX``), then swapped in: the previous folder, if any, is
renamed aside (``.NAME.old-PID-XXXX``), the new one renamed into place, and
the old one removed. Renames on one filesystem are atomic, so at every
moment ``out_dir`` is either the previous complete folder, absent for the
instant between the two renames, or the new complete folder: never a mix of
a new ``summary.json`` with old CSVs, or a new policy beside an old
comparison. If a write fails, the temporary folder is removed and
``out_dir`` is left as it was.

A process killed mid-write (``kill -9``) leaves its hidden siblings behind;
the next write to the same folder finds those of dead processes and cleans
them up: a temporary one is removed, an old one whose folder is missing (the
kill fell between the two renames) is renamed back, since it is the last
complete output.

A folder is replaced only if simbatch wrote it (it holds :data:`MARKER`, or
an output of a simbatch release that predates the marker) as the output of the
same command (a run folder by a run, a comparison by a comparison:
:data:`simbatch.files.outpaths.OUTPUT_KINDS`), or it is empty: a folder of the user's
own files, or another command's output, is refused (:func:`refusal`; the CLI
checks this before any work, :func:`simbatch.files.outpaths.check_out_dir`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simbatch.errors import SimbatchError

# The marker and what may be replaced live with the output checks (simbatch.files.outpaths); names of this module too.
from simbatch.files.outpaths import KNOWN_OUTPUTS, MARKER, check_path_name, output_kind, refusal, replaceable  # noqa: F401
from simbatch.report.csv_table import write_csv as _write_csv  # tests replace it here
from simbatch.report.parquet_table import has_pyarrow, require_pyarrow
from simbatch.report.parquet_table import write_parquet as _write_parquet  # (pyarrow only when called)

if TYPE_CHECKING:  # pandas only in annotations: a run writes its tables without it
    import pandas as pd

TABLE_FORMATS = ("auto", "csv", "parquet")  # how a run's requests and steps tables are written
# ``auto`` writes Parquet when a table has more rows than a spreadsheet sheet holds (Excel and
# LibreOffice Calc: 2**20): such a CSV opens in no spreadsheet anyway, and takes seconds to write
# (every float through repr) where Parquet takes a fraction of one. Smaller runs stay CSV.
SPREADSHEET_ROWS = 1_048_576


def clean_stale(out_dir: Path) -> None:
    """Remove (or restore) hidden siblings of ``out_dir`` left by killed writers (module docstring)."""
    parent = out_dir.parent
    if not parent.is_dir():
        return
    for kind in ("tmp", "old"):
        for p in parent.glob(f".{_glob_escape(out_dir.name)}.{kind}-*"):
            pid = p.name[len(out_dir.name) + len(kind) + 3:].partition("-")[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            if kind == "old" and (p / "previous").is_dir() and not out_dir.exists():
                os.rename(p / "previous", out_dir)  # the last complete output: killed between the renames
            shutil.rmtree(p, ignore_errors=True)


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to clean
        return True
    return True


def json_safe(value):
    """``value`` with numpy scalars made Python and NaN/inf made ``None`` (recursively)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def _write_json(path: Path, obj: dict) -> None:
    # Keys keep the dict's order (the summary's stable order); allow_nan=False
    # makes any NaN that slipped past json_safe an error, not invalid JSON.
    path.write_text(json.dumps(json_safe(obj), indent=2, allow_nan=False) + "\n", encoding="utf-8")


def _write_text(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def write_files(out_dir: Path, writers: dict[str, Callable[[Path], None]]) -> list[Path]:
    """Make ``out_dir`` hold exactly what ``writers`` (file name -> function of its path) write,
    all at once (module docstring). A writer may make a folder at its path (another output
    folder, written the same way). Every name must be a plain one (:func:`check_path_name`),
    checked before anything is written: no name reaches outside ``out_dir``. Returns the written paths."""
    out_dir = Path(out_dir)
    for name in writers:
        check_path_name(name, str(out_dir))
    why = refusal(out_dir, output_kind(writers))  # a run over a comparison's folder is refused too
    if why is not None:
        raise SimbatchError(str(out_dir), why)
    with write_failure(out_dir, ""):
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(out_dir)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-{os.getpid()}-", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp's folders are private
        for name, write in writers.items():
            with write_failure(out_dir, name):
                write(tmp / name)
        with write_failure(out_dir, MARKER):
            (tmp / MARKER).write_text("written by simbatch; writing this output again replaces the whole folder\n",
                                      encoding="utf-8")
        with write_failure(out_dir, ""):
            swap_in(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [out_dir / name for name in writers]


class WriteFailed(SimbatchError):
    """An output that could not be written (a full disk, a quota, an I/O error): one line naming
    the output folder or file and the entry that failed, raised after the temporary copy is removed,
    so the output is as it was before the command."""

    def __init__(self, target: str, entry: str, reason: str):
        self.target, self.entry, self.reason = str(target), entry, reason
        what = f"cannot write {entry} ({reason})" if entry else f"cannot write ({reason})"
        super().__init__(self.target, f"{what}; nothing was written, what was there is as it was")

    def __reduce__(self):
        return (type(self), (self.target, self.entry, self.reason))


@contextmanager
def write_failure(target: Path, entry: str):
    """Turn an ``OSError`` while writing ``entry`` of ``target`` into :class:`WriteFailed`: the
    one rule of a failed write (``No space left on device`` was a traceback from every command).
    A failure inside a nested output folder (a compare's run) names the entry from the outer one."""
    try:
        yield
    except WriteFailed as exc:
        raise WriteFailed(target, f"{entry}/{exc.entry}" if entry and exc.entry else entry or exc.entry,
                          exc.reason) from None
    except OSError as exc:
        raise WriteFailed(target, entry, exc.strerror or str(exc)) from None


def swap_in(tmp: Path, out_dir: Path) -> None:
    """Rename the complete folder ``tmp`` to ``out_dir``, replacing a previous one (module docstring)."""
    if not out_dir.exists():
        os.rename(tmp, out_dir)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-{os.getpid()}-", dir=out_dir.parent))
    os.rename(out_dir, old / "previous")
    try:
        os.rename(tmp, out_dir)
    except BaseException:
        os.rename(old / "previous", out_dir)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """``write`` a temp file beside ``path``, then rename it into place (never a half-written file)."""
    # A unique name of our own rather than tempfile.mkstemp, whose files are
    # private (0600): the renamed file gets the usual permissions.
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with write_failure(path, ""):
            write(tmp)
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def check_table_format(format: str, where: str = "format") -> str:
    """``format`` when it is one of :data:`TABLE_FORMATS`, else a :class:`SimbatchError` at ``where``."""
    if format not in TABLE_FORMATS:
        raise SimbatchError(where, f"unknown table format {format!r}; allowed: {', '.join(TABLE_FORMATS)}")
    if format == "parquet":
        require_pyarrow(where)
    return format


def table_format(format: str, *tables) -> str:
    """``csv`` or ``parquet``: ``format`` itself, or for ``auto`` Parquet when one of ``tables``
    (DataFrames or column dicts) has more than :data:`SPREADSHEET_ROWS` rows and pyarrow is
    installed (else CSV). A run's tables are
    all written one way, so a folder holds ``requests.csv`` and ``steps.csv``, or both as Parquet."""
    if check_table_format(format) != "auto":
        return format
    large = max((_rows(t) for t in tables), default=0) > SPREADSHEET_ROWS
    return "parquet" if large and has_pyarrow() else "csv"  # without pyarrow, CSV at any size


def _rows(table) -> int:
    if isinstance(table, dict):
        return len(next(iter(table.values()))) if table else 0
    return len(table)


def write_run(out_dir, summary: dict, requests: pd.DataFrame | dict, steps: pd.DataFrame | dict,
              log_lines: list[str], extra: dict[str, Callable[[Path], None]] | None = None,
              format: str = "auto") -> list[Path]:
    """Write ``summary.json``, ``requests.csv``, ``steps.csv`` and ``run.log`` into ``out_dir``
    (plus ``extra``: file name -> writer, e.g. a controller's trajectory). ``format``: the
    tables as ``csv``, ``parquet`` (``requests.parquet``, ``steps.parquet``) or ``auto``
    (:func:`table_format`).

    ``out_dir`` is created if needed and replaced whole (:func:`write_files`).
    Returns the written paths.
    """
    kind = table_format(format, requests, steps)  # "csv" or "parquet", also the files' extension

    def table(data):
        return (lambda p: _write_csv(p, data)) if kind == "csv" else (lambda p: _write_parquet(p, data))

    return write_files(Path(out_dir), {
        "summary.json": lambda p: _write_json(p, summary),
        f"requests.{kind}": table(requests),
        f"steps.{kind}": table(steps),
        "run.log": lambda p: _write_text(p, log_lines),
        **(extra or {}),
    })

