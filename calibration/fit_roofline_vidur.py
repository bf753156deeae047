"""Re-fit the roofline's linear-layer parameters to Vidur's measured A100 profiles.

``compute_eff``, ``bw_eff`` and ``gemm_ramp_tokens`` in
``simbatch/costmodel/roofline.py`` are fitted, not guessed: this script
reproduces them. It reads Vidur's per-operator CUDA timings
(``shared/reference/gpu_profiles``, see its README), sums every per-layer op but
the embedding (what the cost model's ``linear`` part stands for, exactly as
``tests/test_costmodel_roofline.py`` measures it), and finds the three values
that minimise the squared error of log time over all TP1 rows up to 4096 tokens
of the three A100 models (Llama-2-7B, Llama-3-8B, Llama-2-70B): for each ramp
on a grid, the two efficiencies by a grid search. The GEMM efficiency ramp
shows in the 70B rows (its GEMMs run ~8% slower per token at 512-1024 tokens
than at 2048-4096), hardly in the 7B/8B ones, so the fit needs all three. It
then shows the errors before (the previous defaults: 0.66, 0.63, no ramp) and
after, per model.

    python calibration/fit_roofline_vidur.py [--reference DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from simbatch.costmodel import RooflineCostModel
from simbatch.costmodel.roofline_params import DEFAULT_PARAMS
from simbatch.core.plan import StepPlan

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO.parent / "shared" / "reference"
# Every per-layer non-attention op but the once-per-step embedding.
OPS = ["input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
       "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]
GPU = "a100-80gb"
CHECKS = [("a100/Llama-2-7b-hf_mlp.csv", "llama-2-7b"),
          ("a100/Meta-Llama-3-8B_mlp.csv", "llama-3-8b"),
          ("a100/Llama-2-70b-hf_mlp.csv", "llama-2-70b")]
POINTS = [1, 64, 128, 256, 512, 1024, 2048, 4096]
RAMPS = range(0, 129, 8)  # gemm_ramp_tokens tried
# The defaults before the ramp was added (fitted on Llama-2-7B alone), for the before/after table.
BEFORE = {"compute_eff": 0.66, "bw_eff": 0.63, "gemm_ramp_tokens": 0}


def measured_per_layer_ms(path: Path, tp: int = 1) -> pd.Series:
    """Median per-layer time (ms) by token count, TP ``tp``, up to 4096 tokens."""
    d = pd.read_csv(path)
    d = d[(d.num_tensor_parallel_workers == tp) & (d.num_tokens <= 4096)]
    total = sum(d[f"time_stats.{op}.median"] for op in OPS)
    return total.groupby(d.num_tokens).median()


def linear_ms(model: str, tokens, **params: float) -> np.ndarray:
    """The cost model's per-layer ``linear`` time (ms) for one prefill of each token count."""
    cm = RooflineCostModel(model, GPU, 1, **params)
    per_step = [cm.step_cost(StepPlan([0], [int(t)], [0])).breakdown["linear"] for t in tokens]
    return np.array(per_step) / cm.model.num_layers * 1e3


