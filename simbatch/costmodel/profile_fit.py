"""Building a :class:`ProfileCostModel` from a profile: every fit it needs, in one place.

:func:`fit_profile_model` is the one way from a profile (measured, Vidur's,
or derived what-if) to a cost model:

1. the operators' curves and attention models (:func:`simbatch.costmodel.fit.fit_profile`);
2. the roofline fallback's efficiencies re-targeted to the measured device
   (:func:`fallback_efficiencies`: the linear layers' two roofline
   efficiencies refitted to the measured linear curves, least squares on log
   time as ``calibration/fit_roofline_vidur.py`` does, and the attention
   efficiencies scaled by the same ratios);
3. the backend terms from whole measured steps (:func:`fit_backend_terms`),
   priced by the model assembled from 1 and 2.

For a mixture of experts the profile measures a dense model of its layers
(``profile_moe.measured_twin``: the same attention, an MLP of the routed experts'
width); 2 and 3 are fitted on that twin, which is what was measured, and the
mixture is then priced from the same curves (:mod:`simbatch.costmodel.profile_moe`).

The cost model's constructor does no fitting: it prices with what it is given.
"""

from __future__ import annotations

import math
from operator import mul

import numpy as np
import pandas as pd

from simbatch.catalog.hardware import GPUSpec, get_gpu
from simbatch.catalog.models import ModelSpec, get_model
from simbatch.catalog.parallelism import SLICED, ExpertLayout
from simbatch.core.plan import StepPlan
from simbatch.costmodel.fit import FittedProfile, _nnls, column, fit_profile
from simbatch.costmodel.profile import (
    BACKEND_FEATURES,
    GEMMS,
    LINEAR_OPS,
    ProfileCostModel,
    backend_features,
    canonical_plan,
    profile_origin,
)
from simbatch.costmodel.profile_moe import measured_twin
from simbatch.costmodel.model_terms import check_tensor_parallel
from simbatch.costmodel.roofline import RooflineCostModel
from simbatch.costmodel.roofline_params import DEFAULT_PARAMS
from simbatch.errors import SimbatchError

# A calibration plan whose fitted error exceeds both of these (relative; x the median error) is
# left out of the refit: on a shared CPU another process can stall a whole plan's repeats.
OUTLIER_FLOOR, OUTLIER_FACTOR = 0.3, 4.0
_SHAPES = ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "gated_mlp")
MOE = "a mixture of experts"  # the one special feature (ModelSpec.special_features) a profile prices


def unpriced_features(model: ModelSpec) -> list[str]:
    """What ``model`` has that a measured profile cannot price, in words (empty when it can):
    a profile measures 16-bit GEMMs and standard attention, so latent attention and quantised
    weights or KV caches are refused; a mixture of experts is priced from the measured MLP."""
    return [f for f in model.special_features if f != MOE]


def fit_profile_model(profile, model: ModelSpec | str | dict, gpu: GPUSpec | str | dict,
                      tensor_parallel: int = 1, *, path: str | None = None, where: str = "cost_model",
                      overhead: dict | None = None, layout: ExpertLayout = SLICED) -> ProfileCostModel:
    """The :class:`ProfileCostModel` of ``profile`` for ``model`` on ``gpu`` (module docstring);
    ``overhead``: a serving engine's per-step terms (simbatch.catalog.servers), which win over the
    profile's. A profile for other shapes, another TP degree, or without the GEMMs is a
    one-line error at ``where``."""
    model, gpu = get_model(model, "model"), get_gpu(gpu, "gpu")
    tensor_parallel = check_tensor_parallel(tensor_parallel, model, "tensor_parallel")
    unpriced = unpriced_features(model)
    if unpriced:
        raise SimbatchError(f"{where}.kind", f"a profile measures dense 16-bit models; {model.name} has "
                                             f"{' and '.join(unpriced)}: use kind roofline")
    source = profile_origin(profile.header)
    _check_matches(profile.header, model, tensor_parallel, where)
    try:
        fitted = fit_profile(profile)
    except ValueError as exc:
        raise SimbatchError(where, f"profile {source}: {exc}") from None
    missing = [op for op in GEMMS if op not in fitted.curves]
    if missing:
        raise SimbatchError(where, f"profile {source} lacks {', '.join(missing)}")
    twin = measured_twin(model)  # the model itself when dense
    efficiency = fallback_efficiencies(fitted, twin, gpu, tensor_parallel)
    options = {"source": source, "path": path, "overhead": overhead}
    try:  # fitted on the model the steps were measured on; a mixture takes its twin's terms
        terms = fit_backend_terms(ProfileCostModel(fitted, efficiency, twin, gpu, tensor_parallel, **options),
                                  profile)
    except ValueError as exc:
        raise SimbatchError(where, f"profile {source}: {exc}") from None
    return ProfileCostModel(fitted, efficiency, model, gpu, tensor_parallel, **options, backend_terms=terms,
                            layout=layout)


