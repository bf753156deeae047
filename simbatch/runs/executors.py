"""Where independent runs execute: in this process, a local process pool, or a Dask cluster.

Every executor has two ways to run jobs. :meth:`Executor.map` runs ``fn`` on
each item of a known batch and returns the results in item order, calling
``on_done(index, result)`` as each finishes (for progress bars): what a sweep
needs. :meth:`Executor.submit` starts one job and returns its future, and
:meth:`Executor.wait_any` blocks until at least one of the given futures is
done: what a caller needs whose next jobs depend on earlier answers (the
capacity searches, which each go on as soon as their own runs are back rather
than waiting for a whole batch). A run is a function of its scenario and seed,
so results do not depend on the executor, nor on the order jobs finish in.
"""

from __future__ import annotations

import os
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait
from contextlib import contextmanager
from typing import Callable, Collection, Iterable, Protocol

from simbatch.errors import SimbatchError

EXECUTOR_KINDS = ("inline", "process", "dask")
OnDone = Callable[[int, object], None]


class Executor(Protocol):
    """Runs independent jobs."""

    name: str

    def map(self, fn: Callable, items: Iterable, on_done: OnDone | None = None) -> list:
        """``[fn(x) for x in items]``, possibly in parallel; results in item order."""
        ...

    def submit(self, fn: Callable, item) -> Future:
        """Start ``fn(item)``; its future (``done()``, ``result()`` re-raising the job's error, ``cancel()``)."""
        ...

    def wait_any(self, futures: Collection) -> set:
        """Block until at least one of ``futures`` (from :meth:`submit`) is done; the done ones."""
        ...

    def close(self) -> None:
        """Release workers."""
        ...


class InlineExecutor:
    """One job after another in this process (debugging, tiny sweeps)."""

    name = "inline"

    def map(self, fn, items, on_done=None):
        results = []
        for i, item in enumerate(items):
            results.append(fn(item))
            if on_done:
                on_done(i, results[-1])
        return results

    def submit(self, fn, item) -> Future:
        """Run ``fn(item)`` now; a future already done (with its result, or its error to re-raise)."""
        return run_now(fn, item)

    def wait_any(self, futures):
        """Every future of this executor is done when ``submit`` returns."""
        return wait_first(futures)

    def close(self) -> None:
        pass


def run_now(fn: Callable, item) -> Future:
    """``fn(item)`` run in this process, as a finished future: an error is kept for
    ``result()`` to raise, as a pool's future does (interrupts still stop at once)."""
    future: Future = Future()
    try:
        future.set_result(fn(item))
    except Exception as exc:  # noqa: BLE001 - handed to whoever asks for the result
        future.set_exception(exc)
    return future


def wait_first(futures: Collection) -> set:
    """The done ones among ``futures``, waiting until there is at least one."""
    if not futures:
        raise ValueError("wait_any needs at least one future")
    return wait(futures, return_when=FIRST_COMPLETED).done


PR_SET_PDEATHSIG = 1  # Linux prctl(2): the signal a process gets when its parent dies


def die_with_parent(parent_pid: int) -> None:
    """Make this (worker) process end when ``parent_pid`` does. A pool's workers outlive a
    parent killed with SIGKILL (no atexit, no pool shutdown): a killed sweep left them
    running its jobs for minutes. On Linux the kernel sends them SIGKILL when the parent
    dies (prctl PR_SET_PDEATHSIG); a parent already gone before that is set is checked
    after it."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # no libc prctl: keep the check below
            pass
    if os.getppid() != parent_pid:
        os._exit(1)


def _init_worker(parent_pid: int, policy_files: list) -> None:
    """A pool worker's start: tied to its parent's life, with the parent's policy files. Ctrl-C
    reaches the whole process group, so a worker ignores SIGINT (each printed a KeyboardInterrupt
    traceback) and leaves stopping to its parent, which ends it with SIGTERM, left at its default
    (a forked worker inherits the parent's handler, which would raise there)."""
    from simbatch.policies.registry import load_policy_files

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent_pid)
    load_policy_files(policy_files)


