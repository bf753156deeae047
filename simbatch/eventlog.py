"""The event log: everything a run did, recorded by the engine, read by metrics.

The engine only appends; every statistic is computed afterwards (SimPy's
monitoring idea). Per-token times are not stored one by one: a request that
emits a token at the end of its replica's step ``first`` and of every
*decode step* (a step with ``decode_tokens > 0``) after it up to ``last`` is
recorded as one *token run* ``(request, replica, first, last)``, where step
numbers count that replica's steps from 0. A decoding request emits at every
decode step, and prefill-only steps that pause all decodes do not break its
run, so runs are long and few, and memory stays per-request rather than
per-token. Columns are typed arrays (``array.array``), not lists: 8 bytes a
value rather than a Python object, which matters for runs of millions of steps.
"""

from __future__ import annotations

from array import array

import numpy as np


class EventLog:
    """Append-only record of one run (per-request arrays, per-step columns, token runs)."""

    # name -> array typecode ("q": int64, "d": float64)
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
        self.replica_num_steps = [0] * num_replicas
        self.run_request = array("q")
        self.run_replica = array("q")
        self.run_first = array("q")
        self.run_last = array("q")
        self.kv_capacity_blocks = [0] * num_replicas
        self.messages: list[str] = []  # notable things said during the run
        self.prefix_cache = None  # PrefixCacheStats when kv_cache.prefix_caching is on (simbatch.prefix_cache)
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

    def record_step(self, **values) -> int:
        """Append one step (all :attr:`STEP_COLUMNS`); return its number on its replica."""
        return self.append_step(*(values[c] for c in self.STEP_COLUMNS))

    def append_step(self, replica, start_s, duration_s, num_seqs, num_slots, prefill_tokens,
                    decode_tokens, padded_tokens, kv_used_blocks, num_waiting, useful_flops,
                    useful_bytes) -> int:
        """:meth:`record_step` with the columns in :attr:`STEP_COLUMNS` order (the engine's
        hot path: one call per simulated step, without building a dict)."""
        s = self.steps
        s["replica"].append(replica)
        s["start_s"].append(start_s)
        s["duration_s"].append(duration_s)
        s["num_seqs"].append(num_seqs)
        s["num_slots"].append(num_slots)
        s["prefill_tokens"].append(prefill_tokens)
        s["decode_tokens"].append(decode_tokens)
        s["padded_tokens"].append(padded_tokens)
        s["kv_used_blocks"].append(kv_used_blocks)
        s["num_waiting"].append(num_waiting)
        s["useful_flops"].append(useful_flops)
        s["useful_bytes"].append(useful_bytes)
        k = self.replica_num_steps[replica]
        self.replica_num_steps[replica] = k + 1
        return k

    def append_steps(self, replica: int, starts: list, durations: list, num_seqs: int, num_slots: int,
                     prefill_tokens: int, decode_tokens: int, padded_tokens: int, kv_used_blocks: int,
                     num_waiting: list, useful_flops: list, useful_bytes: list) -> int:
        """:meth:`append_step` for a run of ``len(starts)`` consecutive steps of one replica at
        once (lists per step, the other columns the same for each); returns the first's
        number on the replica."""
        k, s = len(starts), self.steps
        s["replica"].extend([replica] * k)
        s["start_s"].extend(starts)
        s["duration_s"].extend(durations)
        for col, v in (("num_seqs", num_seqs), ("num_slots", num_slots), ("prefill_tokens", prefill_tokens),
                       ("decode_tokens", decode_tokens), ("padded_tokens", padded_tokens),
                       ("kv_used_blocks", kv_used_blocks)):
            s[col].extend([v] * k)
        s["num_waiting"].extend(num_waiting)
        s["useful_flops"].extend(useful_flops)
        s["useful_bytes"].extend(useful_bytes)
        first = self.replica_num_steps[replica]
        self.replica_num_steps[replica] = first + k
        return first

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

    def step_table(self) -> dict[str, np.ndarray]:
        """Per-step columns as read-only numpy views (in recording order; no copy, since
        a million-request run logs millions of steps). Read them after the run: a
        column cannot grow while a view of it is alive."""
        out = {}
        for c, v in self.steps.items():
            view = np.frombuffer(v, dtype=np.int64 if v.typecode == "q" else np.float64)
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