def fallback_efficiencies(fitted: FittedProfile, model: ModelSpec, gpu: GPUSpec, tp: int) -> dict[str, float]:
    """The roofline's efficiencies rescaled to the measured device (module docstring, 2)."""
    curves = fitted.curves
    knots = sorted({x for op in GEMMS for x in curves[op].xs})
    lo, hi = max(curves[op].xs[0] for op in GEMMS), min(curves[op].xs[-1] for op in GEMMS)
    tokens = [t for t in knots if lo <= t <= hi] or [lo]
    measured = [sum(curves[op](t) for op in LINEAR_OPS if op in curves) for t in tokens]
    compute, memory = _roofs(model, gpu, tp, tokens)
    ce, be = fit_efficiencies(compute, memory, np.array(measured))
    p = DEFAULT_PARAMS
    r_c, r_b = ce / p["compute_eff"], be / p["bw_eff"]
    scaled = {"compute_eff": ce, "bw_eff": be,
              "attn_compute_eff": p["attn_compute_eff"] * r_c, "attn_bw_eff": p["attn_bw_eff"] * r_b}
    # Capped at 1: a device measured faster than its datasheet allows gets the datasheet.
    return {k: float(min(1.0, max(v, 1e-9))) for k, v in scaled.items()}


def fit_backend_terms(cost: ProfileCostModel, profile) -> dict | None:
    """Backend terms from a measured profile's ``step_forward`` and ``step_host`` rows, or None
    without them (and for derived profiles: what-if rescaling moves operators, not whole steps).

    For each measured canonical plan, the operator model's forward price (every
    part but overhead, before these terms) is subtracted from the measured
    forward pass; the rest is fitted as non-negative coefficients of
    :data:`BACKEND_FEATURES` (least squares on the error relative to the
    measured step), then refitted once without the plans the first fit misses by
    more than ``max(OUTLIER_FLOOR, OUTLIER_FACTOR x its median error)`` (on a
    shared CPU another process can stall every repeat of a plan; the table
    still lists them). Host time is fitted on the same features directly. Returns
    ``{"forward": {...}, "host": {...}, "table": DataFrame}``; the table holds
    every calibration plan with its measured and predicted times (the fit's own
    check: ``simbatch calibrate --report`` prints its errors).
    """
    if profile.header.get("source", "measured") != "measured":
        return None  # a derived profile rescaled the operators, not these whole steps
    m = profile.measurements
    tp = int(profile.header.get("tensor_parallel") or 1)
    if "tensor_parallel" in m:
        m = m[m["tensor_parallel"].fillna(tp) == tp]
    fwd, host = m[m["op"] == "step_forward"], m[m["op"] == "step_host"]
    if fwd.empty:
        return None
    forward_terms = _fit_terms(cost, fwd, subtract_operators=True)
    host_terms = _fit_terms(cost, host, subtract_operators=False) if len(host) else \
        dict.fromkeys(BACKEND_FEATURES, 0.0)
    table = _plans_table(cost, fwd, forward_terms)
    return {"forward": forward_terms, "host": host_terms, "table": table}


def _plans(rows: pd.DataFrame) -> list[StepPlan]:
    t, s, c = column(rows, "num_tokens", 1), column(rows, "batch_size", 1), column(rows, "context_tokens", 0)
    return [canonical_plan(a, b, x) for a, b, x in zip(t, s, c)]


def _operator_forward(cost: ProfileCostModel, plan: StepPlan) -> float:
    """The operator model's forward price of ``plan`` (no backend terms, no overhead)."""
    c = cost.step_cost(plan)
    return c.seconds - c.breakdown["overhead"]


def _fit_terms(cost: ProfileCostModel, rows: pd.DataFrame, subtract_operators: bool) -> dict[str, float]:
    plans = _plans(rows)
    y = rows["median_s"].to_numpy(float)
    base = np.array([_operator_forward(cost, p) for p in plans]) if subtract_operators else np.zeros_like(y)
    X = np.array([backend_features(p) for p in plans])
    keep = np.ones(len(y), dtype=bool)
    for _ in range(2):  # fit, then refit without the plans a busy machine disturbed (docstring)
        try:
            coef = np.array(_nnls(X[keep] / y[keep, None], (y[keep] - base[keep]) / y[keep]))
        except ValueError:  # nothing positive to add: the operators already cover every plan
            coef = np.zeros(len(BACKEND_FEATURES))
        err = np.abs((base + X @ coef) / y - 1)
        limit = max(OUTLIER_FLOOR, OUTLIER_FACTOR * float(np.median(err)))
        if keep.sum() - (err > limit).sum() < len(BACKEND_FEATURES) or not (err[keep] > limit).any():
            break
        keep = err <= limit
    return dict(zip(BACKEND_FEATURES, map(float, coef)))


