"""The one loader of the text files users give simbatch.

Scenarios, traces (and the traces of empirical length distributions), measured
server logs, profiles, Hugging Face ``config.json`` files and sweep or report
files are all read here, so every reason a file cannot be read gets the same
one-line message naming the file, never a traceback or a misleading "not found":

- a path that is not there: ``<path>: <what> not found``;
- a folder: ``<path>: is a folder, not a <what>``;
- ``/dev/null``, a pipe or another device: ``<path>: is not a regular file ...``;
- a file the user may not read: ``<path>: cannot read the <what>: permission denied``;
- bytes that are not UTF-8 (a Latin-1 byte, a binary file):
  ``<path>:<line>: not UTF-8 text (byte 0xe9 at offset 363); save the <what> as UTF-8``.

Text comes back as Python's own text mode gives it: a UTF-8 byte-order mark dropped
and ``\\r\\n`` or ``\\r`` line ends turned into ``\\n``.
"""

from __future__ import annotations

from pathlib import Path

from simbatch.errors import SimbatchError


def regular_file(path: str | Path, what: str = "file") -> Path:
    """``path`` as a :class:`Path` if it names a regular file, else the one-line error (module
    docstring); for callers that look at a file's name before reading it."""
    p = Path(path)
    try:
        if not p.exists():
            raise SimbatchError(str(p), f"{what} not found")
        if p.is_dir():
            raise SimbatchError(str(p), f"is a folder, not a {what}")
        if not p.is_file():
            raise SimbatchError(str(p), f"is not a regular file (a device or pipe?), not a {what}")
    except PermissionError:  # a folder on the way the user may not enter
        raise SimbatchError(str(p), f"cannot read the {what}: permission denied") from None
    except OSError as exc:  # a path too long, a name the filesystem refuses
        raise SimbatchError(str(p), f"cannot read the {what}: {exc.strerror or exc}") from None
    return p


def read_text(path: str | Path, what: str = "file") -> str:
    """The UTF-8 text of ``path``; every reason it cannot be read is a one-line error."""
    p = regular_file(path, what)
    try:
        data = p.read_bytes()
    except PermissionError:
        raise SimbatchError(str(p), f"cannot read the {what}: permission denied") from None
    except OSError as exc:
        raise SimbatchError(str(p), f"cannot read the {what}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SimbatchError(f"{p}:{line}", f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                                           f"{exc.start}); save the {what} as UTF-8") from None
    if "\r" in text:  # universal newlines, as open() in text mode reads them
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text
