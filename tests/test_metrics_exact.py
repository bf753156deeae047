"""The fast metric paths give exactly (bit for bit) what the plain numpy definitions give.

The step numbers, token runs, ITL pool and its weighted percentiles were rewritten to cost
less time and memory on a million requests (issue 18): fewer sorts, no copies of unread
columns. Below, the straightforward versions they replaced are the reference: each
sorts with ``np.argsort(kind="stable")`` and copies freely. Real runs (two replicas, a
small KV cache so that requests are preempted and their runs break) must give equal
summaries and tables, compared with ``==``, not approximately.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from simbatch.metrics.columns import RowsView, group_order, group_rows, num_rows, take_rows
from simbatch.metrics.requests import TokenRuns, itl_pool, token_runs
from simbatch.metrics.steps import step_columns
from simbatch.metrics.summary import weighted_latency_stats
from simbatch.runs.one import run
from simbatch.scenario.spec import load_scenario

# chat on two small A100-40GB replicas at 20 req/s: the KV cache runs out, requests are preempted
SMALL_KV = ["hardware=a100-40gb", "kv_cache.gpu_memory_utilization=0.36", "cluster.replicas=2",
            "workload.synthetic.num_requests=300", "workload.synthetic.arrival.rate=20",
            "workload.max_total_tokens=1500"]


def reference_step_numbers(replica: np.ndarray) -> np.ndarray:
    """Each step's number on its replica, by a stable sort of the replica column."""
    order = np.argsort(replica, kind="stable")
    counts = np.bincount(replica)
    starts = np.repeat(np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    step = np.empty(replica.size, dtype=np.int64)
    step[order] = np.arange(replica.size) - starts
    return step


def reference_token_runs(log) -> TokenRuns:
    """Token runs placed by sorting the log's steps by replica."""
    table = log.step_table()
    replica = np.asarray(table["replica"], dtype=np.int64)
    ends = np.asarray(table["start_s"], dtype=np.float64) + np.asarray(table["duration_s"], dtype=np.float64)
    order = np.argsort(replica, kind="stable")
    counts = np.bincount(replica, minlength=log.num_replicas)
    offsets = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    ends = ends[order]
    is_decode = np.asarray(table["decode_tokens"])[order] > 0
    rep = np.asarray(log.run_replica, dtype=np.int64)
    first_pos = offsets[rep] + np.asarray(log.run_first, dtype=np.int64)
    last_pos = offsets[rep] + np.asarray(log.run_last, dtype=np.int64)
    return TokenRuns(np.asarray(log.run_request, dtype=np.int64), first_pos, last_pos, ends[first_pos],
                     ends[last_pos], ends, np.cumsum(is_decode), is_decode)


def reference_itl_pool(runs: TokenRuns, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ITL pool with every run sorted for the breaks and np.add.at for the cover."""
    sel = keep[runs.request]
    first, last, decoded = runs.first_pos[sel], runs.last_pos[sel], runs.decoded
    dec_pos = np.flatnonzero(np.diff(decoded, prepend=0) > 0)
    long = last > first
    start_idx, stop_idx = decoded[first[long]], decoded[last[long]] - 1
    m = dec_pos.size
    delta = np.zeros(m + 1, dtype=np.int64)
    np.add.at(delta, start_idx, 1)
    np.add.at(delta, stop_idx, -1)
    cover = np.cumsum(delta)[: max(m - 1, 0)]
    step_gaps = np.diff(runs.ends[dec_pos])
    used = cover > 0
    first_gaps = runs.ends[dec_pos[start_idx]] - runs.ends[first[long]]
    req, t_first, t_last = runs.request[sel], runs.t_first[sel], runs.t_last[sel]
    order = np.lexsort((t_first, req))
    req, t_first, t_last = req[order], t_first[order], t_last[order]
    breaks = (t_first[1:] - t_last[:-1])[req[1:] == req[:-1]]
    values = np.concatenate((step_gaps[used], first_gaps, breaks))
    counts = np.concatenate((cover[used], np.ones(first_gaps.size + breaks.size, dtype=np.int64)))
    return values, counts


def reference_weighted(values, counts) -> dict:
    """Weighted mean and linear percentiles with copies at every step."""
    v, c = np.asarray(values, dtype=np.float64), np.asarray(counts, dtype=np.int64)
    keep = (c > 0) & ~np.isnan(v)
    v, c = v[keep], c[keep]
    order = np.argsort(v, kind="stable")
    v, c = v[order], c[order]
    cum = np.cumsum(c)
    n = int(cum[-1])
    out = {"mean": float(np.sum(v * c)) / n}
    for name, q in (("median", 50), ("p90", 90), ("p99", 99)):
        h = (n - 1) * q / 100.0
        lo = int(np.floor(h))
        a = v[np.searchsorted(cum, lo, side="right")]
        b = v[np.searchsorted(cum, min(lo + 1, n - 1), side="right")]
        t = h - lo
        out[name] = float(a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t))
    return out


@pytest.fixture(scope="module", params=["continuous", "chunked_prefill", "static"])
def out(request):
    return run(load_scenario("chat", [*SMALL_KV, f"policy.kind={request.param}"]))


def test_the_runs_preempt_on_two_replicas(out):
    # what the comparisons below need to mean something: runs that break, on two replicas
    assert out.summary["hardware"]["replicas"] == 2
    assert set(out.step_columns["replica"].tolist()) == {0, 1}
    if out.summary["policy"]["kind"] != "static":
        assert out.summary["preemptions"] > 0


def test_step_numbers_and_token_runs_equal_the_sorting_versions(out):
    log = out.result.log
    steps = step_columns(log)
    assert np.array_equal(steps["step"], reference_step_numbers(np.asarray(log.step_table()["replica"])))
    fast, ref = token_runs(log), reference_token_runs(log)
    for name in TokenRuns.__slots__:
        assert np.array_equal(getattr(fast, name), getattr(ref, name)), name


def test_itl_pool_and_its_stats_are_bit_identical(out):
    log = out.result.log
    runs = token_runs(log)
    done = ~np.isnan(log.finish_s)
    values, counts = itl_pool(runs, done)
    ref_values, ref_counts = reference_itl_pool(runs, done)
    assert np.array_equal(values, ref_values) and np.array_equal(counts, ref_counts)
    if out.summary["preemptions"]:
        assert values.size > np.count_nonzero(counts > 1)  # breaks and first gaps are in the pool
    assert out.summary["itl_ms"] == reference_weighted(ref_values * 1e3, ref_counts)


def test_weighted_stats_with_dropped_entries_equal_the_copying_version():
    rng = np.random.default_rng(3)
    values = np.round(rng.exponential(20.0, 5000), 1)  # many ties, as step gaps have
    counts = rng.integers(0, 4, 5000)
    values[::97] = np.nan
    assert weighted_latency_stats(values, counts) == reference_weighted(values, counts)
    assert weighted_latency_stats(values[counts > 0] + 0.0, counts[counts > 0]) == \
        reference_weighted(values[counts > 0], counts[counts > 0])


WEIGHTED_MEAN_IN_A_CHILD = """
import numpy as np
from simbatch.metrics.summary import weighted_latency_stats
rng = np.random.default_rng(0)
print(repr(weighted_latency_stats(rng.exponential(20.0, 2_000_000), rng.integers(1, 4, 2_000_000))["mean"]))
"""


def test_the_weighted_mean_does_not_depend_on_the_blas_thread_count():
    # np.dot splits a dot product over BLAS threads, so its last bits followed the machine's
    # thread count (a Dask worker's single thread gave another itl_mean_ms than the process
    # pool); a run must be a function of its scenario and seed alone.
    means = set()
    for threads in ("1", "2", "4"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        done = subprocess.run([sys.executable, "-c", WEIGHTED_MEAN_IN_A_CHILD], env=env, capture_output=True,
                              text=True, check=True)
        means.add(done.stdout.strip())
    assert len(means) == 1, means


@pytest.mark.parametrize("high", [1, 7, 255, 256, 5000, 65535, 65536, 1 << 40])
@pytest.mark.parametrize("dtype", [np.int64, np.uint32, np.int32])
def test_group_order_is_the_stable_argsort(high, dtype):
    if high > np.iinfo(dtype).max:
        pytest.skip("values do not fit the dtype")
    values = np.random.default_rng(high).integers(0, high, 20_000, endpoint=True).astype(dtype)
    if high <= 1 << 17:  # group_order counts every key: for replica numbers, not for any integers
        order, counts = group_order(values, size=3)
        assert np.array_equal(order, np.argsort(values, kind="stable"))
        assert np.array_equal(counts, np.bincount(values.astype(np.int64), minlength=3))
    groups = group_rows(values)
    keys, starts = np.unique(values, return_index=True)
    assert list(groups) == keys.tolist()
    for k in keys.tolist():
        assert np.array_equal(groups[k], np.flatnonzero(values == k))


def test_group_rows_of_other_values_and_of_nothing():
    assert group_rows(np.zeros(0, dtype=np.int64)) == {}
    groups = group_rows(np.array([3, -1, 3, -1, 0]))  # a disaggregated run's decode replicas: -1 for none
    assert list(groups) == [-1, 0, 3] and groups[-1].tolist() == [1, 3] and groups[3].tolist() == [0, 2]
    assert group_rows(np.array([0.5, 0.25, 0.5]))[0.5].tolist() == [0, 2]


def test_rows_view_reads_what_take_rows_copies():
    table = {"a": np.arange(6), "b": np.linspace(0, 1, 6)}
    rows = np.array([4, 1])
    view = RowsView(table, rows)
    assert list(view) == ["a", "b"] and len(view) == 2
    copied = take_rows(table, rows)
    assert all(np.array_equal(view[k], copied[k]) for k in table)
    assert num_rows(view) == 2 and view["b"] is view["b"]  # counted without a column; each taken once
    mask = np.array([True, False, True, False, False, True])
    assert num_rows(RowsView(table, mask)) == 3 and RowsView(table, mask)["a"].tolist() == [0, 2, 5]
