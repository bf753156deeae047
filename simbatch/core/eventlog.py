"""The event log: everything a run did, recorded by the engine, read by metrics.

The engine only records; every statistic is computed afterwards (SimPy's
monitoring idea). It records each step as it ends (one row of the per-step
columns, :attr:`EventLog.STEP_TYPES`) and each output token as a *stay* in or a
*join* of its request's token run. Per-token times are not stored one by one: a
request that emits a token at the end of its replica's step ``first`` and of
every *decode step* (a step with ``decode_tokens > 0``) after it up to ``last``
is recorded as one *token run* ``(request, replica, first, last)``, where step
numbers count that replica's steps from 0. A decode token stays in the
request's open run when no decode step of its replica ran since the run's
latest token (prefill-only steps that pause all decodes do not break runs); any
other token (a first token, one after a recompute or a break) joins a new run,
and the open one *leaves*: it is recorded, and never changes again. The log
keeps each request's open run itself, so the engine's requests hold scheduling
state only; token times are derived from the recorded runs after the run
(:meth:`EventLog.token_times`, :mod:`simbatch.metrics.requests`). A decoding
request emits at every decode step, so runs are long and few, and memory stays
per-request rather than per-token. Recorded columns are typed arrays
(``array.array``), not lists: 8 bytes a value rather than a Python object,
which matters for runs of millions of steps.
"""

from __future__ import annotations

from array import array

import numpy as np


_DTYPES = {"q": np.int64, "d": np.float64, "b": np.int8}  # array typecode -> numpy dtype


