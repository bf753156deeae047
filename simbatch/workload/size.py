"""How much memory a run of n requests needs, checked before anything is built.

A run holds each request's arrays, its scheduling state, its share of the
event log's per-step columns and, at the end, the per-request and per-step
tables. Measured as the growth of peak RSS over a whole run (simulation,
tables, summary) of ``benchmarks/scenarios/speed_c.yaml``: 1,935 bytes per
request at 50,000 requests and 1,567 at 200,000 (about four steps per
request; CPython 3.11, numpy 2, pandas 2, on this project's 2-core x86
development machine). :data:`BYTES_PER_REQUEST` rounds that up. A run with
more steps per request (small batches, long outputs) needs more, so the
estimate is a floor: a run is refused only when even the floor does not fit
in the memory the machine has available, which turns a numpy ``MemoryError``
traceback (or the machine swapping for minutes) into one line up front.

Each replica costs too (its policy, KV cache, simulation process and log
columns): 4,884 bytes per replica at 20,000 replicas of the classroom
scenario and 3,618 at 80,000, same machine; :data:`BYTES_PER_REPLICA` rounds
that up. A billion replicas (``--set cluster.replicas=1000000000``) hung
building them before this check.
"""

from __future__ import annotations

from simbatch.errors import SimbatchError

BYTES_PER_REQUEST = 2048
BYTES_PER_REPLICA = 5120
GiB = 1 << 30


def available_bytes() -> int | None:
    """Memory the system can give this process without swapping (Linux ``MemAvailable``);
    None where that cannot be read, which skips the check."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_fits_in_memory(num_requests: int, where: str, available: int | None = None,
                         num_replicas: int = 0, replicas_where: str = "cluster.replicas") -> None:
    """Refuse ``num_requests`` on ``num_replicas`` replicas when their floor estimate exceeds
    the available memory; the error names ``where`` (the workload) or ``replicas_where``,
    whichever needs more."""
    available = available_bytes() if available is None else available
    requests, replicas = num_requests * BYTES_PER_REQUEST, num_replicas * BYTES_PER_REPLICA
    need = requests + replicas
    if available is None or need <= available:
        return
    if replicas > requests:
        raise SimbatchError(replicas_where, f"{num_replicas:,} replicas need at least {need / GiB:,.1f} GiB "
                                            f"({BYTES_PER_REPLICA:,} bytes each, measured, and the requests), but "
                                            f"{available / GiB:,.1f} GiB is available; use fewer replicas")
    raise SimbatchError(where, f"{num_requests:,} requests need at least {need / GiB:,.1f} GiB "
                               f"({BYTES_PER_REQUEST:,} bytes each, measured), but {available / GiB:,.1f} GiB "
                               f"is available; run fewer requests (or split the trace)")
