"""A whole calibration: build the layer, measure every operator, write the profile."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import torch

from simbatch.backends.device import (
    DTYPES,
    available_cores,
    available_memory,
    default_dtype,
    device_facts,
    resolve_device,
)
from simbatch.backends.torch_layers import build_layer
from simbatch.calibrate.bench_attention import bench_decode, bench_prefill
from simbatch.calibrate.bench_backend import (
    bench_engine_overhead,
    bench_steps,
    build_step_backend,
)
from simbatch.calibrate.bench_linear import bench_linear
from simbatch.calibrate.bench_misc import bench_allreduce, bench_misc
from simbatch.calibrate.points import make_grid
from simbatch.calibrate.timing import Timer
from simbatch.calibrate.verdict import check_overwrite
from simbatch.catalog.models import ModelSpec
from simbatch.catalog.profiles import FORMAT, Profile, check_destination, write_profile
from simbatch.errors import SimbatchError
from simbatch.sweep.progress import StatusLine, format_duration
from simbatch.version import __version__

PROFILES_DIR = Path("calibration") / "profiles"
# Per-layer weights above which a CPU calibration takes long enough to warn about
# (the 'small' preset has 6M, Llama-2-7B 202M).
SLOW_CPU_LAYER_PARAMS = 50_000_000
# Timing settings: (warm-up calls, max repeats, min repeats, seconds budget per point).
FULL_TIMING = (3, 15, 3, 0.5)
QUICK_TIMING = (1, 5, 3, 0.2)


def default_out(kind: str, model: str, dtype: str, tensor_parallel: int = 1) -> Path:
    """``calibration/profiles/<device-kind>-<model>-<dtype>-tp<N>`` (relative to the working directory)."""
    return PROFILES_DIR / f"{kind}-{model}-{dtype}-tp{tensor_parallel}"


def calibrate(spec: ModelSpec, device: str = "cpu", dtype: str | None = None, quick: bool = False,
              out: str | Path | None = None, seed: int = 0, threads: int | None = None,
              progress: Callable[[str], None] | None = None, force: bool = False) -> tuple[Path, Profile]:
    """Measure every operator of ``spec`` on ``device`` and write the profile folder.

    Returns the folder (``out``, or :func:`default_out`) and the profile.
    ``threads`` (torch's intra-op threads) defaults to the cores this process
    may use. ``progress`` gets one line per measured point group (default:
    :class:`simbatch.sweep.progress.StatusLine`). A poor profile does not replace a good one at
    ``out`` unless ``force`` (:func:`simbatch.calibrate.verdict.check_overwrite`).
    """
    if progress is None:
        line = StatusLine("calibrate")
        try:
            return calibrate(spec, device, dtype, quick, out, seed, threads, line, force)
        finally:
            line.close()
    dev = resolve_device(device)
    dtype = dtype or default_dtype(dev.type)
    if dtype not in DTYPES:
        raise SimbatchError("--dtype", f"expected one of {', '.join(DTYPES)}, got {dtype!r}")
    if threads is not None and threads < 1:
        raise SimbatchError("--threads", f"must be >= 1, got {threads}")
    threads = threads or available_cores()
    torch.set_num_threads(threads)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)  # CUDA events record on the current device
    _check_size(spec, dev, DTYPES[dtype])
    facts = device_facts(dev, threads)
    out = Path(out) if out is not None else default_out(facts["kind"], spec.name, dtype)

    check_destination(out)  # before minutes of measuring, not after

    load_before = _load_average()
    start = time.perf_counter()
    rows, notes = measure(spec, dev, DTYPES[dtype], quick, seed, progress)
    rows += measure_steps(spec, dev, dtype, quick, seed, threads, progress)
    wall_s = time.perf_counter() - start
    if load_before is not None:
        notes.append(f"load average (1, 5, 15 min) {load_before} at start, {_load_average()} at end, "
                     f"on {os.cpu_count()} CPUs ({threads} used by torch)")
    header = _header(spec, facts, dtype, quick, seed, wall_s, notes, "cuda events" if dev.type == "cuda"
                     else "perf_counter_ns")
    profile = Profile(header, pd.DataFrame(rows))
    check_overwrite(profile, out, force)
    return write_profile(profile, out), profile


def _header(spec: ModelSpec, facts: dict, dtype: str, quick: bool, seed: int, wall_s: float, notes: list[str],
            clock: str) -> dict:
    """``profile.yaml``'s fields, in the order docs/profiles.md lists them."""
    warmup, max_repeats, min_repeats, budget_s = QUICK_TIMING if quick else FULL_TIMING
    return {
        "format": FORMAT, "source": "measured", "device": facts, "dtype": dtype, "tensor_parallel": 1,
        "model": {"name": spec.name, "num_layers": spec.num_layers, "hidden_size": spec.hidden_size,
                  "num_heads": spec.num_heads, "num_kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim,
                  "intermediate_size": spec.intermediate_size, "vocab_size": spec.vocab_size,
                  "gated_mlp": spec.gated_mlp},
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "simbatch": __version__, "quick": quick,
        "timing": {"warmup": warmup, "repeats": max_repeats, "min_repeats": min_repeats, "budget_s": budget_s,
                   "statistic": "median", "clock": clock, "seed": seed, "wall_s": round(wall_s, 1)},
        "notes": notes,
    }


def measure(spec: ModelSpec, dev: torch.device, dtype: torch.dtype, quick: bool, seed: int,
            progress: Callable[[str], None]) -> tuple[list[dict], list[str]]:
    """Every operator's rows, and notes on what was left out and how it was measured."""
    weights = build_layer(spec, dev, dtype, seed)
    grid = make_grid(spec, quick, weights.dtype_bytes, available_memory(dev), dev.type)
    timer = Timer(dev, *(QUICK_TIMING if quick else FULL_TIMING))
    # each bench reports once per point measured: linear and misc per token count
    progress = counted(progress, "operators", 2 * len(grid.tokens) + len(grid.prefill) + len(grid.decode))
    rows = bench_linear(weights, grid.tokens, timer, seed + 1, progress)
    rows += bench_prefill(weights, grid.prefill, timer, seed + 2, progress)
    rows += bench_decode(weights, grid.decode, timer, seed + 3, progress)
    rows += bench_misc(weights, grid.tokens, timer, seed + 4, progress)
    allreduce_rows, allreduce_note = bench_allreduce(dev, dtype, spec.hidden_size, grid.tokens, timer)
    rows += allreduce_rows
    notes = [
        allreduce_note,
        ("step_overhead: the engine's time between steps (policy scheduling, postprocessing) in a wall-clock "
         "run of the real engine (continuous batching) on the torch backend, by running requests (batch_size)"),
        ("step_forward / step_host: whole canonical plans on the torch backend (forward pass; host time "
         "preparing inputs and bookkeeping), synthetic grid of batch sizes x contexts, chunks x contexts, "
         "mixed"),
        "misc_step samples every row (argmax over the vocabulary): exact for decode, an upper bound for prefill",
        "attn_decode pads K/V to the longest context with a key-padding mask when context_spread > 1",
    ]
    if grid.dropped:
        notes.append(f"left out by the memory check: {'; '.join(grid.dropped)}")
    return rows, notes


def measure_steps(spec: ModelSpec, dev: torch.device, dtype: str, quick: bool, seed: int, threads: int,
                  progress: Callable[[str], None]) -> list[dict]:
    """Whole steps on the torch backend, then the engine's overhead (:mod:`simbatch.calibrate.bench_backend`)."""
    backend, points = build_step_backend(spec, dev, dtype, quick, seed, threads, available_memory(dev))
    try:
        rows = bench_steps(backend, points, quick, counted(progress, "steps", len(points)))
        rows += bench_engine_overhead(backend, spec, seed, progress)
        rows.append(speed_probe_row(backend))
    finally:
        del backend
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def speed_probe_row(backend) -> dict:
    """The ``speed_probe`` row: the machine-speed probe's forward pass now
    (:mod:`simbatch.calibrate.probe`), so that a validation can say how much faster or slower
    the machine runs than when this profile was measured."""
    from simbatch.calibrate.probe import PROBE_S, probe_contexts, probe_times
    from simbatch.calibrate.timing import summarize
    from simbatch.catalog.profiles import measurement_row

    contexts = probe_contexts(backend.spec.max_context)
    return measurement_row("speed_probe", len(contexts), summarize(probe_times(backend, contexts, PROBE_S)),
                           batch_size=len(contexts), context_tokens=contexts[len(contexts) // 2])


def _check_size(spec: ModelSpec, dev: torch.device, dtype: torch.dtype) -> None:
    """Refuse weights that do not fit; warn that big shapes are slow on CPU."""
    element = torch.empty((), dtype=dtype).element_size()
    weight_bytes = (spec.linear_params_per_layer + 2 * spec.vocab_size * spec.hidden_size) * element
    free = available_memory(dev)
    if weight_bytes > 0.8 * free:
        raise SimbatchError("--model", f"{spec.name}'s layer, embedding and LM head need "
                                       f"{weight_bytes / 2**30:.1f} GiB; {free / 2**30:.1f} GiB free on {dev}")
    if dev.type == "cpu" and spec.linear_params_per_layer > SLOW_CPU_LAYER_PARAMS:
        print(f"warning: {spec.name} on CPU is slow (each 8192-token GEMM takes seconds); "
              "--quick takes minutes, a full calibration much longer", file=sys.stderr)


def _load_average() -> str | None:
    try:
        return ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except (AttributeError, OSError):
        return None


def counted(progress: Callable[[str], None], phase: str, total: int,
            clock: Callable[[], float] = time.perf_counter) -> Callable[[str], None]:
    """``progress`` with each report numbered within ``phase`` (one report per point measured,
    of ``total``) and an ETA for the phase from the pace so far: ``operators 12/40, ETA 0:31: ...``."""
    start, done = clock(), 0

    def report(message: str) -> None:
        nonlocal done
        done += 1
        left = max(total - done, 0)
        eta = format_duration((clock() - start) / done * left)
        progress(f"{phase} {done}/{total}, ETA {eta}: {message}")

    return report
