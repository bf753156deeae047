"""The machine-speed probe: one fixed decode step, timed back to back.

A profile is a snapshot of the machine that measured it. On a shared machine
that machine's speed moves over seconds (other processes, clocks, memory
bandwidth shared with neighbours), and a validation cannot tell that drift
from the cost model's error unless it measures it. The probe is one decode
step of three sequences at 280-320 tokens of context (within the model's
window), whose requests have ids no workload uses: the calibration times it
for :data:`PROBE_S` at its end (the profile's ``speed_probe`` row), and
``simbatch validate`` times it again before and after each policy's run
(:func:`simbatch.validation.noise.probe_ms`, ``machine_speed``);
:func:`speed_drift` times it for longer, in windows, to show how much the
machine moves on its own (``benchmarks/bench_validate.py``).
"""

from __future__ import annotations

import time

import numpy as np

PROBE_CONTEXTS = (280, 300, 320)  # the probe: three decodes at these contexts (capped by the model's window)
PROBE_S = 1.0  # seconds of probing at calibration, and before and after each validated policy's run


def probe_contexts(max_context: int) -> tuple[int, ...]:
    """:data:`PROBE_CONTEXTS` within a model's context window."""
    return tuple(min(c, max(1, max_context // 2 - 1)) for c in PROBE_CONTEXTS)


def probe_times(backend, contexts: tuple[int, ...] = PROBE_CONTEXTS, seconds: float = PROBE_S) -> list[float]:
    """Forward times (s) of the probe, one decode step of ``len(contexts)`` sequences at these
    contexts, executed back to back for ``seconds`` (at least once). Its requests have ids no
    workload uses, so it may run between a validation's policies."""
    from simbatch.backends.torch_backend import PROBE_RID
    from simbatch.core.plan import StepPlan

    ids = [PROBE_RID + i for i in range(len(contexts))]
    plan = StepPlan(ids, [1] * len(ids), list(contexts))
    times, end = [], time.monotonic() + seconds
    try:
        while not times or time.monotonic() < end:
            for rid, ctx in zip(ids, contexts):
                backend.pool.pretend(rid, ctx)  # the same context every time: the step never changes
            backend.step_cost(plan)
            times.append(backend.steps.pop().forward_s)
    finally:
        for rid in ids:
            backend.pool.release(rid)
    return times


def speed_drift(backend, contexts: tuple[int, ...] = PROBE_CONTEXTS, seconds: float = 30.0,
                window_s: float = 2.0) -> np.ndarray:
    """The machine's speed over time: the probe (:func:`probe_times`) for ``seconds``, as the
    median forward time (s) of each ``window_s`` window, in order. With nothing else changing,
    their spread is the machine's (other processes, clocks, memory bandwidth shared with
    neighbours)."""
    medians, end = [], time.monotonic() + seconds
    while not medians or time.monotonic() < end:
        medians.append(float(np.median(probe_times(backend, contexts, window_s))))
    return np.asarray(medians)
