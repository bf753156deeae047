"""The ``profile`` cost model: a step priced from measured operator timings.

Each part of a step comes from the profile's fitted operators
(:mod:`simbatch.costmodel.fit`): ``linear`` is the QKV, O, MLP-up, MLP-down and
per-layer misc curves at the step's tokens times the layers; ``misc`` the
once-per-step ops (embedding); attention the fitted prefill / decode models
over the step's summed pairs, KV tokens, batch and context. A part the profile
did not measure (Vidur: attention, LM head; one GPU: all-reduce) falls back to
the roofline, re-targeted to this device: the linear layers' two roofline
efficiencies are refitted to the measured linear curves (least squares on log
time, as ``calibration/fit_roofline_vidur.py`` does), and the attention
efficiencies are scaled by the same ratios to the roofline's defaults. On the
A100 data the roofline was fitted to, the ratios are 1.00 and the fallback is
the roofline itself; on a slower or faster device it moves with the device.

A measured profile may also hold whole steps timed on the torch backend
(``step_forward``, ``step_host``: docs/profiles.md). From those,
:func:`fit_backend_terms` fits what the operators miss, as terms linear in the
step's work: forward-pass time the operator sum does not explain (cache-cold
weights, the paged-KV gather, glue operators), added to ``misc``, and the
backend's host time per step (building the step's index tensors), added to
``overhead``. Profiles without those rows price exactly as before.

Lookups are cached per token count and attention is three multiply-adds, so
:meth:`ProfileCostModel.step_cost` stays a few microseconds (it runs once per
simulated step).
"""

from __future__ import annotations

import math
from operator import mul

import numpy as np
import pandas as pd

from simbatch.costmodel.base import StepCost
from simbatch.costmodel.fit import _nnls, column, fit_profile
from simbatch.costmodel.roofline import (
    DEFAULT_PARAMS,
    PricedByWork,
    RooflineCostModel,
    check_tensor_parallel,
    plan_work,
)
from simbatch.errors import SimbatchError
from simbatch.hardware import GPUSpec, get_gpu
from simbatch.models import ModelSpec, get_model
from simbatch.plan import StepPlan

# The roofline's private helpers (_work, _zero_padding_slots, and its _counts and
# _attn_seconds methods) are reused on purpose: its counting of tokens, pairs,
# KV reads, FLOPs and bytes stays the one definition.
GEMMS = ("qkv_proj", "o_proj", "mlp_up", "mlp_down")
LINEAR_OPS = (*GEMMS, "misc_layer")
OVERHEAD_PARAMS = ("step_overhead_s", "per_seq_overhead_s", "per_token_overhead_s")
# Features of the backend terms, per step (see backend_features).
BACKEND_FEATURES = ("step", "slots", "tokens", "decode_kv_tokens", "prefill_context_tokens")
STEP_OPS = ("step_forward", "step_host")
# A calibration plan whose fitted error exceeds both of these (relative; x the median error) is
# left out of the refit: on a shared CPU another process can stall a whole plan's repeats.
OUTLIER_FLOOR, OUTLIER_FACTOR = 0.3, 4.0
_SHAPES = ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "gated_mlp")


def profile_origin(header: dict) -> str:
    """Where a profile's numbers come from: ``measured:<device>``, ``vidur:<file>`` or
    ``derived:<from> -> <gpu>`` (the header's ``origin`` when it has one)."""
    if header.get("origin"):
        return str(header["origin"])
    device = (header.get("device") or {}).get("name", "unknown device")
    return f"{header.get('source', 'measured')}:{device}"


