"""Per-request metrics: one row per request, computed column-wise from the event log.

Names and formulas follow vLLM's ``benchmark_serving`` (TTFT, TPOT, ITL, E2EL);
``docs/metrics.md`` states every definition. Nothing here loops over requests
in Python: the per-request arrays give the timestamps, and token times are
taken from the *token runs* (``EventLog.record_token_run``) with numpy, so a
million requests take about a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbatch.core.eventlog import EventLog
from simbatch.errors import fail
from simbatch.metrics.columns import Columns, column, to_frame
from simbatch.metrics.steps import step_columns
from simbatch.workload.request import Workload

REQUEST_COLUMNS = (
    "id",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "replica",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "num_output_tokens",
    "completed",
    "ttft_ms",
    "tpot_ms",
    "e2el_ms",
    "queue_ms",
    "itl_mean_ms",
    "preemptions",
)


@dataclass(slots=True)
class TokenRuns:
    """The log's token runs as arrays, located in ``ends`` (step ends, replica by replica).

    Run ``j`` emitted a token at ``ends[first_pos[j]]`` and at every decode
    step (``is_decode``) after it up to ``ends[last_pos[j]]``; ``t_first`` /
    ``t_last`` are its first and last token times, ``num_tokens`` its count.
    ``decoded[p]`` counts the decode steps at flat positions ``<= p``;
    ``is_decode[p]`` says whether the step at ``p`` is one.
    """

    request: np.ndarray
    first_pos: np.ndarray
    last_pos: np.ndarray
    t_first: np.ndarray
    t_last: np.ndarray
    ends: np.ndarray
    decoded: np.ndarray
    is_decode: np.ndarray

    @property
    def num_tokens(self) -> np.ndarray:
        return 1 + self.decoded[self.last_pos] - self.decoded[self.first_pos]


def token_runs(log: EventLog, steps=None) -> TokenRuns:
    """Token runs as arrays, with each run's step numbers mapped to times (vectorised).

    ``steps``: the log's :func:`~simbatch.metrics.steps.step_columns` (or their DataFrame)
    when the caller has them; they are built otherwise. Their ``step`` and ``end_s`` columns
    place every step without sorting."""
    if steps is None:
        steps = step_columns(log)
    replica = column(steps, "replica", np.int64)
    # The steps laid out replica by replica (each in its step order): "(replica, step number)"
    # is the flat position offset[replica] + step.
    counts = np.bincount(replica, minlength=log.num_replicas)
    offsets = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    flat = offsets[replica] + column(steps, "step", np.int64)
    ends = np.empty(replica.size, dtype=np.float64)
    ends[flat] = column(steps, "end_s", np.float64)
    is_decode = np.empty(replica.size, dtype=bool)
    is_decode[flat] = column(steps, "decode_tokens") > 0
    del flat
    decoded = np.cumsum(is_decode)
    req = np.asarray(log.run_request, dtype=np.int64)
    rep = np.asarray(log.run_replica, dtype=np.int64)
    first = np.asarray(log.run_first, dtype=np.int64)
    last = np.asarray(log.run_last, dtype=np.int64)
    # Cheap guards: a bad run would otherwise read another replica's steps.
    if np.any((rep < 0) | (rep >= log.num_replicas)):
        raise ValueError("event log: a token run names an unknown replica")
    if np.any((first < 0) | (last < first) | (last >= counts[rep])):
        raise ValueError("event log: a token run lies outside its replica's recorded steps")
    first_pos, last_pos = offsets[rep] + first, offsets[rep] + last
    return TokenRuns(req, first_pos, last_pos, ends[first_pos], ends[last_pos], ends, decoded, is_decode)


def token_extent(runs: TokenRuns, num_requests: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request: (tokens in its runs, first token time, last token time); NaN times if none."""
    n_tokens = np.bincount(runs.request, weights=runs.num_tokens, minlength=num_requests)
    first = np.full(num_requests, np.inf)
    last = np.full(num_requests, -np.inf)
    np.minimum.at(first, runs.request, runs.t_first)
    np.maximum.at(last, runs.request, runs.t_last)
    first[np.isinf(first)] = np.nan
    last[np.isinf(last)] = np.nan
    return n_tokens.astype(np.int64), first, last


