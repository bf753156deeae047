"""The ``simbatch`` command line (subcommands live in :mod:`simbatch.commands`).

User errors print one line (``simbatch: error: <where>: <cause>``) and exit 2,
without a traceback and without writing any output. Ctrl-C exits 130 and SIGTERM 143, each
with one line, after the same cleanup (no temporary folder is left behind).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from contextlib import contextmanager

from simbatch.commands import COMMANDS
from simbatch.errors import SimbatchError, Terminated


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, one subparser per command module."""
    from simbatch.version import __version__

    p = argparse.ArgumentParser(prog="simbatch", description="Simulate LLM-inference batching policies.")
    p.add_argument("--version", action="version", version=f"simbatch {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.add_arguments(sub.add_parser(module.NAME, help=module.HELP))
    return p


class _ClosedPipeGuard:
    """stdout that outlives its reader: ``simbatch run ... --out d | head -1`` prints what
    ``head`` takes, then drops the rest and goes on (the files are still written), instead of
    ending in a ``BrokenPipeError`` traceback."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        # Point the descriptor itself at /dev/null, so the interpreter's own flush at exit
        # (of text the stream still buffers) does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _terminate(signum, frame) -> None:
    """SIGTERM's handler: stop as Ctrl-C does, so temporary folders are removed on the way out."""
    raise Terminated()


@contextmanager
def _sigterm_stops():
    """SIGTERM raises :class:`Terminated` while the command runs (only the main thread may set a
    handler: ``main`` called from another thread keeps the default); the previous handler after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _stop_workers() -> None:
    """After an interrupt, end any process pool still running jobs, wherever the interrupt
    landed, so the interpreter's exit does not wait for them (simbatch.runs.executors)."""
    if "simbatch.runs.executors" in sys.modules:
        sys.modules["simbatch.runs.executors"].ProcessExecutor.stop_all()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``simbatch`` console script."""
    args = build_parser().parse_args(argv)
    command = {m.NAME: m for m in COMMANDS}[args.command]
    stdout, sys.stdout = sys.stdout, _ClosedPipeGuard(sys.stdout)
    try:
        with _sigterm_stops():
            command.run(args)
    except SimbatchError as exc:
        if getattr(args, "scenario", None):
            from simbatch.files.bundled import resolve_scenario_path
            from simbatch.scenario.spec import locate

            exc = locate(exc, resolve_scenario_path(args.scenario), getattr(args, "overrides", []))
        print(f"simbatch: error: {exc}", file=sys.stderr)
        return 2
    except Terminated:
        _stop_workers()
        print("simbatch: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        _stop_workers()
        print("simbatch: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout = stdout
    return 0


def console() -> None:
    """The console script: :func:`main`, then exit with its code. After an interrupt the
    workers are gone but a pool's manager thread may still wait on a result a killed worker
    was writing when it died (CPython's ``_ExecutorManagerThread`` blocks in ``recv`` on the
    partial message), and the interpreter's exit joins that thread for ever (seen: SIGTERM on
    ``compare --jobs 2`` hung 2 runs in 2 under the full test suite). Cleanup has run by then
    (temporary folders removed, the line printed), so the process leaves at once."""
    code = main()
    if code in (130, 143):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console()