class ProfileCostModel(PricedByWork):
    """Prices a :class:`StepPlan` from a profile's fitted operators (module docstring)."""

    name = "profile"

    def __init__(self, profile, model: ModelSpec | str | dict, gpu: GPUSpec | str | dict,
                 tensor_parallel: int = 1, *, path: str | None = None, where: str = "cost_model",
                 overhead: dict | None = None):
        self.model = get_model(model, "model")
        self.gpu = get_gpu(gpu, "gpu")
        self.tensor_parallel = check_tensor_parallel(tensor_parallel, self.model, "tensor_parallel")
        self.source, self.path = profile_origin(profile.header), path
        _check_matches(profile.header, self.model, self.tensor_parallel, where)
        try:
            self.fitted = fit_profile(profile)
        except ValueError as exc:
            raise SimbatchError(where, f"profile {self.source}: {exc}") from None
        missing = [op for op in GEMMS if op not in self.fitted.curves]
        if missing:
            raise SimbatchError(where, f"profile {self.source} lacks {', '.join(missing)}")
        self.fallback_efficiency = self._fallback_efficiencies()
        engine = overhead  # a serving engine's overhead (simbatch.engines) wins over the profile's
        overhead = {k: DEFAULT_PARAMS[k] for k in OVERHEAD_PARAMS}
        overhead.update(self.fitted.overhead or {})
        overhead.update(engine or {})
        self._overhead = overhead
        self._roof = RooflineCostModel(self.model, self.gpu, self.tensor_parallel,
                                       **self.fallback_efficiency, **overhead)
        self._forward_terms = self._host_terms = None
        self._precompute()
        try:
            self.backend_terms = fit_backend_terms(self, profile)
        except ValueError as exc:
            raise SimbatchError(where, f"profile {self.source}: {exc}") from None
        if self.backend_terms:
            self._forward_terms = tuple(self.backend_terms["forward"].values())
            self._host_terms = tuple(self.backend_terms["host"].values())
            self._by_tokens.clear()

    def describe(self) -> dict:
        """Kind, source, path, what was measured and what falls back to the roofline."""
        fitted = self.fitted
        measured = sorted([*fitted.curves, *fitted.attn] + (["step_overhead"] if fitted.overhead else [])
                          + (list(STEP_OPS) if self.backend_terms else []))
        out = {"kind": "profile", "source": self.source, "path": self.path, "model": self.model.name,
               "gpu": self.gpu.name, "tensor_parallel": self.tensor_parallel, "measured": measured,
               "roofline_fallback": self._fallback_parts(),
               "fallback_efficiency": {k: round(v, 4) for k, v in self.fallback_efficiency.items()},
               **self._overhead}
        if self.backend_terms:
            out["backend_terms"] = {part: {k: float(f"{v:.4g}") for k, v in terms.items()}
                                    for part, terms in self.backend_terms.items()
                                    if part in ("forward", "host")}
        return out

    def _fallback_parts(self) -> list[str]:
        f = self.fitted
        parts = [p for p in ("lm_head", "attn_prefill", "attn_decode") if p not in f.curves and p not in f.attn]
        if self.tensor_parallel > 1 and "allreduce" not in f.curves:
            parts.append("allreduce")
        return parts + ([] if f.overhead else ["overhead"])

    def _fallback_efficiencies(self) -> dict[str, float]:
        """The roofline's efficiencies rescaled to this device (module docstring)."""
        curves = self.fitted.curves
        knots = sorted({x for op in GEMMS for x in curves[op].xs})
        lo, hi = max(curves[op].xs[0] for op in GEMMS), min(curves[op].xs[-1] for op in GEMMS)
        tokens = [t for t in knots if lo <= t <= hi] or [lo]
        measured = [sum(curves[op](t) for op in LINEAR_OPS if op in curves) for t in tokens]
        compute, memory = _roofs(self.model, self.gpu, self.tensor_parallel, tokens)
        ce, be = fit_efficiencies(compute, memory, np.array(measured))
        p = DEFAULT_PARAMS
        r_c, r_b = ce / p["compute_eff"], be / p["bw_eff"]
        scaled = {"compute_eff": ce, "bw_eff": be,
                  "attn_compute_eff": p["attn_compute_eff"] * r_c, "attn_bw_eff": p["attn_bw_eff"] * r_b}
        # Capped at 1: a device measured faster than its datasheet allows gets the datasheet.
        return {k: float(min(1.0, max(v, 1e-9))) for k, v in scaled.items()}

    def _precompute(self) -> None:
        """Per-step multipliers and attention coefficients (scaled to all layers)."""
        f, layers = self.fitted, self.model.num_layers
        per = {op: layers if f.scopes.get(op, "layer") == "layer" else 1 for op in f.curves}
        self._lin_ops = [(f.curves[op], per[op]) for op in LINEAR_OPS if op in f.curves]
        self._misc = (f.curves["misc_step"], per["misc_step"]) if "misc_step" in f.curves else None
        self._lm = (f.curves["lm_head"], per["lm_head"]) if "lm_head" in f.curves else None
        # Two all-reduces per layer (after O and after the MLP down projection).
        self._ar = (f.curves["allreduce"], 2 * per["allreduce"]) if "allreduce" in f.curves else None
        self._pre = _all_layers(f.attn.get("attn_prefill"), layers)
        self._dec = _all_layers(f.attn.get("attn_decode"), layers)
        # Memo tables: a run prices the same few thousand token counts over and over.
        self._by_tokens: dict[int, tuple[float, float, float]] = {}
        self._by_rows: dict[int, float] = {}

    def price(self, work: tuple, kept: tuple, live: int) -> StepCost:
        """The step's cost from its summed work (``roofline.plan_work``); ``live``: non-padding slots."""
        tokens, rows, dec, pre = work
        lin = self._by_tokens.get(tokens)
        if lin is None:
            lin = self._by_tokens[tokens] = self._token_parts(tokens)
        lm = self._by_rows.get(rows)
        if lm is None:
            lm = self._by_rows[rows] = self._lm_head(rows)
        misc = lin[2]
        if self._forward_terms is not None and tokens:
            misc += sum(map(mul, self._forward_terms, (1.0, rows, tokens, dec[1], pre[1] - pre[2])))
        bd = {
            "linear": lin[0],
            "lm_head": lm,
            "attn_prefill": self._attn(self._pre, pre, True),
            "attn_decode": self._attn(self._dec, dec, False),
            "allreduce": lin[1],
            "overhead": self.overhead(work, live),
            "misc": misc,
        }
        flops, nbytes = self._roof._counts(kept)
        return StepCost(sum(bd.values()), bd, flops, nbytes)

    def overhead(self, work: tuple, live: int) -> float:
        """The engine's overheads, plus the host time the fitted step terms measured."""
        tokens, rows, dec, pre = work
        over, host = self._overhead, 0.0
        if self._forward_terms is not None and tokens:
            host = sum(map(mul, self._host_terms, (1.0, rows, tokens, dec[1], pre[1] - pre[2])))
        return (over["step_overhead_s"] + over["per_seq_overhead_s"] * live
                + over["per_token_overhead_s"] * tokens + host)

    def bounds(self, work: tuple) -> tuple[float, float]:
        """(compute-bound, memory-bound) seconds for two-stream overlap: the measured kernel
        time of ``work``, split by the roofline's ratio of compute to memory time (the
        roofline says which resource binds and by how much; the measurement says how long)."""
        cost = self.price(work, work, 0)
        kernels = cost.seconds - cost.breakdown["allreduce"] - cost.breakdown["overhead"]
        c, m = self._roof.bounds(work)
        top = max(c, m)
        return (kernels * c / top, kernels * m / top) if top > 0 else (0.0, 0.0)

    def _token_parts(self, tokens: int) -> tuple[float, float, float]:
        """(linear, all-reduce, misc) seconds of a step computing ``tokens`` rows."""
        if not tokens:
            return 0.0, 0.0, 0.0
        lin = sum(curve(tokens) * n for curve, n in self._lin_ops)
        misc = self._misc[0](tokens) * self._misc[1] if self._misc else 0.0
        if self.tensor_parallel == 1:
            ar = 0.0
        elif self._ar:
            ar = self._ar[0](tokens) * self._ar[1]
        else:
            ar = self._roof.step_cost(StepPlan([0], [tokens], [0])).breakdown["allreduce"]
        return lin, ar, misc

    def _lm_head(self, rows: int) -> float:
        """LM head seconds for ``rows`` logit rows (fitted, else the scaled roofline)."""
        if not rows:
            return 0.0
        if self._lm:
            return self._lm[0](rows) * self._lm[1]
        return self._roof.step_cost(StepPlan(list(range(rows)), [1] * rows, [0] * rows)).breakdown["lm_head"]

    def _attn(self, coefs: list[float] | None, sums: tuple, prefill: bool) -> float:
        """Fitted attention over one kernel's summed work, else the scaled roofline's.

        The fitted intercept is paid once per step and kernel (one varlen call
        for all slots), the slopes on the summed pairs and KV tokens (prefill)
        or the batch and its total context (decode).
        """
        pairs, kv_tokens, queries = sums
        if not queries:
            return 0.0
        if not coefs:
            return self._roof._attn_seconds(sums)
        a, b, c = coefs
        if prefill:
            return a + b * pairs + c * kv_tokens
        return a + b * queries + c * (kv_tokens - queries)


