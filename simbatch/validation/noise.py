"""The measurement's noise floor: the same step plans executed again (issue 16, item 2).

A validation's step error compares one wall-clock measurement of a step with
the cost model's price of its plan. On a shared machine that one measurement
moves from run to run (step times were seen to move 30-60 % under load), so
an error is only meaningful beside how far a single measurement strays from
the step's typical time. After the real-time run, :func:`noise_floor`
executes a sample of the recorded plans again, ``repeats`` times each, on the
same backend (:meth:`TorchBackend.replay`): up to ``per_kind`` plans of each
step kind, evenly spaced through the run. For each plan, the original
measurement and its repeats are the samples; each sample's *noise APE* is
``|t / median(t) - 1|``, the error a model that priced every plan exactly at
its typical time would still show on single measurements. The compared time
is the backend's own (prepare + forward + bookkeeping), the part a replay can
repeat; the engine's scheduling time between steps is left out of both.

Replays measure the spread of back-to-back executions; they do not see the
machine's speed moving over seconds, which on a shared machine is the larger
part. :func:`simbatch.calibrate.probe.speed_drift` measures that on its own:
one fixed plan executed for a while, its median time in each window
(``benchmarks/bench_validate.py`` prints it before the targets, which it
cannot be told apart from); :func:`probe_ms` times the same plan before and
after each policy's run, for ``machine_speed``.

``validation.json`` gets ``noise_ape {median, p90, steps}`` per policy (and
per step kind), and ``step_ape_over_noise``: the median step error over the
median noise APE. A ratio near 1 or below means the step errors are what the
machine's noise alone gives; the targets ask for at most 2
(``benchmarks/bench_validate.py``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simbatch.validation.compare import KINDS, ape_stats, step_kind

REPEATS, PER_KIND = 5, 8
COLUMNS = ["step", "kind", "sample", "seconds", "noise_ape"]


def sample_steps(records, per_kind: int = PER_KIND) -> list[int]:
    """Indices of up to ``per_kind`` records of each step kind, evenly spaced through the run."""
    by_kind: dict[str, list[int]] = {}
    for i, rec in enumerate(records):
        by_kind.setdefault(step_kind(rec.plan), []).append(i)
    chosen = []
    for kind in KINDS:
        steps = by_kind.get(kind, [])
        if len(steps) > per_kind:
            steps = [steps[j] for j in np.linspace(0, len(steps) - 1, per_kind).round().astype(int)]
        chosen.extend(steps)
    return sorted(chosen)


def noise_floor(backend, records, repeats: int = REPEATS, per_kind: int = PER_KIND) -> pd.DataFrame:
    """One row per sample (the original measurement is sample 0) of each sampled step."""
    rows = []
    for i in sample_steps(records, per_kind) if repeats > 0 else []:
        rec = records[i]
        try:
            times = [_backend_time(rec)] + [_backend_time(backend.replay(rec.plan)) for _ in range(repeats)]
        except RuntimeError:  # the KV pool cannot hold this plan's stand-ins: leave it out (see "steps")
            continue
        typical = float(np.median(times))
        kind = step_kind(rec.plan)
        rows += [{"step": i, "kind": kind, "sample": j, "seconds": t,
                  "noise_ape": abs(t / typical - 1.0) if typical > 0 else np.nan}
                 for j, t in enumerate(times)]
    return pd.DataFrame(rows, columns=COLUMNS)


def noise_stats(samples: pd.DataFrame) -> dict:
    """``{median, p90, steps}`` of the noise APEs, then the same per step kind (``steps``: plans)."""
    out = _stats(samples)
    for kind in KINDS:
        out[kind] = _stats(samples[samples["kind"] == kind])
    return out


def _stats(samples: pd.DataFrame) -> dict:
    out = ape_stats(samples["noise_ape"])
    out["steps"] = int(samples["step"].nunique())
    return out


def over_noise(step_ape: dict, noise: dict) -> float | None:
    """The median step error over the median noise APE (None where either is missing or zero)."""
    if not step_ape.get("median") or not noise.get("median"):
        return None
    return step_ape["median"] / noise["median"]


def _backend_time(record) -> float:
    return record.prepare_s + record.forward_s + record.post_s


def backend_probe(backend) -> tuple[int, ...] | None:
    """The probe's contexts on ``backend`` (:func:`simbatch.calibrate.probe.probe_contexts` of its
    model), or None when its KV pool, sized for a scenario, cannot hold them."""
    from simbatch.calibrate.probe import probe_contexts

    contexts = probe_contexts(backend.spec.max_context)
    need = sum(-(-(c + 1) // backend.pool.block_size) for c in contexts)
    return contexts if need <= backend.pool.num_free else None


def probe_ms(backend, seconds: float | None = None) -> float | None:
    """The probe's median forward time (ms) over ``seconds``: the machine's speed now, for
    comparing with the same figure at calibration (``validation.json``'s ``machine_speed``);
    None when the backend's pool cannot hold it (:func:`backend_probe`)."""
    from simbatch.calibrate.probe import PROBE_S, probe_times

    contexts = backend_probe(backend)
    if contexts is None:
        return None
    return float(np.median(probe_times(backend, contexts, PROBE_S if seconds is None else seconds))) * 1e3


def machine_speed(calibration_ms: float | None, before_ms: float | None, after_ms: float | None) -> dict:
    """``validation.json``'s ``machine_speed`` of one policy: the probe before and after its run,
    and each over the probe at calibration (None where a side was not measured: a profile from
    before the probe, or a KV pool too small for it)."""
    ratio = (lambda ms: None if not calibration_ms or ms is None else ms / calibration_ms)
    return {"probe_ms_calibration": calibration_ms, "probe_ms_before": before_ms, "probe_ms_after": after_ms,
            "before_over_calibration": ratio(before_ms), "after_over_calibration": ratio(after_ms)}
