"""Fit a synthetic workload spec shaped like a recorded one.

The fit is deliberately simple and explainable: a rate (plus burstiness when
the trace is clearly burstier than Poisson) and a clipped lognormal per length
column. The result drops straight into a scenario as ``workload.synthetic``,
so a trace can be "scaled up" or re-sampled without shipping the file.
"""

from __future__ import annotations

import numpy as np

from simbatch.errors import SimbatchError
from simbatch.workload.request import Workload

# Inter-arrival CV below this is treated as Poisson. A real Poisson trace shows
# CV ~1 with some noise and drift (Azure conv: 1.09); 1.3 leaves room for that
# while still sending clearly bursty traces (Azure code: 13.2) to a gamma fit.
POISSON_MAX_CV = 1.3


def fit_synthetic(w: Workload) -> dict:
    """A ``synthetic:`` spec (``num_requests``, ``arrival``, ``prompt``, ``output``) fitted to ``w``."""
    if len(w) == 0:
        raise SimbatchError(w.source, "cannot fit an empty workload")
    if np.isnan(w.arrival_s).any():
        raise SimbatchError(w.source, "cannot fit arrivals: the workload has no arrival times")
    return {
        "num_requests": len(w),
        "arrival": fit_arrivals(w.arrival_s),
        "prompt": fit_lognormal(w.prompt_tokens),
        "output": fit_lognormal(w.output_tokens),
    }


def fit_arrivals(arrival_s: np.ndarray) -> dict:
    """``{kind: poisson, rate}`` or, for bursty gaps, ``{kind: gamma, rate, cv}``.

    ``rate`` is (n - 1) / span, the rate a replay of ``n`` requests over the
    same span has; a trace with every request at one instant fits ``burst``.
    """
    n = len(arrival_s)
    span = float(arrival_s[-1] - arrival_s[0]) if n else 0.0
    if n < 2 or span <= 0:
        return {"kind": "burst"}
    gaps = np.diff(arrival_s)
    rate = (n - 1) / span
    cv = float(np.std(gaps) / np.mean(gaps))
    if cv < POISSON_MAX_CV:
        return {"kind": "poisson", "rate": _round(rate)}
    return {"kind": "gamma", "rate": _round(rate), "cv": _round(cv)}


def fit_lognormal(tokens: np.ndarray) -> dict:
    """A lognormal by moments of log(tokens): median = geometric mean, sigma = std of logs.

    ``min``/``max`` clip samples to the observed range, so the fitted spec never
    invents a prompt longer than any the trace holds.
    """
    logs = np.log(tokens.astype(np.float64))
    return {
        "kind": "lognormal",
        "median": _round(float(np.exp(logs.mean()))),
        "sigma": _round(float(logs.std())),
        "min": int(tokens.min()),
        "max": int(tokens.max()),
    }


def _round(x: float) -> float:
    """Four significant digits: plenty for a spec a person will read and edit."""
    return float(f"{x:.4g}")
