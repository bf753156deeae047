"""Run summary: one flat, JSON-safe dict per run (a stable interface other tools read).

Latency names and statistics follow vLLM's ``benchmark_serving``: statistics
over completed requests, percentiles by ``np.percentile`` (linear), ITL pooled
over every token gap. ``docs/metrics.md`` defines every key.
"""

from __future__ import annotations

import math

import numpy as np

from simbatch.core.eventlog import EventLog
from simbatch.core.prefix_cache import prefix_cache_summary
from simbatch.errors import fail
from simbatch.metrics.columns import column, num_rows
from simbatch.metrics.requests import TokenRuns, itl_pool, request_columns, token_runs
from simbatch.metrics.steps import step_columns
from simbatch.workload.request import Workload

SUMMARY_KEYS = (
    "num_requests",
    "completed",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "goodput",
    "slo_attainment",
    "padding_waste_frac",
    "slot_use_frac",
    "busy_frac",
    "waiting_frac",
    "mfu",
    "mbu",
    "kv_peak_frac",
    "admission_stops",
    "preemptions",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2el_ms",
    "queue_ms",
    "prefix_cache",
)
LATENCY_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "queue_ms")
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")
PERCENTILES = (50, 90, 99)


def _num(x) -> float | None:
    """A JSON-safe float: ``None`` for NaN, infinities and missing values."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _ratio(num: float, den: float) -> float | None:
    return _num(num / den) if den > 0 else None


def _stats(mean: float, p50: float, p90: float, p99: float) -> dict:
    return {"mean": _num(mean), "median": _num(p50), "p90": _num(p90), "p99": _num(p99)}


def latency_stats(values) -> dict:
    """``{mean, median, p90, p99}`` of ``values`` (NaN dropped; linear percentiles; None if empty)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return _stats(None, None, None, None)
    p50, p90, p99 = np.percentile(v, PERCENTILES)
    return _stats(v.mean(), p50, p90, p99)


def weighted_latency_stats(values, counts) -> dict:
    """:func:`latency_stats` of ``values`` with value ``i`` repeated ``counts[i]`` times.

    Gives what ``np.percentile`` (linear) gives on the expanded array, without
    expanding it: the k-th smallest element is found on the cumulative counts.
    """
    v = np.asarray(values, dtype=np.float64)
    c = np.asarray(counts, dtype=np.int64)
    keep = (c > 0) & ~np.isnan(v)
    if not keep.all():  # (a million requests' pool is 4 million values: no copy when nothing drops)
        v, c = v[keep], c[keep]
    del keep
    if v.size == 0:
        return _stats(None, None, None, None)
    order = np.argsort(v, kind="stable")
    v, c = v[order], c[order]
    del order
    # before the counts become their running sum, in place; np.sum's pairwise sum, not
    # np.dot: BLAS splits a dot product by thread, so its last bits would depend on the
    # machine's thread count and a run would not be a function of its scenario alone
    mean = float(np.sum(v * c))
    cum = np.cumsum(c, out=c)
    n = int(cum[-1])

    def kth(k: int) -> float:
        return v[np.searchsorted(cum, k, side="right")]

    pcts = []
    for q in PERCENTILES:
        h = (n - 1) * q / 100.0
        lo = math.floor(h)
        a, b, t = kth(lo), kth(min(lo + 1, n - 1)), h - lo
        # numpy's lerp form, so results agree with np.percentile to the last bit or two.
        pcts.append(a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t))
    return _stats(mean / n, *pcts)


def _itl_stats(runs: TokenRuns, done: np.ndarray) -> dict:
    """:func:`weighted_latency_stats` of the ITL pool of the ``done`` requests, in ms."""
    gaps, counts = itl_pool(runs, done)
    gaps *= 1e3  # in place: the same values as ``gaps * 1e3``, without a second pool
    return weighted_latency_stats(gaps, counts)


def _total(table, name: str) -> float:
    """Sum of a column, NaN skipped (as pandas' ``Series.sum``)."""
    values = column(table, name)
    if values.dtype.kind == "f" and np.isnan(values).any():
        return float(np.nansum(values))
    # Without a NaN, nansum sums a copy of the same values: the same sum, without the copy.
    return float(np.sum(values))


