"""Fitted per-operator time models: what the ``profile`` cost model evaluates.

A profile (``docs/profiles.md``) measures each operator at a few shapes; the
simulator needs its time at every shape, once per simulated step. So:

- an operator whose time depends on tokens only (the GEMMs, norms, LM head,
  all-reduce) becomes a :class:`TokenCurve`: the medians, made monotone
  non-decreasing (pool adjacent violators), joined piecewise-linearly in
  log(tokens). Outside the measured range it takes the roofline's shape: flat
  below the smallest point (the memory-bound floor: reading the weights costs
  the same for 1 token as for 2) and linear above the largest (compute-bound:
  time grows with FLOPs), with the slope of a least-squares line through the
  points of the last doubling of tokens;
- prefill attention becomes ``a + b*pairs + c*kv_tokens`` and decode attention
  ``a + b*batch + c*context_tokens`` (an :class:`AttnFit`), fitted by
  non-negative least squares on relative error, so both are positive and
  monotone in every input by construction.

:func:`fit_report` scores every fit by leave-one-out cross-validation.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd

TOKEN_OPS = ("qkv_proj", "o_proj", "mlp_up", "mlp_down", "misc_layer", "misc_step", "lm_head", "allreduce")
ATTN_OPS = ("attn_prefill", "attn_decode")
ATTN_FEATURES = {"attn_prefill": ("pairs", "kv_tokens"), "attn_decode": ("batch", "context_tokens")}
REPORT_COLUMNS = ["op", "scope", "points", "fit", "median_ape_pct", "worst_ape_pct", "worst_at"]


class TokenCurve:
    """Seconds at ``tokens``: monotone piecewise-linear in log(tokens) through the knots,
    flat below the first knot, linear in tokens above the last (see the module docstring)."""

    __slots__ = ("xs", "ys", "tail_slope", "_logx", "_slopes")

    def __init__(self, xs: list[float], ys: list[float], tail_slope: float):
        self.xs, self.ys, self.tail_slope = list(xs), list(ys), float(tail_slope)
        self._logx = [math.log(x) for x in self.xs]
        self._slopes = [(y1 - y0) / (l1 - l0) for y0, y1, l0, l1
                        in zip(self.ys, self.ys[1:], self._logx, self._logx[1:])]

    def __call__(self, tokens: float) -> float:
        xs = self.xs
        if tokens <= xs[0]:
            return self.ys[0]
        if tokens >= xs[-1]:
            return self.ys[-1] + self.tail_slope * (tokens - xs[-1])
        i = bisect_right(xs, tokens) - 1
        return self.ys[i] + self._slopes[i] * (math.log(tokens) - self._logx[i])


@dataclass(frozen=True, slots=True)
class AttnFit:
    """``a + b*x1 + c*x2`` seconds (per layer), all coefficients >= 0; ``features`` names x1, x2."""

    features: tuple[str, str]
    a: float
    b: float
    c: float

    def __call__(self, x1: float, x2: float) -> float:
        return self.a + self.b * x1 + self.c * x2


@dataclass
class FittedProfile:
    """Every fitted operator of one profile: token curves, attention fits, and the step
    overhead as the roofline's ``step_overhead_s`` + ``per_seq_overhead_s`` x requests."""

    curves: dict[str, TokenCurve] = field(default_factory=dict)
    attn: dict[str, AttnFit] = field(default_factory=dict)
    scopes: dict[str, str] = field(default_factory=dict)
    overhead: dict[str, float] | None = None


def fit_curve(tokens, seconds) -> TokenCurve:
    """A :class:`TokenCurve` through (tokens, seconds); repeated token counts use their median."""
    tokens, seconds = np.asarray(tokens, float), np.asarray(seconds, float)
    if tokens.shape != seconds.shape:
        raise ValueError("tokens and seconds differ in length")
    s = pd.Series(seconds).groupby(tokens).median()
    xs, ys = [float(x) for x in s.index], [float(y) for y in s.to_numpy()]
    if not xs or xs[0] <= 0 or min(ys) <= 0 or not all(map(math.isfinite, ys)):
        raise ValueError("a token curve needs positive token counts and positive, finite times")
    ys = pool_adjacent_violators(ys)
    return TokenCurve(xs, ys, _tail_slope(xs, ys))


