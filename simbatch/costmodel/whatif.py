"""What-if hardware: a profile measured on one GPU, rescaled to another.

Each measured point is split with the roofline of the source GPU: it needs
``t_c = FLOPs / (peak x eff)`` and ``t_m = bytes / (bandwidth x eff)`` (the
roofline's default efficiencies). Time measured beyond ``max(t_c, t_m)`` is
taken as fixed latency (kernel launch and synchronisation, which is what
small elementwise kernels mostly are) and kept; the rest is split into
a compute-bound share ``s`` and a memory-bound share ``1 - s`` and scaled by
the peak FLOP/s and memory bandwidth ratios. So a point keeps the efficiency
it was measured at, and only the datasheet figures change:

    t_new = fixed + (t_measured - fixed) x (s x peak_from / peak_to + (1 - s) x bw_from / bw_to),
    s = t_c^4 / (t_c^4 + t_m^4)     (a smooth version of "whichever roof binds")

All-reduce points scale with the GPU link bandwidth and the step overhead
(CPU time) is kept. How far to trust it: ``docs/cost_models.md`` (A100 -> A40
on Llama-2-7B and -70B, against Vidur's A40 measurements).
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd

from simbatch.catalog.hardware import GPUSpec, get_gpu
from simbatch.catalog.models import MODEL_PRESETS, ModelSpec
from simbatch.catalog.profiles import Profile
from simbatch.costmodel.fit import attn_features, column
from simbatch.costmodel.profile import profile_origin
from simbatch.costmodel.roofline_params import DEFAULT_PARAMS

# How sharply the compute share turns from 0 to 1 around the ridge point. The
# roofline's time is max(t_c, t_m): only the binding resource counts, which is
# SHARPNESS -> infinity (a step at the ridge); 1 is a plain proportional split,
# which wrongly lets bandwidth slow down compute-bound GEMMs. 4 is a smooth max.
# Chosen by comparing 1, 2, 4 and infinity on Vidur's A100 -> A40 data (the
# what-if check in docs/cost_models.md): 4 and infinity did best, 1 worst.
SHARPNESS = 4
_SHAPE_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                 "intermediate_size", "vocab_size", "gated_mlp")
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def header_model(header: dict) -> ModelSpec:
    """The model shapes a profile's header records (dtype from its ``dtype``)."""
    m = dict(header.get("model") or {})
    missing = [k for k in _SHAPE_FIELDS if k not in m]
    if missing:
        raise ValueError(f"profile.yaml model lacks {', '.join(missing)}")
    preset = MODEL_PRESETS.get(str(m.get("name", "")).lower())
    max_ctx = preset.max_context if preset else 1 << 20
    return ModelSpec(str(m.get("name", "profile-model")), *(m[k] for k in _SHAPE_FIELDS[:-1]),
                     bool(m["gated_mlp"]), max_ctx, _DTYPE_BYTES.get(str(header.get("dtype")), 2))


