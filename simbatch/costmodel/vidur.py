"""Vidur's measured GPU operator timings as simbatch profiles, and the shipped knots.

Vidur (microsoft/vidur, MLSys 2024) profiled every non-attention operator of
Llama-style layers on real GPUs with PyTorch (float16, 2 warm-up and 20 timed
runs per point); ``*_mlp.csv`` holds, per (``num_tokens``, TP degree), each
op's milliseconds per layer per GPU. :func:`import_vidur` renames and sums them
into simbatch's operators (``docs/profiles.md``).

The package ships about 30 KB of those numbers (``data/vidur_knots.csv``:
each operator's monotone median curve at the token counts needed to follow it
within 10 %), not the 4 MB of CSVs; :func:`shipped_profile` turns them back into a
profile and :func:`write_knot_table` regenerates them from the CSVs.
"""

from __future__ import annotations

import functools
import math
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from simbatch.catalog.hardware import get_gpu
from simbatch.catalog.models import ModelSpec, get_model
from simbatch.catalog.profiles import Profile
from simbatch.costmodel.fit import pool_adjacent_violators
from simbatch.errors import SimbatchError
from simbatch.version import __version__

VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
CITATION = (f"Vidur (microsoft/vidur, MLSys 2024), data/profiling/ at commit {VIDUR_COMMIT[:7]}, "
            "MIT License, Copyright (c) Microsoft Corporation")
# simbatch operator -> the Vidur ops whose per-layer medians it sums.
OP_MAP = {
    "qkv_proj": ["attn_pre_proj"],
    "o_proj": ["attn_post_proj"],
    "mlp_up": ["mlp_up_proj"],
    "mlp_down": ["mlp_down_proj"],
    "misc_layer": ["input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add"],
    "misc_step": ["emb"],
}
DATA = Path(__file__).with_name("data") / "vidur_knots.csv"
# (gpu preset, model preset) -> the Vidur file the shipped knots come from, and
# the TP degrees shipped (70B needs >= 2 A100s, >= 4 A40s to hold its weights).
SHIPPED = {
    ("a100-80gb", "llama-2-7b"): ("a100/Llama-2-7b-hf_mlp.csv", (1, 2)),
    ("a100-80gb", "llama-3-8b"): ("a100/Meta-Llama-3-8B_mlp.csv", (1, 2)),
    ("a100-80gb", "llama-2-70b"): ("a100/Llama-2-70b-hf_mlp.csv", (2, 4, 8)),
    ("a40", "llama-2-7b"): ("a40/Llama-2-7b-hf_mlp.csv", (1, 2)),
    ("a40", "llama-2-70b"): ("a40/Llama-2-70b-hf_mlp.csv", (4, 8)),
}
_SHAPE = {"n_embd": "hidden_size", "n_head": "num_heads", "n_kv_head": "num_kv_heads",
          "n_expanded_embd": "intermediate_size"}


def import_vidur(csv_path: str | Path, model_preset: str, gpu: str, tp: int = 1) -> Profile:
    """A ``source: vidur`` profile from one Vidur ``*_mlp.csv`` at TP degree ``tp``.

    Checks the file's shapes against ``model_preset``; rows repeated for one
    token count (Vidur has two at 2048 and 4096) are reduced to their median.
    """
    path = Path(csv_path)
    model, gpu_spec = get_model(model_preset, "model"), get_gpu(gpu, "gpu")
    try:
        raw = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise SimbatchError(str(path), f"cannot read a Vidur CSV: {exc}") from None
    _check_columns(raw, model, str(path))
    rows = raw[raw["num_tensor_parallel_workers"] == tp]
    if rows.empty:
        have = sorted(int(t) for t in raw["num_tensor_parallel_workers"].unique())
        raise SimbatchError(str(path), f"no rows for tensor parallel {tp}; the file has {have}")
    cols = [f"time_stats.{o}.median" for ops in OP_MAP.values() for o in ops]
    medians = rows.groupby("num_tokens")[cols].median()
    frames = [_op_rows(op, sum(medians[f"time_stats.{o}.median"] for o in OP_MAP[op]), tp) for op in OP_MAP]
    origin = "/".join(path.parts[-2:])
    return Profile(_header(model, gpu_spec.name, tp, origin), pd.concat(frames, ignore_index=True))