def _plans_table(cost: ProfileCostModel, rows: pd.DataFrame, terms: dict[str, float]) -> pd.DataFrame:
    plans = _plans(rows)
    ops = np.array([_operator_forward(cost, p) for p in plans])
    extra = np.array([sum(map(mul, terms.values(), backend_features(p))) for p in plans])
    measured = rows["median_s"].to_numpy(float)
    return pd.DataFrame({"num_tokens": rows["num_tokens"].to_numpy(int),
                         "batch_size": column(rows, "batch_size", 1).astype(int),
                         "context_tokens": column(rows, "context_tokens", 0).astype(int),
                         "measured_s": measured, "operators_s": ops, "predicted_s": ops + extra,
                         "operators_ape": np.abs(ops / measured - 1), "ape": np.abs((ops + extra) / measured - 1)})


def _roofs(model: ModelSpec, gpu: GPUSpec, tp: int, tokens: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """The roofline's per-layer linear compute and memory roofs (s, at efficiency 1).

    Pricing with one efficiency at 1 and the other tiny makes that roof win,
    isolating it (as ``calibration/fit_roofline_vidur.py`` does).
    """
    tiny, layers = 1e-9, model.num_layers
    out = []
    for ce, be in ((tiny, 1.0), (1.0, tiny)):
        roof = RooflineCostModel(model, gpu, tp, compute_eff=ce, bw_eff=be)
        out.append(np.array([roof.step_cost(StepPlan([0], [int(t)], [0])).breakdown["linear"]
                             for t in tokens]) * tiny / layers)
    return out[0], out[1]


def fit_efficiencies(compute: np.ndarray, memory: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """(compute_eff, bw_eff) minimising the squared log error of ``max(compute/ce, memory/be)``.

    A grid in log space, refined four times (efficiencies from 1e-6 to 10,
    so a CPU measured against a GPU's datasheet fits too). A roof that never
    binds at the fitted point cannot be identified: it then gets the other
    roof's ratio to the roofline's defaults.
    """
    log_m, p = np.log(measured), DEFAULT_PARAMS
    log_c, log_b = np.log(compute)[:, None, None], np.log(memory)[:, None, None]
    lo_c = lo_b = math.log(1e-6)
    hi_c = hi_b = math.log(10.0)
    for _ in range(4):
        c, b = np.meshgrid(np.linspace(lo_c, hi_c, 41), np.linspace(lo_b, hi_b, 41), indexing="ij")
        err = np.mean((np.maximum(log_c - c, log_b - b) - log_m[:, None, None]) ** 2, axis=0)
        i, j = np.unravel_index(np.argmin(err), err.shape)
        dc, db = c[1, 0] - c[0, 0], b[0, 1] - b[0, 0]
        lo_c, hi_c, lo_b, hi_b = c[i, j] - 2 * dc, c[i, j] + 2 * dc, b[i, j] - 2 * db, b[i, j] + 2 * db
    ce, be = math.exp(c[i, j]), math.exp(b[i, j])
    compute_binds = compute / ce >= memory / be
    if not compute_binds.any():
        ce = p["compute_eff"] * be / p["bw_eff"]
    elif compute_binds.all():
        be = p["bw_eff"] * ce / p["compute_eff"]
    return ce, be


def _check_matches(header: dict, model: ModelSpec, tp: int, where: str) -> None:
    """The profile was measured for this model's layer shapes (a mixture of experts: its
    attention, and an MLP of its routed experts' width) and this TP degree."""
    shapes = header.get("model") or {}
    twin = measured_twin(model)
    for key in _SHAPES:
        if key in shapes and shapes[key] != getattr(twin, key):
            if model.is_moe and key == "intermediate_size":
                raise SimbatchError(where, f"profile measured {shapes.get('name', 'a model')} with {key} "
                                           f"{shapes[key]}, but the scenario's {model.name} has routed experts "
                                           f"{model.moe_intermediate_size} wide (moe_intermediate_size): a profile "
                                           "prices the experts from a measured MLP of their width")
            raise SimbatchError(where, f"profile measured {shapes.get('name', 'a model')} with {key} "
                                       f"{shapes[key]}, but the scenario's {model.name} has {getattr(model, key)}")
    measured_tp = int(header.get("tensor_parallel") or 1)
    if measured_tp != tp:
        raise SimbatchError(where, f"profile measured at tensor_parallel {measured_tp}, but the scenario "
                                   f"uses {tp}")