def pool_adjacent_violators(ys: list[float]) -> list[float]:
    """The least-squares non-decreasing sequence closest to ``ys`` (isotonic regression)."""
    blocks: list[list[float]] = []  # [sum, count] of pooled runs
    for y in ys:
        blocks.append([y, 1])
        while len(blocks) > 1 and blocks[-2][0] * blocks[-1][1] > blocks[-1][0] * blocks[-2][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return [s / c for s, c in blocks for _ in range(int(c))]


def _tail_slope(xs: list[float], ys: list[float]) -> float:
    """Seconds per token beyond the last knot: least squares over the last doubling.

    One knot only: proportional to tokens (the compute-bound guess). A negative
    slope (noise) is clipped to 0 so the curve stays monotone.
    """
    if len(xs) == 1:
        return ys[0] / xs[0]
    top = [i for i, x in enumerate(xs) if x >= xs[-1] / 2]
    top = top if len(top) >= 2 else [len(xs) - 2, len(xs) - 1]
    slope = np.polyfit([xs[i] for i in top], [ys[i] for i in top], 1)[0]
    return max(float(slope), 0.0)


def column(rows: pd.DataFrame, name: str, default: float) -> np.ndarray:
    """Column ``name`` as floats, ``default`` where it is empty or absent (optional columns)."""
    if name not in rows:
        return np.full(len(rows), float(default))
    return rows[name].fillna(default).to_numpy(float)


def attn_features(op: str, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(x1, x2) of each measured attention row, as :class:`AttnFit` takes them.

    Prefill: ``pairs = b*(q*ctx + q(q+1)/2)`` scored (query, key) pairs and
    ``kv_tokens = b*(ctx + q)`` read; decode: ``batch`` and the batch's total
    cached context ``batch * mean context``.
    """
    q, ctx, b = column(rows, "num_tokens", 0), column(rows, "context_tokens", 0), column(rows, "batch_size", 1)
    if op == "attn_prefill":
        return b * (q * ctx + q * (q + 1) / 2), b * (ctx + q)
    return b, b * ctx


def fit_attention(op: str, rows: pd.DataFrame) -> AttnFit:
    """Non-negative least squares of ``a + b*x1 + c*x2`` on relative error."""
    x1, x2 = attn_features(op, rows)
    y = rows["median_s"].to_numpy(float)
    if len(y) == 0 or (y <= 0).any():
        raise ValueError(f"{op}: needs positive times")
    X = np.column_stack([np.ones_like(y), x1, x2]) / y[:, None]  # divide by y: relative error
    a, b, c = _nnls(X, np.ones_like(y))
    return AttnFit(ATTN_FEATURES[op], a, b, c)


def _nnls(X: np.ndarray, y: np.ndarray) -> list[float]:
    """Non-negative least squares for a few columns, by trying every support.

    The NNLS optimum is the unconstrained fit on its own support, so the best
    non-negative fit over all 2^k supports is the optimum (k = 3 here: 7 fits).
    """
    k, best, best_err = X.shape[1], None, math.inf
    for mask in product((False, True), repeat=k):
        if not any(mask):
            continue
        cols = np.flatnonzero(mask)
        coef = np.linalg.lstsq(X[:, cols], y, rcond=None)[0]
        err = float(np.sum((X[:, cols] @ coef - y) ** 2))
        if (coef >= 0).all() and err < best_err:
            best, best_err = np.zeros(k), err
            best[cols] = coef
    if best is None or not best.any():
        raise ValueError("no positive fit")
    return [float(v) for v in best]


def fit_overhead(rows: pd.DataFrame) -> dict[str, float]:
    """Fixed and per-request step overhead (``batch_size`` = requests in the step), >= 0."""
    y, n = rows["median_s"].to_numpy(float), column(rows, "batch_size", 1)
    if len(set(n)) < 2:
        return {"step_overhead_s": float(np.median(y)), "per_seq_overhead_s": 0.0}
    a, b = _nnls(np.column_stack([np.ones_like(y), n]) / y[:, None], np.ones_like(y))
    return {"step_overhead_s": a, "per_seq_overhead_s": b}


def usable_rows(profile) -> pd.DataFrame:
    """The measurements at the profile's own tensor-parallel degree with a finite median."""
    m = profile.measurements
    tp = profile.header.get("tensor_parallel")
    if tp is not None and "tensor_parallel" in m:
        m = m[m["tensor_parallel"].fillna(tp) == tp]
    return m[np.isfinite(m["median_s"].to_numpy(float))]


def fit_profile(profile) -> FittedProfile:
    """Fit every operator a profile measured (unknown operators are ignored)."""
    out = FittedProfile()
    for op, rows in usable_rows(profile).groupby("op", sort=False):
        out.scopes[op] = str(rows["scope"].iloc[0]) if "scope" in rows else "layer"
        try:
            if op in TOKEN_OPS:
                out.curves[op] = fit_curve(rows["num_tokens"], rows["median_s"])
            elif op in ATTN_OPS:
                out.attn[op] = fit_attention(op, rows)
            elif op == "step_overhead":
                out.overhead = fit_overhead(rows)
        except ValueError as exc:
            raise ValueError(f"operator {op}: {exc}") from None
    return out


def fit_report(profile) -> pd.DataFrame:
    """Leave-one-out error of every fitted operator: each measured point (each token
    count for a curve, each row for attention) predicted from a fit to the others."""
    out = []
    for op, rows in usable_rows(profile).groupby("op", sort=False):
        if op in TOKEN_OPS:
            pts = rows.groupby("num_tokens")["median_s"].median()
            xs, ys = pts.index.to_numpy(float), pts.to_numpy(float)
            pred = [_drop_one(xs, ys, i) for i in range(len(xs))]
            labels, fit = [f"tokens={x:g}" for x in xs], "monotone log-linear"
        elif op in ATTN_OPS:
            ys = rows["median_s"].to_numpy(float)
            pred = [_drop_row(op, rows, i) for i in range(len(rows))]
            labels, fit = _attn_labels(op, rows), "nnls " + "+".join(ATTN_FEATURES[op])
        else:
            continue
        ape = np.abs(np.asarray(pred) / ys - 1) * 100
        worst = int(np.nanargmax(ape)) if np.isfinite(ape).any() else 0
        out.append({"op": op, "scope": str(rows["scope"].iloc[0]) if "scope" in rows else "layer",
                    "points": len(ys), "fit": fit,
                    "median_ape_pct": float(np.nanmedian(ape)) if np.isfinite(ape).any() else math.nan,
                    "worst_ape_pct": float(ape[worst]), "worst_at": labels[worst]})
    return pd.DataFrame(out, columns=REPORT_COLUMNS)


def _drop_one(xs: np.ndarray, ys: np.ndarray, i: int) -> float:
    """The curve fitted without point ``i``, evaluated at ``xs[i]`` (NaN with < 2 points)."""
    if len(xs) < 2:
        return math.nan
    return fit_curve(np.delete(xs, i), np.delete(ys, i))(xs[i])


def _drop_row(op: str, rows: pd.DataFrame, i: int) -> float:
    """The attention fit without row ``i``, evaluated at row ``i`` (NaN with < 2 rows)."""
    if len(rows) < 2:
        return math.nan
    x1, x2 = attn_features(op, rows.iloc[[i]])
    return fit_attention(op, rows.drop(index=rows.index[i]))(float(x1[0]), float(x2[0]))


def _attn_labels(op: str, rows: pd.DataFrame) -> list[str]:
    """Where each attention row was measured, for the report's ``worst_at``."""
    q, ctx, b = (column(rows, c, d).astype(int) for c, d in
                 (("num_tokens", 0), ("context_tokens", 0), ("batch_size", 1)))
    if op == "attn_prefill":
        return [f"q={x} ctx={c}" for x, c in zip(q, ctx)]
    return [f"batch={x} ctx={c}" for x, c in zip(b, ctx)]


def format_fit_report(df: pd.DataFrame) -> str:
    """The report as a fixed-width table (errors in %)."""
    head = f"{'op':<13}{'scope':<7}{'points':>7}  {'median err':>10}{'worst err':>11}  {'worst at':<22}fit"
    lines = [head, "-" * len(head)]
    for r in df.itertuples():
        lines.append(f"{r.op:<13}{r.scope:<7}{r.points:>7}  {r.median_ape_pct:>9.1f}%{r.worst_ape_pct:>10.1f}%  "
                     f"{r.worst_at:<22}{r.fit}")
    return "\n".join(lines)


def save_fit_report(path: str | Path) -> pd.DataFrame:
    """Cross-validate the profile in folder ``path`` and write ``fit_report.csv`` there."""
    from simbatch.catalog.profiles import read_profile

    df = fit_report(read_profile(path))
    df.to_csv(Path(path) / "fit_report.csv", index=False)
    return df