def _check_columns(raw: pd.DataFrame, model: ModelSpec, where: str) -> None:
    """The file has Vidur's columns and ``model``'s shapes."""
    need = ["num_tokens", "num_tensor_parallel_workers", *_SHAPE,
            *(f"time_stats.{o}.median" for ops in OP_MAP.values() for o in ops)]
    missing = [c for c in need if c not in raw]
    if missing:
        raise SimbatchError(where, f"not a Vidur *_mlp.csv: missing column(s) {', '.join(missing[:3])}")
    for col, attr in _SHAPE.items():
        values = set(raw[col].unique())
        if values != {getattr(model, attr)}:
            raise SimbatchError(where, f"{col} is {sorted(int(v) for v in values)}, but {model.name} has "
                                       f"{attr} {getattr(model, attr)}")


def _op_rows(op: str, ms: pd.Series, tp: int) -> pd.DataFrame:
    """One simbatch operator's measurement rows (seconds) from its medians (ms) by token count."""
    n = len(ms)
    return pd.DataFrame({
        "op": op, "scope": "step" if op == "misc_step" else "layer",
        "num_tokens": ms.index.astype(int), "context_tokens": 0, "batch_size": 1, "context_spread": 1.0,
        "tensor_parallel": tp, "median_s": ms.to_numpy() / 1e3,
        # Vidur records min/mean/median/max/std, not percentiles (and a sum of
        # ops has none): left empty rather than invented.
        "p10_s": [math.nan] * n, "p90_s": [math.nan] * n, "repeats": 20,
    })


def _header(model: ModelSpec, gpu: str, tp: int, origin: str, notes: tuple[str, ...] = ()) -> dict:
    """The ``profile.yaml`` mapping of an imported (or shipped) Vidur profile."""
    return {
        "format": "simbatch-profile/1", "source": "vidur",
        "device": {"kind": "gpu", "name": gpu, "torch": None, "driver": None, "clocks": None},
        "dtype": "float16", "tensor_parallel": tp,
        "model": {k: getattr(model, k) for k in ("name", "num_layers", "hidden_size", "num_heads",
                                                 "num_kv_heads", "head_dim", "intermediate_size",
                                                 "vocab_size", "gated_mlp")},
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "simbatch": __version__, "quick": False,
        "timing": {"warmup": 2, "repeats": 20, "statistic": "median"},
        "origin": f"vidur:{origin}",
        "notes": [f"Imported from {origin} of {CITATION}.",
                  ("Ops: attn_pre_proj -> qkv_proj, attn_post_proj -> o_proj, mlp_up_proj -> mlp_up, "
                   "mlp_down_proj -> mlp_down, norms + RoPE + activation + residual add -> misc_layer, "
                   "emb -> misc_step; no attention, LM head, all-reduce or step overhead (Vidur's "
                   "attention profiles are not in the reference data)."),
                  *notes],
    }


def shipped_pairs() -> list[tuple[str, str, int]]:
    """(gpu, model, tensor parallel) of every shipped profile."""
    return [(g, m, tp) for (g, m), (_, tps) in SHIPPED.items() for tp in tps]


def describe_shipped() -> str:
    """One line listing the shipped profiles, for error messages."""
    by_pair = {}
    for g, m, tp in shipped_pairs():
        by_pair.setdefault((m, g), []).append(str(tp))
    return "; ".join(f"{m} on {g} (tensor_parallel {'/'.join(tps)})" for (m, g), tps in by_pair.items())