def roofs(model: str, tokens, ramp: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The compute and memory roofs (ms, at efficiency 1) per token count.

    Linear time is ``max(compute / compute_eff, memory / bw_eff)``; pricing with
    one efficiency at 1 and the other tiny makes that roof win, isolating it.
    The ramp (``gemm_ramp_tokens``) lies inside the compute roof.
    """
    tiny = 1e-9
    compute = linear_ms(model, tokens, compute_eff=tiny, bw_eff=1.0, gemm_ramp_tokens=ramp) * tiny
    memory = linear_ms(model, tokens, compute_eff=1.0, bw_eff=tiny) * tiny
    return compute, memory


def fit(compute: np.ndarray, memory: np.ndarray, measured: np.ndarray) -> tuple[float, float, float]:
    """(compute_eff, bw_eff, RMS log error) minimising squared log error.

    A coarse grid over (0, 1] then a fine one around its best point: the loss
    is a cheap vectorised max over a few hundred rows, so no optimiser is needed.
    """
    log_m = np.log(measured)

    def loss(c: np.ndarray, b: np.ndarray) -> np.ndarray:
        pred = np.maximum(compute[:, None, None] / c, memory[:, None, None] / b)
        return np.mean((np.log(pred) - log_m[:, None, None]) ** 2, axis=0)

    lo, hi, step = 0.05, 1.0, 0.01
    for _ in range(3):
        grid = np.arange(lo, hi + step / 2, step)
        c, b = np.meshgrid(grid, grid, indexing="ij")
        err = loss(c, b)
        i, j = np.unravel_index(np.argmin(err), err.shape)
        best = c[i, j], b[i, j]
        lo, hi, step = max(min(best) - 2 * step, 1e-3), min(max(best) + 2 * step, 1.0), step / 10
    return float(best[0]), float(best[1]), float(np.sqrt(err[i, j]))


def print_fit(reference: Path) -> None:
    """Fit on the TP1 rows of all three models and print the result beside the shipped defaults."""
    measured = [measured_per_layer_ms(reference / "gpu_profiles" / csv) for csv, _ in CHECKS]
    log_m = np.concatenate([np.log(m.to_numpy()) for m in measured])
    memory = np.concatenate([roofs(model, m.index)[1] for (_, model), m in zip(CHECKS, measured)])
    best = None
    for ramp in RAMPS:
        compute = np.concatenate([roofs(model, m.index, ramp)[0] for (_, model), m in zip(CHECKS, measured)])
        ce, be, rms = fit(compute, memory, np.exp(log_m))
        if best is None or rms < best[3]:
            best = (ce, be, ramp, rms)
    ce, be, ramp, rms = best
    rows = sum(len(m) for m in measured)
    print(f"Fit: {', '.join(model for _, model in CHECKS)} on {GPU}, TP1, {rows} rows (1-4096 tokens), "
          "least squares on log time")
    print(f"{'':18}{'fitted':>9}{'shipped':>9}{'before':>9}")
    for key, value in (("compute_eff", ce), ("bw_eff", be), ("gemm_ramp_tokens", ramp)):
        print(f"{key:18}{value:9.3f}{DEFAULT_PARAMS[key]:9.3f}{BEFORE[key]:9.3f}")
    shipped, before = (np.concatenate([np.log(linear_ms(model, m.index, **params) / m.to_numpy())
                                       for (_, model), m in zip(CHECKS, measured)])
                       for params in ({}, BEFORE))
    print(f"{'RMS log err':18}{rms:9.3f}{np.sqrt(np.mean(shipped ** 2)):9.3f}"
          f"{np.sqrt(np.mean(before ** 2)):9.3f}")


def errors(model: str, measured: pd.Series, **params: float) -> np.ndarray:
    """Relative error of the predicted per-layer linear time at every measured token count."""
    return linear_ms(model, measured.index, **params) / measured.to_numpy() - 1


def print_checks(reference: Path) -> None:
    """Measured vs predicted per-layer ms (shipped defaults, and before) on three A100 models, TP1."""
    print(f"\nShipped defaults vs Vidur, {GPU}, TP1: per-layer linear time (ms); "
          "'before' = compute_eff 0.66, bw_eff 0.63, no ramp")
    for csv, model in CHECKS:
        measured = measured_per_layer_ms(reference / "gpu_profiles" / csv)
        every, old = errors(model, measured), errors(model, measured, **BEFORE)
        print(f"\n{model}  (all {len(every)} token counts: max |err| {np.abs(every).max():.1%}, "
              f"RMS {np.sqrt(np.mean(every ** 2)):.1%}; before: max {np.abs(old).max():.1%}, "
              f"RMS {np.sqrt(np.mean(old ** 2)):.1%})")
        print(f"{'tokens':>7}{'measured':>10}{'predicted':>11}{'error':>8}{'before':>9}")
        for t, p, b in zip(POINTS, linear_ms(model, POINTS), linear_ms(model, POINTS, **BEFORE)):
            m = measured[t]
            print(f"{t:7d}{m:10.3f}{p:11.3f}{p / m - 1:+8.1%}{b / m - 1:+9.1%}")


def main(argv: list[str] | None = None) -> None:
    """Parse ``--reference``, fit, and print both tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                    help=f"folder holding gpu_profiles/ (default: {DEFAULT_REFERENCE})")
    args = ap.parse_args(argv)
    if not (args.reference / "gpu_profiles").is_dir():
        sys.exit(f"error: no gpu_profiles/ under {args.reference} (give --reference DIR)")
    print_fit(args.reference)
    print_checks(args.reference)


if __name__ == "__main__":
    main()
