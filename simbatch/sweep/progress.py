"""A plain-text progress bar with an ETA, on stderr (no tqdm or rich dependency).

On a terminal it redraws one line in place::

    [#########.....................] 12/40 runs, elapsed 0:31, ETA 1:10

Elsewhere (a log file, CI) redrawing would only add noise, so it prints just
the final line when it is closed.

An open-ended count (``open_ended=True``: runs whose total nobody knows ahead, as
in ``simbatch capacity``, where each search picks its next probe from its last
answer) shows no bar and no ETA, which would extrapolate to the runs asked so far
only and read a few seconds for the whole of a long search::

    57 runs done, 4 under way, elapsed 0:10 (no ETA)
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import Callable, TextIO


def format_duration(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Runs finished out of ``total``; ``done`` were finished before (a resumed sweep).

    The ETA extrapolates the pace of the runs finished in this session only,
    so runs skipped on resume do not make it look faster than it is.
    """

    def __init__(self, total: int, done: int = 0, stream: TextIO | None = None, live: bool | None = None,
                 width: int = 30, clock: Callable[[], float] = time.monotonic, open_ended: bool = False):
        self.total, self.done, self.first = total, done, done
        self.open_ended = open_ended  # total: runs asked so far, not all there will be (module docstring)
        self.stream = stream or sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)()) if live is None else live
        self.width = width
        self.clock = clock
        self.start = clock()
        self.drawn = 0  # length of the line on screen, to blank what a shorter one leaves
        if self.live:
            self._draw("\r")

    def line(self) -> str:
        """The bar as text."""
        elapsed = self.clock() - self.start
        if self.open_ended:
            return (f"{self.done} run{'' if self.done == 1 else 's'} done, {self.total - self.done} under way, "
                    f"elapsed {format_duration(elapsed)} (no ETA)")
        ran, left = self.done - self.first, self.total - self.done
        eta = format_duration(elapsed / ran * left if left else 0) if ran or not left else "?"
        filled = self.width if not self.total else round(self.width * self.done / self.total)
        return (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} runs, "
                f"elapsed {format_duration(elapsed)}, ETA {eta}")

    def update(self, n: int = 1) -> None:
        """Count ``n`` more finished runs."""
        self.done += n
        if self.live:
            self._draw("\r")

    def close(self) -> None:
        """Print the final line (the only one when not on a terminal)."""
        self._draw("\r" if self.live else "")
        self.stream.write("\n")
        self.stream.flush()

    def _draw(self, prefix: str) -> None:
        text = self.line()
        self.stream.write(prefix + text.ljust(self.drawn))
        self.drawn = len(text)
        self.stream.flush()


class StatusLine:
    """Progress messages on stderr (``calibrate: <message> (12.3 s)``): on a terminal one line
    redrawn in place (``\r``, cut to the terminal's width so that it never wraps), elsewhere
    (a log file, CI) one plain line per message. Call :meth:`close` before printing anything else."""

    def __init__(self, label: str, stream: TextIO | None = None, live: bool | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.label, self.stream, self.clock = label, stream or sys.stderr, clock
        self.live = bool(getattr(self.stream, "isatty", lambda: False)()) if live is None else live
        self.start = clock()
        self.drawn = 0  # length of the line on screen, to blank what a shorter one leaves

    def __call__(self, message: str) -> None:
        text = f"{self.label}: {message} ({self.clock() - self.start:.1f} s)"
        if not self.live:
            print(text, file=self.stream, flush=True)
            return
        text = text[:max(20, shutil.get_terminal_size().columns - 1)]
        self.stream.write("\r" + text.ljust(self.drawn))
        self.drawn = len(text)
        self.stream.flush()

    def close(self) -> None:
        """End the redrawn line, so that what follows starts on a line of its own."""
        if self.live and self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = 0