def shipped_profile(gpu: str, model: str | ModelSpec, tp: int) -> Profile | None:
    """The shipped Vidur knots for (gpu, model, tp) as a profile, or None if not shipped. A
    mixture of experts (a spec, or a preset's name) takes the shipped dense model whose layers
    it has: the same attention and an MLP of its routed experts' width (Mixtral-8x7B's are
    Llama-3-8B's; :mod:`simbatch.costmodel.profile_moe` prices the experts from that MLP)."""
    name = model if isinstance(model, str) else model.name
    if (gpu, name, tp) not in shipped_pairs():
        name = _shipped_twin(gpu, model, tp)
        if name is None:
            return None
    model = name
    table = _knot_table()
    rows = table[(table.gpu == gpu) & (table.model == model) & (table.tp == tp)]
    frames = [_op_rows(op, pd.Series(rows[op].to_numpy(), index=rows["num_tokens"].to_numpy()), tp)
              for op in OP_MAP]
    origin = SHIPPED[(gpu, model)][0]
    note = "Shipped knots (simbatch/costmodel/data/vidur_knots.csv), not every measured point."
    header = _header(get_model(model), gpu, tp, origin, (note,))
    return Profile(header, pd.concat(frames, ignore_index=True))


_TWIN_SHAPES = ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "gated_mlp")


def _shipped_twin(gpu: str, model: str | ModelSpec, tp: int) -> str | None:
    """The shipped dense model measured with ``model``'s layers when ``model`` is a mixture of
    experts (its attention shapes, and an MLP as wide as its routed experts), else None."""
    if isinstance(model, str):
        try:
            model = get_model(model)
        except SimbatchError:  # not a preset: nothing shipped can match by name
            return None
    if not model.is_moe:
        return None
    for g, name, t in shipped_pairs():
        dense = get_model(name)
        if (g == gpu and t == tp and dense.intermediate_size == model.moe_intermediate_size
                and all(getattr(dense, k) == getattr(model, k) for k in _TWIN_SHAPES)):
            return name
    return None


@functools.cache
def _knot_table() -> pd.DataFrame:
    """The shipped table, read once per process (callers only filter it)."""
    return pd.read_csv(DATA, comment="#")


def select_knots(xs: np.ndarray, curves: list[np.ndarray], tol: float) -> list[int]:
    """Indices of ``xs`` at which interpolating (in log tokens) every curve stays within
    ``tol`` relative error of all its points: greedy, worst point first. Keeps both
    ends and the start of the last doubling (where the extrapolation slope comes from)."""
    keep = {0, len(xs) - 1, int(np.searchsorted(xs, xs[-1] / 2))}
    logx = np.log(xs)
    while True:
        k = sorted(keep)
        errs = [np.abs(np.interp(logx, logx[k], ys[k]) / ys - 1) for ys in curves]
        worst = max(errs, key=lambda e: e.max())
        if worst.max() <= tol:
            return k
        keep.add(int(worst.argmax()))


def write_knot_table(reference: Path, out: Path = DATA, tol: float = 0.10) -> pd.DataFrame:
    """Regenerate ``data/vidur_knots.csv`` from Vidur's CSVs under ``reference`` (gpu_profiles/).

    Each shipped (gpu, model, tp): every op's median curve made monotone, kept at
    the token counts :func:`select_knots` picks for all ops and their sum at once.
    """
    out_rows = []
    for (gpu, model), (name, tps) in SHIPPED.items():
        for tp in tps:
            m = import_vidur(reference / name, model, gpu, tp).measurements
            xs = np.sort(m["num_tokens"].unique()).astype(float)
            ms = {op: np.array(pool_adjacent_violators(
                list(m[m.op == op].sort_values("num_tokens")["median_s"] * 1e3))) for op in OP_MAP}
            lin = sum(ms[op] for op in OP_MAP if op != "misc_step")
            for i in select_knots(xs, [*ms.values(), lin], tol):
                out_rows.append({"gpu": gpu, "model": model, "tp": tp, "num_tokens": int(xs[i]),
                                 **{op: float(f"{ms[op][i]:.4g}") for op in OP_MAP}})
    table = pd.DataFrame(out_rows)
    head = (f"# Per-layer medians in ms (misc_step: per step) at selected token counts, from {CITATION}.\n"
            f"# Made monotone; kept where interpolating stays within {tol:.0%} of that curve at every measured "
            "count. Regenerate: python -m simbatch.costmodel.vidur ../shared/reference\n")
    out.write_text(head + table.to_csv(index=False))
    return table


if __name__ == "__main__":
    write_knot_table(Path(sys.argv[1]) / "gpu_profiles")