def slo_attaining(req, slo: dict) -> int:
    """Requests of the table ``req`` (columns or a DataFrame) that completed and met every given
    target (a 1-token request has no TPOT: passes)."""
    ok = column(req, "completed", bool).copy()
    for key, target in slo.items():
        if key not in SLO_KEYS:
            fail("slo", f"unknown metric {key!r}; use any of {', '.join(SLO_KEYS)}")
        v = column(req, key)
        ok &= (v <= float(target)) | (np.isnan(v) if key == "tpot_ms" else False)
    return int(ok.sum())


def _duration(log: EventLog, steps) -> float:
    """End of the run (last finish or last step end, whichever is later) minus the first arrival."""
    candidates = [0.0]
    if np.any(~np.isnan(log.finish_s)):
        candidates.append(float(np.nanmax(log.finish_s)))
    if num_rows(steps):
        candidates.append(float(np.nanmax(column(steps, "end_s"))))
    t0 = float(np.nanmin(log.arrival_s)) if np.any(~np.isnan(log.arrival_s)) else 0.0
    return max(candidates) - t0


def waiting_frac(log: EventLog, duration: float, front_end_s: float = 0.0) -> float | None:
    """Share of replica time during which at least one request waits to be admitted (vLLM's
    ``num_requests_waiting > 0``), over the replicas that requests arrive at: each request waits
    from reaching the scheduler (``arrival_s`` + the engine's front end ``front_end_s``) to
    ``first_scheduled_s`` (the run's end if it never ran), the union of
    those intervals per replica, summed and divided by ``duration`` x those replicas. Busy
    time says whether the GPU computed; this says whether requests queued for it, so it stays
    near 0 at light load and approaches 1 as the replica saturates. Waits after a
    preemption are not counted."""
    replica = np.asarray(log.replica)
    routed = replica >= 0
    if duration <= 0 or not routed.any():
        return None
    start = np.asarray(log.arrival_s, dtype=np.float64)[routed]
    end = np.asarray(log.first_scheduled_s, dtype=np.float64)[routed]
    t0 = float(start.min())
    end = np.minimum(np.where(np.isnan(end), t0 + duration, end), t0 + duration)
    start = np.minimum(start + front_end_s, end)
    replica = replica[routed]
    # Sorted by (replica, start); each replica's times shifted past the previous replica's so
    # one running maximum of the ends merges overlapping waits within a replica only.
    order = np.lexsort((start, replica))
    start, end, replica = start[order], end[order], replica[order]
    shift = (replica - replica.min()) * 2.0 * (duration + 1.0)
    reach = np.maximum.accumulate(end - t0 + shift)
    first = np.flatnonzero(np.r_[True, start[1:] - t0 + shift[1:] > reach[:-1]])
    waited = float(np.sum(np.maximum.reduceat(end, first) - start[first]))
    return _ratio(waited, duration * len(np.unique(replica)))