class EventLog:
    """Append-only record of one run (per-request arrays, per-step columns, token runs)."""

    # A step's record: name -> array typecode ("q": int64, "d": float64, "b": int8)
    STEP_TYPES = {
        "replica": "q",  # replica index
        "start_s": "d",  # step start (simulated seconds)
        "duration_s": "d",  # step wall time from the backend
        "num_seqs": "q",  # live requests in the batch
        "num_slots": "q",  # rows computed, padding-only rows included
        "prefill_tokens": "q",  # kept tokens in prefill chunks
        "decode_tokens": "q",  # kept tokens in decode slots
        "padded_tokens": "q",  # tokens computed and thrown away
        "kv_used_blocks": "q",  # KV blocks held after the step's allocation
        "num_waiting": "q",  # requests queued at the replica when the step started
        "stop_reason": "b",  # why the step's admission stopped (a code of simbatch.core.stop)
        "useful_flops": "d",  # FLOPs on kept tokens, per GPU
        "useful_bytes": "d",  # bytes moved for kept tokens, per GPU
    }
    STEP_COLUMNS = tuple(STEP_TYPES)

    def __init__(self, num_requests: int, num_replicas: int = 1):
        n = num_requests
        self.num_requests = n
        self.num_replicas = num_replicas
        self.arrival_s = np.full(n, np.nan)
        self.first_scheduled_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.num_emitted = np.zeros(n, dtype=np.int64)
        self.num_preemptions = np.zeros(n, dtype=np.int64)
        self.replica = np.full(n, -1, dtype=np.int64)
        self.steps: dict[str, array] = {c: array(t) for c, t in self.STEP_TYPES.items()}
        self._appends = tuple(column.append for column in self.steps.values())  # STEP_COLUMNS order
        self.replica_num_steps = [0] * num_replicas
        # Recorded (closed) token runs, one entry each.
        self.run_request = array("q")
        self.run_replica = array("q")
        self.run_first = array("q")
        self.run_last = array("q")
        # Each request's open token run: its replica, first and latest token's steps (first -1,
        # latest -2: none). Python lists, not arrays: the engine reads and writes them a value
        # at a time.
        self.open_replica = [-1] * n
        self.open_first = [-1] * n
        self.open_last = [-2] * n
        self.kv_capacity_blocks = [0] * num_replicas
        self.messages: list[str] = []  # notable things said during the run
        self.prefix_cache = None  # PrefixCacheStats when kv_cache.prefix_caching is on (simbatch.core.prefix_cache)
        self.speculation = None  # verify-step counts when speculative decoding is on (Acceptance.stats)
        self.control_rows: list[dict] = []  # online controllers' decisions (simbatch.control)
        # Prefill/decode disaggregation only (None otherwise; see enable_disaggregation).
        self.decode_replica: np.ndarray | None = None
        self.transfer_start_s: np.ndarray | None = None
        self.transfer_end_s: np.ndarray | None = None
        self.decode_start_s: np.ndarray | None = None
        self.kv_bytes: np.ndarray | None = None

    def enable_disaggregation(self) -> None:
        """Add the per-request arrays of a disaggregated run. ``replica`` then names the prefill
        replica (where the first token, hence TTFT, comes from) and ``decode_replica`` the
        decode replica (-1: none, e.g. a one-token request); ``transfer_start_s`` /
        ``transfer_end_s`` bound its KV transfer (which starts when the link is free, after
        the prefill); ``decode_start_s`` is the start of the first decode-replica step that
        computed it; ``kv_bytes`` the bytes sent."""
        n = self.num_requests
        self.decode_replica = np.full(n, -1, dtype=np.int64)
        self.transfer_start_s = np.full(n, np.nan)
        self.transfer_end_s = np.full(n, np.nan)
        self.decode_start_s = np.full(n, np.nan)
        self.kv_bytes = np.zeros(n)

    # --- steps -------------------------------------------------------------------------

    def append_step(self, *, replica: int, start_s: float, duration_s: float, num_seqs: int, num_slots: int,
                    prefill_tokens: int, decode_tokens: int, padded_tokens: int, kv_used_blocks: int,
                    num_waiting: int, stop_reason: int, useful_flops: float, useful_bytes: float) -> int:
        """Append one step's record, every column of :attr:`STEP_TYPES` by name; return its
        number on its replica. The engine's hot path, one call per simulated step: keywords
        cost no more than positions, where building a record object (a NamedTuple) would
        add about a third to the call."""
        a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12 = self._appends  # STEP_COLUMNS order
        a0(replica)
        a1(start_s)
        a2(duration_s)
        a3(num_seqs)
        a4(num_slots)
        a5(prefill_tokens)
        a6(decode_tokens)
        a7(padded_tokens)
        a8(kv_used_blocks)
        a9(num_waiting)
        a10(stop_reason)
        a11(useful_flops)
        a12(useful_bytes)
        k = self.replica_num_steps[replica]
        self.replica_num_steps[replica] = k + 1
        return k

    def append_steps(self, *, replica: int, start_s: list, duration_s: list, num_seqs: int, num_slots: int,
                     prefill_tokens: int, decode_tokens: int, padded_tokens: int, kv_used_blocks: int,
                     num_waiting: list, stop_reason: int, useful_flops: list, useful_bytes: list) -> int:
        """Append a run of ``len(start_s)`` consecutive steps of one replica at once, the columns
        named as in :meth:`append_step`: those given as lists have one value per step, the
        others one value for them all. Returns the first's number on the replica."""
        k, s = len(start_s), self.steps
        s["replica"].extend([replica] * k)
        s["start_s"].extend(start_s)
        s["duration_s"].extend(duration_s)
        for col, v in (("num_seqs", num_seqs), ("num_slots", num_slots), ("prefill_tokens", prefill_tokens),
                       ("decode_tokens", decode_tokens), ("padded_tokens", padded_tokens),
                       ("kv_used_blocks", kv_used_blocks), ("stop_reason", stop_reason)):
            s[col].extend([v] * k)
        s["num_waiting"].extend(num_waiting)
        s["useful_flops"].extend(useful_flops)
        s["useful_bytes"].extend(useful_bytes)
        first = self.replica_num_steps[replica]
        self.replica_num_steps[replica] = first + k
        return first

    # --- token runs: joins and leaves --------------------------------------------------

    def run_continues(self, request: int, since: int) -> bool:
        """Whether a token of ``request`` now would stay in its open token run: the run's
        latest token came at step ``since`` or later (``since`` >= -1: the replica's latest
        decode step before now; a run and the steps in it are one replica's)."""
        return self.open_last[request] >= since

    def stay(self, request: int, step: int) -> None:
        """``request`` emitted a token at the end of step ``step`` that stays in its open token
        run (as :meth:`run_continues` said): the run now covers every decode step up to it."""
        self.open_last[request] = step

    def join(self, request: int, replica: int, step: int) -> None:
        """``request`` emitted a token at the end of ``replica``'s step ``step`` that starts a new
        token run; its open run, if any, leaves first."""
        if self.open_first[request] >= 0:
            self.leave(request)
        self.open_replica[request] = replica
        self.open_first[request] = self.open_last[request] = step

    def leave(self, request: int) -> None:
        """``request``'s open token run (if it has one) ends: record it. The engine calls this
        when the request finishes, and at the end of the run for those that did not."""
        first = self.open_first[request]
        if first >= 0:
            self.record_token_run(request, self.open_replica[request], first, self.open_last[request])
            self.open_first[request], self.open_last[request] = -1, -2

    def record_token_run(self, request: int, replica: int, first: int, last: int) -> None:
        """Request ``request`` emitted a token at the end of ``replica``'s step ``first`` and of
        every decode step after it up to ``last`` (which is one, when ``last > first``)."""
        self.run_request.append(request)
        self.run_replica.append(replica)
        self.run_first.append(first)
        self.run_last.append(last)

    def note(self, message: str) -> None:
        """Keep a one-line remark for the run's log (e.g. why a batch was cut short)."""
        self.messages.append(message)

    # --- reading -----------------------------------------------------------------------

    def step_table(self) -> dict[str, np.ndarray]:
        """Per-step columns as read-only numpy views (in recording order; no copy, since
        a million-request run logs millions of steps). Read them after the run: a
        column cannot grow while a view of it is alive."""
        out = {}
        for c, v in self.steps.items():
            view = np.frombuffer(v, dtype=_DTYPES[v.typecode])
            view.flags.writeable = False
            out[c] = view
        return out

    def token_times(self) -> list[np.ndarray]:
        """Per request, the times its tokens were emitted (sorted), rebuilt from the runs."""
        table = self.step_table()
        ends = table["start_s"] + table["duration_s"] if len(table["start_s"]) else np.zeros(0)
        rows_by_replica = [np.flatnonzero(table["replica"] == r) for r in range(self.num_replicas)]
        ends_by_replica = [ends[rows] for rows in rows_by_replica]
        decode_by_replica = [table["decode_tokens"][rows] > 0 for rows in rows_by_replica]
        pieces: list[list[np.ndarray]] = [[] for _ in range(self.num_requests)]
        for req, rep, a, b in zip(self.run_request, self.run_replica, self.run_first, self.run_last):
            emits = decode_by_replica[rep][a : b + 1].copy()
            emits[0] = True  # the run's first token, wherever it came from
            pieces[req].append(ends_by_replica[rep][a : b + 1][emits])
        out = []
        for p in pieces:
            out.append(np.sort(np.concatenate(p)) if p else np.zeros(0))
        return out
