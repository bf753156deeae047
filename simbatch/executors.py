"""Where independent runs execute: in this process, a local process pool, or a Dask cluster.

Every executor has one verb, :meth:`Executor.map`, which runs ``fn`` on each
item and returns the results in item order, calling ``on_done(index, result)``
as each finishes (for progress bars). A run is a function of its scenario and
seed, so results do not depend on the executor.
"""

from __future__ import annotations

import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, Iterable, Protocol

from simbatch.errors import SimbatchError

EXECUTOR_KINDS = ("inline", "process", "dask")
OnDone = Callable[[int, object], None]


class Executor(Protocol):
    """Runs independent jobs."""

    name: str

    def map(self, fn: Callable, items: Iterable, on_done: OnDone | None = None) -> list:
        """``[fn(x) for x in items]``, possibly in parallel; results in item order."""
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

    def close(self) -> None:
        pass


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
    """A pool worker's start: tied to its parent's life, with the parent's policy files."""
    from simbatch.policies.registry import load_policy_files

    die_with_parent(parent_pid)
    load_policy_files(policy_files)


class ProcessExecutor:
    """A local process pool, one worker per core by default."""

    name = "process"

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.pool: ProcessPoolExecutor | None = None

    def map(self, fn, items, on_done=None):
        items = list(items)
        if self.workers == 1 or len(items) <= 1:
            return InlineExecutor().map(fn, items, on_done)
        if self.pool is None:
            # Workers load the user's policy files this process loaded (--policy-file), so a
            # scenario naming such a policy runs there too, whatever the start method.
            from simbatch.policies.registry import loaded_files

            self.pool = ProcessPoolExecutor(self.workers, initializer=_init_worker,
                                            initargs=(os.getpid(), loaded_files()))
        futures = {self.pool.submit(fn, item): i for i, item in enumerate(items)}
        results: list = [None] * len(items)
        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()  # re-raises the job's error (SimbatchError pickles)
            if on_done:
                on_done(i, results[i])
        return results

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


def make_executor(kind: str = "process", workers: int | None = None, address: str | None = None) -> Executor:
    """An executor by name; ``dask`` takes ``address`` ("local" starts a LocalCluster)."""
    if kind == "inline":
        return InlineExecutor()
    if kind == "process":
        return ProcessExecutor(workers)
    if kind == "dask":
        from simbatch.dask_executor import DaskExecutor  # optional extra: simbatch[dask]

        return DaskExecutor(address or "local", workers)
    raise SimbatchError("--executor", f"unknown executor {kind!r}; allowed: {', '.join(EXECUTOR_KINDS)}")
