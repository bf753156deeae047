"""Whole steps on the torch backend: what the per-operator benchmarks cannot see.

The operator benchmarks time each operator alone, back to back on the same
tensors. A real step differs in ways that matter on a CPU and for small
models (measured on the tiny model, 1 thread, docs/validation.md):

* weights are cache-cold: between two uses of a matrix the other layers'
  matrices went through the cache (a 1-token QKV GEMM takes 12 us hot, 38 us
  inside a forward pass, 70 us fully cold);
* decode attention first gathers every row's K and V out of the paged pool
  (padded to the longest context) and runs SDPA on the gathered,
  non-contiguous tensors: 2-3x the calibrated kernel alone at 32 x 512;
* glue the profile has no operator for: KV writes into the pool, the views
  and concatenations, cos/sin lookups, the sampled ids read back;
* the backend's host work per step (plan -> index tensors, block tables) and
  the engine's own scheduling and bookkeeping between steps.

So this stage runs the backend's real code path on synthetic plans and writes
three kinds of rows (docs/profiles.md):

* ``step_forward``: the measured forward pass of one *canonical plan*
  (:func:`simbatch.costmodel.profile.canonical_plan`: ``batch_size``
  sequences at ``context_tokens`` cached tokens each, ``num_tokens`` rows:
  all decodes, one prefill chunk, or decodes plus one chunk). The cost model
  fits what its operators miss on these rows
  (:func:`simbatch.costmodel.profile_fit.fit_backend_terms`);
* ``step_host``: the backend's host time around that forward pass
  (preparing inputs, bookkeeping after it);
* ``step_overhead``: the engine's time between steps (policy scheduling,
  postprocessing, event handling) in a short wall-clock run of the real
  :class:`~simbatch.engine.replica.Replica` and the continuous-batching policy
  on this backend, one row per number of running requests.

The plans are a fixed grid (batch sizes x contexts, chunk lengths x contexts,
a few mixed plans), independent of any workload, so a validation against a
trace stays an out-of-sample check. The KV cache is filled by bookkeeping
only (blocks allocated, lengths set): timing does not depend on its values,
and a 64 x 1024 decode batch needs no 64K-token prefill first.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable

import numpy as np
import torch

from simbatch.calibrate.timing import Stats, summarize
from simbatch.catalog.models import ModelSpec
from simbatch.catalog.profiles import measurement_row
from simbatch.costmodel.profile import canonical_plan

BLOCK_SIZE = 16
# (decode batch sizes, decode contexts, prefill chunks, prefill contexts, mixed (decodes, chunk) pairs)
FULL_STEPS = ([1, 2, 4, 8, 16, 32, 64], [16, 128, 512, 1536], [2, 8, 32, 128, 512, 1536],
              [0, 256, 1024], [(4, 32), (16, 128), (32, 256)])
QUICK_STEPS = ([1, 4, 16, 64], [32, 512], [8, 64, 512], [0, 512], [(8, 64)])
# Decode batches read at most this many KV tokens (a CPU point beyond takes long and adds nothing).
MAX_STEP_KV_TOKENS = {"cpu": 2**16, "cuda": 2**20}
KV_MEMORY_SHARE = 0.25  # of the free memory (after the weights), for the calibration's KV pool
# Timing: repeats per plan (at least MIN), within a seconds budget per plan.
FULL_STEP_TIMING, QUICK_STEP_TIMING = (9, 3, 0.4), (5, 3, 0.15)
# The wall-clock engine run: requests arrive over ENGINE_SPREAD_S so the running batch
# takes many sizes; prompts and outputs are short so the run takes a few seconds.
ENGINE_REQUESTS, ENGINE_SPREAD_S = 24, 0.4


def step_points(spec: ModelSpec, quick: bool, device_type: str,
                free_bytes: float = float("inf"), dtype_bytes: int = 4) -> list[tuple[int, int, int]]:
    """Canonical plans as (rows, sequences, context) within the model's context window and
    a KV pool of at most ``KV_MEMORY_SHARE`` of ``free_bytes``."""
    batches, contexts, chunks, pre_contexts, mixed = QUICK_STEPS if quick else FULL_STEPS
    per_token = 2 * spec.num_layers * spec.kv_size * dtype_bytes
    cap = min(MAX_STEP_KV_TOKENS.get(device_type, MAX_STEP_KV_TOKENS["cpu"]),
              KV_MEMORY_SHARE * free_bytes / per_token)
    max_ctx = spec.max_context - 1
    points = [(b, b, c) for b in batches for c in contexts if c < max_ctx and b * (c + 1) <= cap]
    points += [(q, 1, c) for q in chunks for c in pre_contexts if q > 1 and q + c <= max_ctx]
    for d, q in mixed:
        c = min(256, max_ctx - q)
        if c > 0 and (d + 1) * (c + q) <= cap:
            points.append((d + q, d + 1, c))
    return points


def kv_tokens_needed(points: list[tuple[int, int, int]], repeats: int) -> int:
    """Pool tokens the largest plan needs (every sequence's context, its new rows, and
    the decode steps the repeats add), in whole blocks per sequence."""
    need = 0
    for rows, seqs, ctx in points:
        per = -(-(ctx + rows + repeats + 2) // BLOCK_SIZE) * BLOCK_SIZE
        need = max(need, seqs * per)
    return need


def time_plan(backend, rows: int, seqs: int, ctx: int, timing: tuple[int, int, float]) -> tuple[Stats, Stats]:
    """(forward, host) statistics of the canonical plan over fresh fake contexts each repeat."""
    max_repeats, min_repeats, budget_s = timing
    forward, host = [], []

    def once():
        for rid in range(seqs):
            backend.pool.pretend(rid, ctx)
        backend._last_end = None  # host time: this step's own, not the gap since the last repeat
        backend.step_cost(canonical_plan(rows, seqs, ctx))
        rec = backend.steps.pop()
        return rec.forward_s, rec.prepare_s + rec.post_s

    first = once()  # warm-up (allocator, kernel choice for this shape)
    repeats = max(min_repeats, min(max_repeats, int(budget_s / max(first[0], 1e-6))))
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            f, h = once()
            forward.append(f)
            host.append(h)
    finally:
        if was_enabled:
            gc.enable()
    for rid in range(seqs):
        backend.pool.release(rid)
    return summarize(forward), summarize(host)


def bench_steps(backend, points: list[tuple[int, int, int]], quick: bool,
                progress: Callable[[str], None] = lambda _: None) -> list[dict]:
    """``step_forward`` and ``step_host`` rows, one each per canonical plan in ``points``."""
    timing = QUICK_STEP_TIMING if quick else FULL_STEP_TIMING
    rows = []
    for n, seqs, ctx in points:
        fwd, host = time_plan(backend, n, seqs, ctx, timing)
        extra = {"context_tokens": ctx, "batch_size": seqs}
        rows.append(measurement_row("step_forward", n, fwd, **extra))
        rows.append(measurement_row("step_host", n, host, **extra))
        progress(f"step {n} rows, {seqs} seqs over {ctx}")
    return rows


def engine_workload(seed: int, max_context: int) -> list[dict]:
    """Short synthetic requests arriving over a fraction of a second (the engine-overhead run)."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(8, 64, ENGINE_REQUESTS)
    output = rng.integers(8, 48, ENGINE_REQUESTS)
    arrival = np.sort(rng.uniform(0.0, ENGINE_SPREAD_S, ENGINE_REQUESTS))
    return [{"prompt": int(min(p, max_context // 2)), "output": int(min(o, max_context // 2)),
             "arrival_s": round(float(t), 4)} for p, o, t in zip(prompt, output, arrival)]


def bench_engine_overhead(backend, spec: ModelSpec, seed: int,
                          progress: Callable[[str], None] = lambda _: None) -> list[dict]:
    """``step_overhead`` rows: the engine's time between steps by running requests, from a
    wall-clock run of the real engine (continuous batching) on this backend."""
    from simbatch.catalog.models import DEPLOYMENT_FIELDS
    from simbatch.engine.realtime import run_realtime
    from simbatch.scenario.spec import from_dict

    # The spec's fields as a model entry; how experts are laid out is the cluster's, not the model's.
    model = {k: v for k, v in dataclasses.asdict(spec).items() if k not in DEPLOYMENT_FIELDS}
    data = {"name": "calibrate_engine", "workload": {"requests": engine_workload(seed, spec.max_context)},
            "model": model, "hardware": "a100-80gb",
            "policy": {"kind": "continuous", "max_num_seqs": 16, "max_num_batched_tokens": 512},
            "kv_cache": {"block_size": backend.pool.block_size}, "seed": seed}
    scenario = from_dict(data, "calibrate")
    workload = scenario.build_workload()
    start = time.perf_counter()
    run_realtime(scenario, workload, backend)
    by_seqs: dict[int, list[float]] = {}
    for rec in backend.steps:
        by_seqs.setdefault(rec.plan.num_seqs, []).append(rec.schedule_s)
    backend.reset()
    rows = [measurement_row("step_overhead", 0, summarize(times), batch_size=n)
            for n, times in sorted(by_seqs.items()) if len(times) >= 3]
    if not rows:  # too few steps of any one size (cannot happen with this workload, but be safe)
        rows = [measurement_row("step_overhead", 0, summarize([t for v in by_seqs.values() for t in v]))]
    progress(f"engine overhead: {sum(map(len, by_seqs.values()))} steps in {time.perf_counter() - start:.1f} s")
    return rows


def build_step_backend(spec: ModelSpec, dev: torch.device, dtype_name: str, quick: bool, seed: int,
                       threads: int, free_bytes: float):
    """(a warmed-up :class:`TorchBackend` with room for the largest calibration plan, the plans)."""
    from simbatch.backends.device import DTYPES
    from simbatch.backends.torch_backend import TorchBackend

    element = torch.empty((), dtype=DTYPES[dtype_name]).element_size()
    free = free_bytes - spec.num_params * element
    points = step_points(spec, quick, dev.type, free, element)
    timing = QUICK_STEP_TIMING if quick else FULL_STEP_TIMING
    engine = sum(r["prompt"] + r["output"] + BLOCK_SIZE for r in engine_workload(seed, spec.max_context))
    tokens = max(kv_tokens_needed(points, timing[0] + 2), engine)
    backend = TorchBackend(spec, num_blocks=-(-tokens // BLOCK_SIZE) + 2, block_size=BLOCK_SIZE,
                           device=str(dev), dtype=dtype_name, seed=seed, threads=threads)
    backend.warmup()
    return backend, points
