"""User-facing errors.

Every mistake a user can make (bad file, bad field, impossible request) is raised
as a :class:`SimbatchError` whose message is one line naming the place and the
cause. The CLI prints it and exits non-zero, without a traceback.
"""

from __future__ import annotations


class SimbatchError(Exception):
    """A user error: one line, ``<where>: <cause>``."""

    def __init__(self, where: str, cause: str):
        self.where = str(where)
        self.cause = cause
        super().__init__(f"{self.where}: {cause}" if self.where else cause)

    def __reduce__(self):
        # Rebuilt from (where, cause), so the error survives a trip back from a
        # worker process (compare runs policies in a process pool).
        return (type(self), (self.where, self.cause))


def fail(where: str, cause: str) -> None:
    """Raise a :class:`SimbatchError` (a terse helper for validation code)."""
    raise SimbatchError(where, cause)


class Terminated(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM), raised where it runs, so every cleanup an
    interrupt gets (temporary output folders removed, workers stopped) runs for it too; the
    CLI then exits 143 (128 + SIGTERM) with one line."""
