"""Writing a run's results to disk, all or nothing.

Every file is first written into a temporary sibling folder of ``out_dir``;
only when all of them were written are they moved into place (``os.replace``,
same filesystem, so each move is atomic and cannot half-write a file). If any
write fails, the temporary folder is removed and ``out_dir`` is left as it was.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd


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


def _write_csv(path: Path, table: pd.DataFrame) -> None:
    table.to_csv(path, index=False)


def _write_text(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def write_files(out_dir: Path, writers: dict[str, Callable[[Path], None]]) -> list[Path]:
    """Run ``writers`` (file name -> function of its path) in a temp sibling, then move into place.

    A writer may make a folder at its path; it then replaces a folder of that name.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        for name, write in writers.items():
            write(tmp / name)
        out_dir.mkdir(exist_ok=True)
        paths = []
        for name in writers:
            dest = out_dir / name
            if (tmp / name).is_dir() and dest.is_dir() and not dest.is_symlink():
                os.replace(dest, tmp / f".old-{name}")  # removed with tmp
            os.replace(tmp / name, dest)
            paths.append(dest)
        return paths
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """``write`` a temp file beside ``path``, then rename it into place (never a half-written file)."""
    # A unique name of our own rather than tempfile.mkstemp, whose files are
    # private (0600): the renamed file gets the usual permissions.
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_run(out_dir, summary: dict, requests: pd.DataFrame, steps: pd.DataFrame,
              log_lines: list[str], extra: dict[str, Callable[[Path], None]] | None = None) -> list[Path]:
    """Write ``summary.json``, ``requests.csv``, ``steps.csv`` and ``run.log`` into ``out_dir``
    (plus ``extra``: file name -> writer, e.g. a controller's trajectory).

    ``out_dir`` is created if needed; files of the same names are replaced.
    Returns the written paths.
    """
    return write_files(Path(out_dir), {
        "summary.json": lambda p: _write_json(p, summary),
        "requests.csv": lambda p: _write_csv(p, requests),
        "steps.csv": lambda p: _write_csv(p, steps),
        "run.log": lambda p: _write_text(p, log_lines),
        **(extra or {}),
    })


def write_comparison(out_dir, table: pd.DataFrame) -> Path:
    """Write ``comparison.csv`` (one row per policy) into ``out_dir``; returns its path."""
    return write_files(Path(out_dir), {"comparison.csv": lambda p: _write_csv(p, table)})[0]