def itl_pool(runs: TokenRuns, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every gap between consecutive tokens of the requests in ``keep``, as (values s, counts).

    vLLM pools all inter-token gaps of all requests. Expanding them one by one
    would cost memory per token, so the pool is returned as distinct values with
    multiplicities. Within a run the tokens after the first fall on decode
    steps: a gap between two consecutive decode steps counts once per kept run
    spanning both; each run's first gap (its first token to the next decode
    step) and each break between two runs of one request (a preemption) count
    once each.
    """
    sel = keep[runs.request]
    first, last, decoded = runs.first_pos[sel], runs.last_pos[sel], runs.decoded
    dec_pos = np.flatnonzero(runs.is_decode)  # flat positions of decode steps
    long = last > first
    # In decode-step index space a run covers gaps decoded[first] .. decoded[last] - 2.
    start_idx, stop_idx = decoded[first[long]], decoded[last[long]] - 1
    m = dec_pos.size
    stop_idx[stop_idx < 0] += m + 1  # as an index -1 is the last slot (m), past every gap
    # How many runs cover each gap: +1 where a run starts covering, -1 where it stops, summed up.
    cover = np.bincount(start_idx, minlength=m + 1)
    cover -= np.bincount(stop_idx, minlength=m + 1)
    cover = np.cumsum(cover, out=cover)[: max(m - 1, 0)]
    used = cover > 0
    step_gaps = np.diff(runs.ends[dec_pos])[used]
    first_gaps = runs.ends[dec_pos[start_idx]] - runs.ends[first[long]]
    del dec_pos, start_idx, stop_idx, first, last, long
    breaks = _preemption_breaks(runs, sel)
    values = np.concatenate((step_gaps, first_gaps, breaks))
    counts = np.concatenate((cover[used], np.ones(first_gaps.size + breaks.size, dtype=np.int64)))
    return values, counts


def _preemption_breaks(runs: TokenRuns, sel: np.ndarray) -> np.ndarray:
    """The gaps between consecutive runs of one request (in request, then time order), over the
    runs ``sel`` selects. Only requests with two runs or more have any, so only their runs are
    sorted: filtering keeps the relative order of a stable sort, so the gaps and their order
    are those of sorting every run."""
    req = runs.request[sel]
    multi = np.bincount(req)[req] > 1
    req, t_first, t_last = req[multi], runs.t_first[sel][multi], runs.t_last[sel][multi]
    order = np.lexsort((t_first, req))
    req, t_first, t_last = req[order], t_first[order], t_last[order]
    same = req[1:] == req[:-1]
    return (t_first[1:] - t_last[:-1])[same]


def _check_sizes(log: EventLog, workload: Workload) -> None:
    if len(workload) != log.num_requests:
        fail("metrics", f"workload has {len(workload)} requests but the event log has {log.num_requests}")


def request_table(log: EventLog, workload: Workload):
    """One row per request in id order, as a pandas DataFrame: :func:`request_columns`."""
    return to_frame(request_columns(log, workload))


def request_columns(log: EventLog, workload: Workload, *, runs: TokenRuns | None = None) -> Columns:
    """One row per request in id order: timestamps, token counts and latencies (ms), as
    named numpy columns (:data:`REQUEST_COLUMNS`, then a disaggregated run's
    :data:`DISAGGREGATION_COLUMNS`).

    A latency is NaN when a timestamp it needs is missing (never scheduled,
    no token yet, unfinished); ``tpot_ms`` and ``itl_mean_ms`` need at least
    two output tokens. Summaries keep only ``completed`` rows. ``runs``: the log's
    :func:`token_runs` when the caller has them (built otherwise).
    """
    _check_sizes(log, workload)
    n = log.num_requests
    arrival, finish, first_tok = log.arrival_s, log.finish_s, log.first_token_s
    emitted = np.array(log.num_emitted, dtype=np.int64)
    completed = ~np.isnan(finish)
    with np.errstate(invalid="ignore", divide="ignore"):
        # TPOT as vLLM: (E2EL - TTFT) / (output tokens - 1), only for > 1 token.
        tpot = np.where(emitted > 1, (finish - first_tok) / (emitted - 1), np.nan)
        n_tok, t_first, t_last = token_extent(token_runs(log) if runs is None else runs, n)
        # The mean of consecutive gaps telescopes to (last - first) / (n - 1).
        itl_mean = np.where(n_tok > 1, (t_last - t_first) / (n_tok - 1), np.nan)
    cols = {
        "id": np.arange(n, dtype=np.int64),
        "arrival_s": np.array(arrival, dtype=np.float64),  # copies: the table outlives changes to the log
        "prompt_tokens": np.array(workload.prompt_tokens, dtype=np.int64),
        "output_tokens": np.array(workload.output_tokens, dtype=np.int64),
        "replica": np.array(log.replica, dtype=np.int64),
        "first_scheduled_s": np.array(log.first_scheduled_s, dtype=np.float64),
        "first_token_s": np.array(first_tok, dtype=np.float64),
        "finish_s": np.array(finish, dtype=np.float64),
        "num_output_tokens": emitted,
        "completed": completed,
        "ttft_ms": (first_tok - arrival) * 1e3,
        "tpot_ms": tpot * 1e3,
        "e2el_ms": (finish - arrival) * 1e3,
        "queue_ms": (log.first_scheduled_s - arrival) * 1e3,
        "itl_mean_ms": itl_mean * 1e3,
        "preemptions": np.array(log.num_preemptions, dtype=np.int64),
    }
    if log.decode_replica is not None:  # a disaggregated run: its handoff columns too
        cols.update(disaggregation_columns(log))
    return cols


# Request columns a disaggregated run adds (``queue_ms`` is then the prefill queue wait).
DISAGGREGATION_COLUMNS = ("decode_replica", "transfer_wait_ms", "transfer_ms", "decode_queue_ms", "kv_bytes")


def disaggregation_columns(log: EventLog) -> dict[str, np.ndarray]:
    """Per request of a disaggregated run: its decode replica, how long its KV waited for the
    link after the first token, the transfer, the wait in the decode queue, the bytes sent."""
    return {
        "decode_replica": np.array(log.decode_replica, dtype=np.int64),
        "transfer_wait_ms": (log.transfer_start_s - log.first_token_s) * 1e3,
        "transfer_ms": (log.transfer_end_s - log.transfer_start_s) * 1e3,
        "decode_queue_ms": (log.decode_start_s - log.transfer_end_s) * 1e3,
        "kv_bytes": np.array(log.kv_bytes, dtype=np.float64),
    }