def op_work(op: str, model: ModelSpec, tp: int, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, HBM bytes) per GPU of each measurement row of ``op`` (one layer, or one
    step for step-scoped ops), counted as the roofline counts them."""
    h, dt = model.hidden_size, model.dtype_bytes
    q, kv = model.q_size // tp, max(1, model.num_kv_heads // tp) * model.head_dim
    up = (2 if model.gated_mlp else 1) * model.intermediate_size // tp
    inter, vocab = model.intermediate_size // tp, model.vocab_size / tp
    gemms = {"qkv_proj": (h, q + 2 * kv), "o_proj": (q, h), "mlp_up": (h, up),
             "mlp_down": (inter, h), "lm_head": (h, vocab)}
    t = rows["num_tokens"].to_numpy(float)
    if op in gemms:  # weights once, activations in and out per token; tiles on the compute side
        k, n = gemms[op]
        tile = DEFAULT_PARAMS["gemm_tile_tokens"]
        return 2.0 * np.ceil(t / tile) * tile * k * n, dt * (k * n + t * (k + n))
    if op == "attn_prefill":  # b sequences of t queries: QK^T and PV over every pair
        pairs, kv_tokens = attn_features(op, rows)
        queries = column(rows, "num_tokens", 0) * column(rows, "batch_size", 1)
        return 4.0 * q * pairs, dt * (kv_tokens * 2 * kv + queries * 2 * q)
    if op == "attn_decode":  # one query per sequence over its context and itself
        b, context = attn_features(op, rows)
        return 4.0 * q * (context + b), dt * ((context + b) * 2 * kv + b * 2 * q)
    if op == "misc_layer":  # two norms, RoPE, activation, residual add: elementwise
        return 10.0 * t * h, dt * t * (7 * h + 2 * (q + kv) + up + inter)
    if op == "misc_step":  # embedding gather
        return 0 * t, dt * t * 2 * h
    return 0 * t, 0 * t


def roofline_times(op: str, model: ModelSpec, tp: int, rows: pd.DataFrame,
                   gpu: GPUSpec) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the roofline's FLOP-limited and byte-limited seconds on ``gpu``
    (the roofline's default efficiencies: linear ones, or attention ones)."""
    flops, nbytes = op_work(op, model, tp, rows)
    p = DEFAULT_PARAMS
    attn = op.startswith("attn")
    t_c = flops / (gpu.peak_flops * p["attn_compute_eff" if attn else "compute_eff"])
    t_m = nbytes / (gpu.hbm_bandwidth * p["attn_bw_eff" if attn else "bw_eff"])
    return t_c, t_m


def scaled_times(op: str, model: ModelSpec, tp: int, rows: pd.DataFrame,
                 src: GPUSpec, dst: GPUSpec) -> np.ndarray:
    """Each row's ``median_s`` moved from ``src`` to ``dst`` (module docstring)."""
    measured = rows["median_s"].to_numpy(float)
    if op == "step_overhead":
        return measured
    if op == "allreduce":
        return measured * src.link_bandwidth / dst.link_bandwidth
    t_c, t_m = roofline_times(op, model, tp, rows, src)
    c, m = t_c ** SHARPNESS, t_m ** SHARPNESS
    share_c = np.divide(c, c + m, out=np.zeros_like(c), where=(c + m) > 0)
    fixed = np.maximum(0.0, measured - np.maximum(t_c, t_m))  # launch latency: does not scale
    ratio = share_c * src.peak_flops / dst.peak_flops + (1 - share_c) * src.hbm_bandwidth / dst.hbm_bandwidth
    return fixed + (measured - fixed) * ratio


def derive_profile(profile: Profile, from_gpu: GPUSpec | str, to_gpu: GPUSpec | str) -> Profile:
    """``profile`` (measured on ``from_gpu``) rescaled to ``to_gpu`` (module docstring)."""
    src, dst = get_gpu(from_gpu, "gpu"), get_gpu(to_gpu, "target")
    model = header_model(profile.header)
    tp = int(profile.header.get("tensor_parallel") or 1)
    m = profile.measurements.copy()
    factor = np.ones(len(m))
    for op, rows in m.groupby("op", sort=False):
        idx = m.index.get_indexer(rows.index)
        old = rows["median_s"].to_numpy(float)
        factor[idx] = np.divide(scaled_times(op, model, tp, rows, src, dst), old,
                                out=np.ones_like(old), where=old > 0)
    for col in ("median_s", "p10_s", "p90_s"):  # percentiles move with their median
        if col in m:
            m[col] = m[col].to_numpy(float) * factor
    return Profile(_derived_header(profile.header, src, dst), m)


def _derived_header(header: dict, src: GPUSpec, dst: GPUSpec) -> dict:
    """The source header, re-labelled as derived from ``src`` for ``dst``."""
    out = copy.deepcopy(header)
    origin = profile_origin(header)
    out["source"] = "derived"
    out["device"] = {"kind": "gpu", "name": dst.name, "torch": None, "driver": None, "clocks": None}
    out["origin"] = f"derived:{origin} -> {dst.name}"
    out["notes"] = [*(header.get("notes") or []),
                    (f"Derived from {origin} (measured on {src.name}) for {dst.name} by what-if scaling: "
                     "each point's compute-bound share scaled by the peak FLOP/s ratio, the rest by the "
                     "memory bandwidth ratio, launch latency kept (simbatch.costmodel.whatif).")]
    return out
