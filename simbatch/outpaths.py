"""Output paths, checked before any work: a bad ``--out`` costs nothing and writes nothing."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from simbatch.errors import SimbatchError


def check_out_dir(out_dir: str | Path, flag: str = "--out", whole: bool = True) -> Path:
    """``out_dir`` if it can become an output folder, else a one-line error naming ``flag``:
    not an existing file, not under one, and its nearest existing folder writable (so an
    unwritable folder or ``/proc/x`` fails now, not after a long simulation). ``whole``: the
    command replaces the whole folder (:mod:`simbatch.report.outputs`), so an existing one
    must be empty or an earlier simbatch output, never a folder of the user's own files."""
    out_dir = Path(out_dir)
    for path in (out_dir, *out_dir.parents):
        if path.exists() and not path.is_dir():
            where = flag if path == out_dir else f"{flag} {out_dir}"
            raise SimbatchError(where, f"{path} exists and is not a folder")
    if whole:
        from simbatch.report.outputs import replaceable

        if not replaceable(out_dir):
            raise SimbatchError(f"{flag} {out_dir}", "holds files simbatch did not write; an output folder is "
                                                     "replaced whole, so give a new folder")
    existing = next((p for p in (out_dir, *out_dir.parents) if p.exists()), Path("."))
    _probe(existing, f"{flag} {out_dir}")
    return out_dir


def _probe(folder: Path, where: str) -> None:
    """Create and remove a folder in ``folder``: a real probe of permissions and of read-only or
    virtual filesystems (``/proc``), which holds even as root, where permission bits do not."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".simbatch-probe-", dir=folder))
    except OSError as exc:
        raise SimbatchError(where, f"cannot write in {folder} ({exc.strerror or exc})") from None


def check_out_file(path: str | Path, example: str = "out.json") -> Path:
    """``path`` as a :class:`Path` if one output file can be written there, else a one-line
    error. Its folder must exist: a file's folder is more likely a typo than a wish."""
    path = Path(path)
    if path.is_dir():
        raise SimbatchError(str(path), f"is a folder; give a file name such as {example}")
    if not path.parent.is_dir():
        raise SimbatchError(str(path), f"folder {path.parent} does not exist")
    _probe(path.parent, str(path))  # the file is written beside, then renamed: the folder must take it
    return path
