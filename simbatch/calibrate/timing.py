"""Timing one operation: warm-up, synchronisation, repeats, median and spread.

On CPU each call is timed with ``time.perf_counter_ns`` (torch runs eagerly,
so the call returning means the work is done). On a GPU each call is bracketed
by CUDA events and the end event is waited for, so the time is the GPU's, and
includes the launch latency a real engine step also pays.

Repeats adapt to the operation's cost: a call that takes a second is timed
``min_repeats`` times, a call that takes a microsecond ``max_repeats`` times,
so a full calibration fits its time budget without starving the fast points.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class Stats:
    """Seconds per call over ``repeats`` timed calls: median, 10th and 90th percentiles."""

    median_s: float
    p10_s: float
    p90_s: float
    repeats: int

    def as_row(self) -> dict:
        """The four timing columns of ``measurements.csv``."""
        return {"median_s": self.median_s, "p10_s": self.p10_s, "p90_s": self.p90_s, "repeats": self.repeats}


def summarize(seconds: list[float]) -> Stats:
    """Median and p10/p90 (linear interpolation) of per-call times."""
    if not seconds:
        raise ValueError("no timings to summarize")
    p10, median, p90 = np.percentile(np.asarray(seconds, dtype=float), [10, 50, 90])
    return Stats(float(median), float(p10), float(p90), len(seconds))


@dataclass(frozen=True, slots=True)
class Timer:
    """Times callables on one device.

    ``warmup`` untimed calls come first (fewer if they already used half of
    ``budget_s``: a one-second GEMM is warm after one call); then between
    ``min_repeats`` and ``max_repeats`` timed calls, as many as fit in
    ``budget_s`` judging by the last warm-up call. With ``budget_s`` infinite
    the counts are fixed (``warmup`` and ``max_repeats``), as processes timing
    a collective together need.
    """

    device: torch.device
    warmup: int = 3
    max_repeats: int = 7
    min_repeats: int = 3
    budget_s: float = 1.0

    def measure(self, fn: Callable[[], object]) -> Stats:
        """Per-call time statistics of ``fn()``."""
        once = self._cuda_once if self.device.type == "cuda" else _cpu_once
        estimate, spent = 0.0, 0.0
        for _ in range(max(1, self.warmup)):
            estimate = once(fn)
            spent += estimate
            if spent >= self.budget_s / 2:
                break
        repeats = self.max_repeats
        if math.isfinite(self.budget_s):  # an infinite budget: always max_repeats (collectives need that)
            repeats = max(self.min_repeats, min(self.max_repeats, int(self.budget_s / max(estimate, 1e-9))))
        # A collection in the middle of a timed call would land in its time.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return summarize([once(fn) for _ in range(repeats)])
        finally:
            if was_enabled:
                gc.enable()

    def _cuda_once(self, fn: Callable[[], object]) -> float:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in ms


def _cpu_once(fn: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1e9