class ProcessExecutor:
    """A local process pool, one worker per core by default."""

    name = "process"

    live: set = set()  # executors with a started pool, for stop_all (an interrupt anywhere)

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.pool: ProcessPoolExecutor | None = None

    def map(self, fn, items, on_done=None):
        items = list(items)
        if self.workers == 1 or len(items) <= 1:
            return InlineExecutor().map(fn, items, on_done)
        pool = self._pool()
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        results: list = [None] * len(items)
        with self._stopped_on_interrupt():
            for fut in as_completed(futures):
                i = futures[fut]
                results[i] = fut.result()  # re-raises the job's error (SimbatchError pickles)
                if on_done:
                    on_done(i, results[i])
        return results

    def submit(self, fn, item) -> Future:
        """Queue ``fn(item)`` on the pool (one worker: run it here, now, as ``map`` does)."""
        if self.workers == 1:
            return run_now(fn, item)
        return self._pool().submit(fn, item)

    def wait_any(self, futures):
        """The done ones among ``futures``, waiting for the first to finish."""
        with self._stopped_on_interrupt():
            return wait_first(futures)

    @contextmanager
    def _stopped_on_interrupt(self):
        """On Ctrl-C or SIGTERM while waiting, end the workers now (they ignore SIGINT, so
        shutting the pool down would wait for their running jobs), then let the interrupt go on."""
        try:
            yield
        except KeyboardInterrupt:
            self.stop()
            raise

    def stop(self) -> None:
        """End the workers at once, dropping their jobs (SIGTERM, their default: no output)."""
        if self.pool is not None:
            processes = list((getattr(self.pool, "_processes", None) or {}).values())
            for process in processes:
                process.terminate()
            for process in processes:  # a worker caught before its initializer set SIGTERM's
                process.join(timeout=1.0)  # default handles it as its parent does and lives on:
                if process.is_alive():  # the interpreter's exit would wait for it for ever
                    process.kill()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
        ProcessExecutor.live.discard(self)

    @classmethod
    def stop_all(cls) -> None:
        """End every started pool's workers: an interrupt that lands outside a wait (while jobs
        are submitted, or between waits) would otherwise leave the interpreter's exit joining
        workers that are still running their jobs."""
        for executor in list(cls.live):
            executor.stop()

    def _pool(self) -> ProcessPoolExecutor:
        """The pool, started on first use."""
        if self.pool is None:
            # Workers load the user's policy files this process loaded (--policy-file), so a
            # scenario naming such a policy runs there too, whatever the start method.
            from simbatch.policies.registry import loaded_files

            self.pool = ProcessPoolExecutor(self.workers, initializer=_init_worker,
                                            initargs=(os.getpid(), loaded_files()))
            ProcessExecutor.live.add(self)
        return self.pool

    def close(self) -> None:
        """Stop the workers once their running jobs end; queued jobs nobody will read (a
        search stopped by an error) are dropped rather than run."""
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None
        ProcessExecutor.live.discard(self)


def check_jobs(jobs, where: str = "jobs") -> int | None:
    """``jobs`` when it is None (one worker per core) or a whole number >= 1, else a one-line
    :class:`SimbatchError` at ``where`` (``--jobs`` on the command line): the one rule of a
    worker count, for the CLI and the Python API alike (``jobs=0`` silently meant "all cores")."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise SimbatchError(where, f"must be >= 1, a whole number of workers (left out: one per core), "
                                   f"got {jobs!r}")
    return jobs


def make_executor(kind: str = "process", workers: int | None = None, address: str | None = None) -> Executor:
    """An executor by name; ``dask`` takes ``address`` ("local" starts a LocalCluster)."""
    if kind == "inline":
        return InlineExecutor()
    if kind == "process":
        return ProcessExecutor(workers)
    if kind == "dask":
        from simbatch.runs.dask import DaskExecutor  # optional extra: simbatch[dask]

        return DaskExecutor(address or "local", workers)
    raise SimbatchError("--executor", f"unknown executor {kind!r}; allowed: {', '.join(EXECUTOR_KINDS)}")
