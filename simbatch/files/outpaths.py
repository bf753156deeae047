"""Output paths, checked before any work: a bad ``--out`` costs nothing and writes nothing."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from simbatch.errors import SimbatchError

MARKER = ".simbatch-output"  # in every output folder: simbatch wrote it, and may replace it whole
# The file that tells each command's output folder (a release before the marker wrote them too):
# such a folder may be replaced, but only by an output of the same command (:func:`replaceable`).
OUTPUT_KINDS = {"summary.json": "run", "comparison.csv": "compare", "validation.json": "validate",
                "capacity.csv": "capacity"}
KNOWN_OUTPUTS = tuple(OUTPUT_KINDS)
# Longest name (UTF-8 bytes) that may become a file or folder name: room under the usual 255-byte
# limit for a compare row that joins a policy, router, layout and variant, and for the hidden
# ``.NAME.tmp-PID-XXXXXXXX`` sibling every output folder is first written as.
NAME_BYTES = 80
PLAIN = "use letters, digits, '-', '_' and inner dots"


def check_path_name(name, where: str, reserved: tuple[str, ...] = ()) -> str:
    """``name`` if it can name one file or folder inside an output folder, else a one-line
    :class:`SimbatchError` at ``where``: the one check of every name that becomes a path (the
    scenario's ``name:``, variant names, policy kinds, the entries an output folder is written
    with). A plain name: text, not blank, no path separator, NUL or control character, not
    hidden (so never ``.`` or ``..``), at most :data:`NAME_BYTES` bytes, and none of
    ``reserved`` (the files written beside it)."""
    if not isinstance(name, str) or not name.strip():
        raise SimbatchError(where, f"expected a non-empty string, got {name!r}")
    if "/" in name or "\\" in name or name.startswith(".") or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise SimbatchError(where, f"{name!r} would be a path when it names an output folder; {PLAIN}")
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > NAME_BYTES:
        raise SimbatchError(where, f"{name[:20]!r}... is {size} bytes long; a name that becomes a file "
                                   f"or folder name has at most {NAME_BYTES}")
    if name in reserved:
        raise SimbatchError(where, f"{name!r} is the name of a file written beside it; choose another")
    return name


def output_kind(names) -> str | None:
    """The command (``run``, ``compare``, ``validate``, ``capacity``) whose output folder holds
    the file ``names`` (:data:`OUTPUT_KINDS`), or None."""
    return next((kind for name, kind in OUTPUT_KINDS.items() if name in names), None)


def replaceable(folder: Path, kind: str | None = None) -> bool:
    """Whether writing an output to ``folder`` may replace what is there (:func:`refusal`)."""
    return refusal(folder, kind) is None


def refusal(folder: Path, kind: str | None = None) -> str | None:
    """Why writing command ``kind``'s output to ``folder`` may not replace what is there, or
    None when it may: the folder is absent or empty, or simbatch wrote it (it holds
    :data:`MARKER`, or an output of a release before the marker) and, with ``kind``, as the
    output of that same command: ``run --out`` over a ``compare --report`` folder would delete
    the comparison, its report and every policy's run. A folder of the user's own files is
    never replaced (:mod:`simbatch.report.outputs`)."""
    if not folder.exists():
        return None
    mine = "holds files simbatch did not write; an output folder is replaced whole, so give a new folder"
    if not folder.is_dir() or folder.is_symlink():
        return mine
    names = {p.name for p in folder.iterdir()}
    found = output_kind(names)
    if names and MARKER not in names and found is None:
        return mine
    if kind is not None and found is not None and found != kind:
        name = next(n for n, k in OUTPUT_KINDS.items() if k == found)
        return (f"holds a `simbatch {found}` output ({name}), which `simbatch {kind}` would replace whole; "
                f"give a new folder, or remove that one first")
    return None


def blocked_folder(path: Path) -> Path | None:
    """The folder on the way to ``path``, or ``path`` itself when it is a folder, that the user
    may not enter (so nothing in it can even be looked at), or None when every folder that
    exists there can be entered."""
    for p in (*reversed(path.parents), path):
        try:
            p.stat()
        except PermissionError:
            return p.parent
        except OSError:  # not there (or not a folder): nothing further down exists
            return None
    try:
        if path.is_dir():
            os.listdir(path)
    except PermissionError:
        return path
    return None


def _check_reachable(path: Path, where: str) -> None:
    """A one-line error at ``where`` when a folder on the way to ``path`` may not be entered
    (``Path.exists`` would raise ``PermissionError`` there, a traceback)."""
    folder = blocked_folder(path)
    if folder is not None:
        name = f"the working directory {os.getcwd()}" if folder == Path(".") else str(folder)
        raise SimbatchError(where, f"cannot enter {name} (permission denied), so nothing can be written there")


def check_out_dir(out_dir: str | Path, flag: str = "--out", whole: bool = True, kind: str | None = None) -> Path:
    """``out_dir`` if it can become an output folder, else a one-line error naming ``flag``:
    not an existing file, not under one, and its nearest existing folder writable (so an
    unwritable folder or ``/proc/x`` fails now, not after a long simulation). ``whole``: the
    command replaces the whole folder (:mod:`simbatch.report.outputs`), so an existing one
    must be empty or an earlier simbatch output (of command ``kind``, when given: :func:`refusal`),
    never a folder of the user's own files."""
    out_dir = Path(out_dir)
    _check_reachable(out_dir, f"{flag} {out_dir}")
    for path in (out_dir, *out_dir.parents):
        if path.exists() and not path.is_dir():
            where = flag if path == out_dir else f"{flag} {out_dir}"
            raise SimbatchError(where, f"{path} exists and is not a folder")
    why = refusal(out_dir, kind if kind in OUTPUT_KINDS.values() else None) if whole else None
    if why is not None:
        raise SimbatchError(f"{flag} {out_dir}", why)
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
    _check_reachable(path, str(path))
    if path.is_dir():
        raise SimbatchError(str(path), f"is a folder; give a file name such as {example}")
    if not path.parent.is_dir():
        raise SimbatchError(str(path), f"folder {path.parent} does not exist")
    _probe(path.parent, str(path))  # the file is written beside, then renamed: the folder must take it
    return path
