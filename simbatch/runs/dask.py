"""Run independent jobs on a Dask cluster (the optional ``simbatch[dask]`` extra).

``DaskExecutor("local")`` starts a LocalCluster on this machine (one
single-threaded worker process per core, listening on loopback only, no
dashboard); ``DaskExecutor("tcp://host:8786")`` uses a running scheduler, so a
sweep that outgrows one machine runs on a real cluster unchanged. Workers
there need simbatch installed (the same version) and any trace files at the
same paths.
"""

from __future__ import annotations

import logging
import os

from simbatch.errors import SimbatchError

CONNECT_TIMEOUT = "10s"


def _distributed():
    """The ``distributed`` module, or the user error that says how to install it."""
    try:
        import distributed
    except ImportError:
        raise SimbatchError("--dask", "needs the dask extra: pip install 'simbatch[dask]'") from None
    return distributed


class DaskExecutor:
    """The Executor interface (:mod:`simbatch.runs.executors`) on a Dask cluster: ``local`` or a scheduler address."""

    name = "dask"

    def __init__(self, address: str = "local", workers: int | None = None):
        distributed = _distributed()
        self.address = address
        self.cluster = None
        if address == "local":
            # Processes, not threads: a run is pure-Python CPU work and would
            # hold the GIL; one thread per worker so each run has a core.
            self.cluster = distributed.LocalCluster(
                n_workers=max(1, workers or os.cpu_count() or 1), threads_per_worker=1, processes=True,
                host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR)
            self.client = distributed.Client(self.cluster)
            return
        try:
            self.client = distributed.Client(address, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as exc:
            raise SimbatchError(f"--dask {address}", f"cannot reach the scheduler: {exc}") from None

    def map(self, fn, items, on_done=None):
        """``[fn(x) for x in items]`` on the cluster; results in item order, ``on_done`` as each finishes."""
        from distributed import as_completed

        items = list(items)
        # pure=False: every item is its own task, even if two are equal.
        futures = self.client.map(fn, items, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list = [None] * len(items)
        try:
            for fut in as_completed(futures):
                i = index[fut.key]
                results[i] = fut.result()  # re-raises the job's error (SimbatchError pickles)
                if on_done:
                    on_done(i, results[i])
        except BaseException:
            self.client.cancel(futures)  # leave nothing running on a shared cluster
            raise
        return results

    def submit(self, fn, item):
        """Start ``fn(item)`` on the cluster; its Dask future (``done``, ``result``, ``cancel``)."""
        return self.client.submit(fn, item, pure=False)

    def wait_any(self, futures) -> set:
        """The done ones among ``futures``, waiting for the first to finish."""
        from distributed import wait

        if not futures:
            raise ValueError("wait_any needs at least one future")
        return set(wait(list(futures), return_when="FIRST_COMPLETED").done)

    def close(self) -> None:
        """Disconnect, and stop the LocalCluster if this executor started it."""
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
