"""Benchmark the profile cost model: held-out fit accuracy and per-call cost.

1. Accuracy: imports Vidur's A100 Llama-2-7B profile (``../shared/reference``),
   holds out every ``k``-th measured token count, fits every operator on the
   rest, and prints predicted vs measured times at the held-out counts (per
   operator: median and worst error; and a table at a spread of held-out
   counts, with the per-layer sum the ``linear`` part prices).
2. Cost: the median per-call time of ``ProfileCostModel.step_cost`` (it runs
   once per simulated step) on typical plans, beside the roofline's, with the
   per-token-count cache warm and cold.

This is a benchmark, not a test: it asserts nothing.

    python benchmarks/bench_profile_fit.py [--k 4] [--reference DIR] [--rows 14]
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from pathlib import Path

import numpy as np
import pandas as pd

from simbatch.costmodel import RooflineCostModel, build_cost_model
from simbatch.costmodel.fit import fit_curve
from simbatch.costmodel.profile_fit import fit_profile_model
from simbatch.costmodel.vidur import import_vidur
from simbatch.core.plan import StepPlan
from simbatch.catalog.profiles import Profile

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO.parent / "shared" / "reference"
CSV = "gpu_profiles/a100/Llama-2-7b-hf_mlp.csv"
LINEAR = ["qkv_proj", "o_proj", "mlp_up", "mlp_down", "misc_layer"]


def held_out(profile: Profile, k: int) -> pd.DataFrame:
    """Per operator and held-out token count: measured and predicted seconds."""
    m = profile.measurements
    counts = np.sort(m.num_tokens.unique())
    test = set(counts[k - 1::k])  # every k-th count, never the first, so the floor stays measured
    rows = []
    for op, g in m.groupby("op", sort=False):
        train = g[~g.num_tokens.isin(test)]
        curve = fit_curve(train.num_tokens, train.median_s)
        for r in g[g.num_tokens.isin(test)].itertuples():
            rows.append({"op": op, "tokens": int(r.num_tokens), "measured": r.median_s,
                         "predicted": curve(r.num_tokens)})
    out = pd.DataFrame(rows)
    out["err"] = out.predicted / out.measured - 1
    return out


def print_accuracy(profile: Profile, k: int, show: int) -> None:
    """The per-operator summary and the table of held-out points."""
    df = held_out(profile, k)
    n_all, n_test = profile.measurements.num_tokens.nunique(), df.tokens.nunique()
    print(f"Vidur A100-80GB Llama-2-7B (TP1): {n_all} token counts; every {k}th held out "
          f"({n_test} counts, {df.tokens.min()}-{df.tokens.max()}), each op fitted on the other {n_all - n_test}")
    print(f"\n{'op':<12}{'median |err|':>13}{'worst |err|':>12}  at tokens")
    for op, g in df.groupby("op", sort=False):
        worst = g.loc[g.err.abs().idxmax()]
        print(f"{op:<12}{g.err.abs().median():>12.1%}{abs(worst.err):>12.1%}  {int(worst.tokens)}")
    wide = df.pivot(index="tokens", columns="op", values=["measured", "predicted"])
    lin_m, lin_p = wide["measured"][LINEAR].sum(axis=1), wide["predicted"][LINEAR].sum(axis=1)
    lin_err = (lin_p / lin_m - 1).abs()
    print(f"{'linear sum':<12}{lin_err.median():>12.1%}{lin_err.max():>12.1%}  {int(lin_err.idxmax())}")
    picks = sorted({int(wide.index[np.abs(np.log(wide.index / t)).argmin()])
                    for t in np.geomspace(wide.index.min(), wide.index.max(), show)})
    print("\nPer-layer ms at held-out token counts (measured / predicted, error)")
    ops = ["qkv_proj", "o_proj", "mlp_up", "mlp_down", "misc_layer"]
    print(f"{'tokens':>6}" + "".join(f"{op:>20}" for op in ops) + f"{'linear sum':>22}")
    for t in picks:
        cells = [_cell(wide.loc[t, ("measured", op)], wide.loc[t, ("predicted", op)]) for op in ops]
        print(f"{t:>6}" + "".join(f"{c:>20}" for c in cells) + f"{_cell(lin_m[t], lin_p[t]):>22}")


def _cell(measured: float, predicted: float) -> str:
    return f"{measured * 1e3:.3f}/{predicted * 1e3:.3f} {predicted / measured - 1:+.0%}"


def plans() -> dict[str, StepPlan]:
    """Typical step plans: decode, padded static decode, and a chunked-prefill mix."""
    live, done = 24, 8
    return {
        "128-slot decode": StepPlan(list(range(128)), [1] * 128, [600 + 7 * i for i in range(128)], None, 128),
        "32-slot padded static decode": StepPlan(list(range(live)) + [-1] * done, [1] * live + [0] * done,
                                                 [1024] * 32, [0] * live + [1] * done, 32),
        "64 decodes + 512-token chunk": StepPlan(list(range(65)), [1] * 64 + [512], [800] * 64 + [1024], None, 64),
    }


def print_cost(profile: Profile | None) -> None:
    """Median per-call µs of step_cost: profile (warm and cold cache) beside roofline."""
    models = {"roofline": RooflineCostModel("llama-2-7b", "a100-80gb"),
              "profile (shipped)": build_cost_model({"kind": "profile"}, "llama-2-7b", "a100-80gb")}
    if profile is not None:
        models["profile (full Vidur)"] = fit_profile_model(profile, "llama-2-7b", "a100-80gb")
    print("\nstep_cost per call (llama-2-7b, a100-80gb), median of 7 x 20,000 calls, µs")
    print(f"{'plan':<32}" + "".join(f"{name:>22}" for name in models))
    for label, plan in plans().items():
        cells = [statistics.median(timeit.Timer(lambda cm=cm, plan=plan: cm.step_cost(plan)).repeat(7, 20_000))
                 / 20_000 * 1e6 for cm in models.values()]
        print(f"{label:<32}" + "".join(f"{c:>22.2f}" for c in cells))
    # Cold: a fresh model priced at 4,096 distinct token counts (every lookup misses the cache).
    cold = []
    for _ in range(3):
        cm = build_cost_model({"kind": "profile"}, "llama-2-7b", "a100-80gb")
        cold_plans = [StepPlan([0], [n], [0]) for n in range(1, 4097)]
        cold.append(timeit.timeit(lambda cm=cm, ps=cold_plans: [cm.step_cost(p) for p in ps], number=1) / 4096 * 1e6)
    print(f"{'1-slot prefill, cache cold':<32}{'':>22}{statistics.median(cold):>22.2f}")


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, then print the accuracy tables and the call costs."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=4, help="hold out every k-th token count (default 4)")
    ap.add_argument("--rows", type=int, default=14, help="held-out token counts in the table (default 14)")
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                    help=f"folder holding gpu_profiles/ (default: {DEFAULT_REFERENCE})")
    args = ap.parse_args(argv)
    profile = None
    if (args.reference / CSV).is_file():
        profile = import_vidur(args.reference / CSV, "llama-2-7b", "a100-80gb")
        print_accuracy(profile, args.k, args.rows)
    else:
        print(f"{args.reference / CSV} not found: accuracy skipped (give --reference DIR)")
    print_cost(profile)


if __name__ == "__main__":
    main()