def canonical_plan(tokens: int, seqs: int, context: int) -> StepPlan:
    """The step a ``step_forward`` / ``step_host`` row measured (docs/profiles.md): ``seqs``
    sequences with ``context`` cached tokens each computing ``tokens`` rows in all; all
    decodes when ``tokens == seqs``, else ``seqs - 1`` decodes and one prefill chunk of the
    remaining rows (a whole prompt when ``context`` is 0). Request ids are ``0 .. seqs - 1``."""
    tokens, seqs, context = int(tokens), int(seqs), int(context)
    if seqs < 1 or tokens < seqs:
        raise ValueError(f"a step plan needs 1 <= sequences <= rows, got {seqs} and {tokens}")
    if tokens == seqs:
        return StepPlan(list(range(seqs)), [1] * seqs, [context] * seqs, num_decode_slots=seqs)
    d = seqs - 1
    return StepPlan(list(range(seqs)), [1] * d + [tokens - d], [context] * seqs, num_decode_slots=d)


def backend_features(plan: StepPlan) -> tuple[float, ...]:
    """:data:`BACKEND_FEATURES` of a plan, as :meth:`ProfileCostModel.price` computes them."""
    (tokens, rows, dec, pre), _, _ = plan_work(plan)
    return (1.0, float(rows), float(tokens), float(dec[1]), float(pre[1] - pre[2]))


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


def _all_layers(fit, layers: int) -> list[float] | None:
    """An attention fit's (a, b, c) for all layers, or None when not measured."""
    return None if fit is None else [layers * fit.a, layers * fit.b, layers * fit.c]


def _check_matches(header: dict, model: ModelSpec, tp: int, where: str) -> None:
    """The profile was measured for this model's layer shapes and this TP degree."""
    shapes = header.get("model") or {}
    for key in _SHAPES:
        if key in shapes and shapes[key] != getattr(model, key):
            raise SimbatchError(where, f"profile measured {shapes.get('name', 'a model')} with {key} "
                                       f"{shapes[key]}, but the scenario's {model.name} has {getattr(model, key)}")
    measured_tp = int(header.get("tensor_parallel") or 1)
    if measured_tp != tp:
        raise SimbatchError(where, f"profile measured at tensor_parallel {measured_tp}, but the scenario "
                                   f"uses {tp}")