def admission_stops(steps) -> dict | None:
    """What held the queue back: over the steps that started with a request waiting, the share
    whose admission stopped for each reason (``stop_reason``, :mod:`simbatch.core.stop`), largest
    first; None when no step had a request waiting. At the knee this names the limit that binds
    (``kv``: memory, ``seats``: ``max_num_seqs``, ``budget``: the step's tokens)."""
    queued = column(steps, "num_waiting") > 0
    total = int(np.count_nonzero(queued))
    if not total:
        return None
    reasons, counts = np.unique(column(steps, "stop_reason")[queued].astype(str), return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return {str(reasons[i]) or "none": _ratio(int(counts[i]), total) for i in order}


def _busy_peak(steps, busy: float, peak) -> float:
    """Busy seconds x peak rate: ``peak`` is one number, or a list with each replica's (mixed GPUs)."""
    if np.ndim(peak) == 0:
        return busy * peak
    per_step = np.asarray(peak, dtype=np.float64)[column(steps, "replica")]
    return float(np.sum(column(steps, "duration_s", np.float64) * per_step))  # not np.dot: see above


def _step_metrics(log: EventLog, steps, duration: float, peak_flops: float,
                  peak_bandwidth: float, gpus: int, front_end_s: float = 0.0) -> dict:
    """Padding waste, slot use, busy fraction, MFU/MBU (while busy) and KV peak from the step columns."""
    busy = _total(steps, "duration_s")
    kept = float(np.sum(column(steps, "prefill_tokens")) + np.sum(column(steps, "decode_tokens")))
    padded = _total(steps, "padded_tokens")
    # A padded batch computes a row for every slot until its longest request is done.
    seats, slots = _total(steps, "num_seqs"), _total(steps, "num_slots")
    # useful_flops/bytes are per GPU: the replica's gpus do that much each, against
    # gpus x peak, so ``gpus`` cancels; it is kept to state the formula fully.
    flops = _total(steps, "useful_flops") * gpus
    nbytes = _total(steps, "useful_bytes") * gpus
    cap = np.asarray(log.kv_capacity_blocks, dtype=np.float64)
    step_cap = cap[column(steps, "replica")]
    known = step_cap > 0  # a replica with no stated capacity has no fraction
    kv_peak = None
    if known.any():
        kv_peak = _num((column(steps, "kv_used_blocks")[known] / step_cap[known]).max())
    return {
        "padding_waste_frac": _ratio(padded, kept + padded),
        "slot_use_frac": _ratio(seats, slots),
        "busy_frac": _ratio(busy, duration * log.num_replicas),
        "waiting_frac": waiting_frac(log, duration, front_end_s),
        "mfu": _ratio(flops, _busy_peak(steps, busy, peak_flops) * gpus),
        "mbu": _ratio(nbytes, _busy_peak(steps, busy, peak_bandwidth) * gpus),
        "kv_peak_frac": kv_peak,
        "admission_stops": admission_stops(steps),
    }


def summarize(log: EventLog, workload: Workload, *, slo: dict | None = None, peak_flops,
              peak_bandwidth, gpus_per_replica: int = 1, requests=None, steps=None,
              runs: TokenRuns | None = None, front_end_s: float = 0.0) -> dict:
    """The run's summary dict, keys exactly :data:`SUMMARY_KEYS` in that order (see docs/metrics.md).

    ``peak_flops`` and ``peak_bandwidth`` are per GPU: one number, or a list with
    each replica's when the cluster mixes GPUs. ``requests`` / ``steps``: the
    run's :func:`~simbatch.metrics.requests.request_columns` / :func:`step_columns` (or
    the DataFrames of :func:`request_table` / :func:`steps_table`) when the caller has
    them already (a million-request run would otherwise build each twice), and ``runs``
    the log's :func:`~simbatch.metrics.requests.token_runs` likewise. ``front_end_s``: the
    engine's front end (``engine.request_s``), before which an arrival is not yet waiting.
    """
    if not (np.all(np.asarray(peak_flops) > 0) and np.all(np.asarray(peak_bandwidth) > 0)
            and gpus_per_replica >= 1):
        fail("summarize", "peak_flops and peak_bandwidth must be > 0 and gpus_per_replica >= 1")
    steps = step_columns(log) if steps is None else steps
    runs = token_runs(log, steps) if runs is None else runs
    req = request_columns(log, workload, runs=runs) if requests is None else requests
    done = column(req, "completed", bool)
    duration = _duration(log, steps)
    out_tokens = float(column(req, "num_output_tokens")[done].sum())
    in_tokens = float(column(req, "prompt_tokens")[done].sum())
    attaining = slo_attaining(req, slo) if slo else None
    s = {
        "num_requests": int(log.num_requests),
        "completed": int(done.sum()),
        "duration_s": _num(duration),
        "request_throughput": _ratio(done.sum(), duration),
        "output_throughput": _ratio(out_tokens, duration),
        "total_token_throughput": _ratio(in_tokens + out_tokens, duration),
        "goodput": None if attaining is None else _ratio(attaining, duration),
        "slo_attainment": None if attaining is None else _ratio(attaining, log.num_requests),
        **_step_metrics(log, steps, duration, peak_flops, peak_bandwidth, gpus_per_replica, front_end_s),
        "preemptions": int(np.sum(log.num_preemptions)),
    }
    for key in LATENCY_KEYS:
        if key == "itl_ms":
            s[key] = _itl_stats(runs, done)
        else:
            s[key] = latency_stats(column(req, key)[done])
    s["prefix_cache"] = prefix_cache_summary(getattr(log, "prefix_cache", None), workload.prompt_tokens)
    return {k: s[k] for k in SUMMARY_KEYS}
