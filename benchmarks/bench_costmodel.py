"""The cost models' own accuracy and cost: the profile fit on held-out points, padded decode steps.

Two subcommands (one must be given). Benchmarks, not tests: they assert nothing.

``profile-fit``: the profile cost model, held-out fit accuracy and per-call cost.

1. Accuracy: imports Vidur's A100 Llama-2-7B profile (``../shared/reference``),
   holds out every ``k``-th measured token count, fits every operator on the
   rest, and prints predicted vs measured times at the held-out counts (per
   operator: median and worst error; and a table at a spread of held-out
   counts, with the per-layer sum the ``linear`` part prices). Without
   ``../shared`` the accuracy part is skipped with a one-line message.
2. Cost: the median per-call time of ``ProfileCostModel.step_cost`` (it runs
   once per simulated step) on typical plans, beside the roofline's, with the
   per-token-count cache warm and cold.

  No numeric target: what a point the fit has not seen is predicted within, and that
  pricing a step from the profile costs about what the roofline's does
  (benchmarks/README.md; docs/cost_models.md, "Profile cost model").

``padded-decode`` (issue 16 item 3; needs torch): padded (static / dynamic) decode steps
on the torch backend against the plan the cost model prices. A static batch plans every
row at the padded context ``L`` (longest prompt + tokens decoded so far), and the profile
cost model prices the step as the calibration's *canonical* plan: ``D`` rows each really
holding ``L`` tokens. This executes, interleaved step by step so that a shared machine's
load drifts out of the ratios, three versions of the same decode steps of one static batch
(one long prompt and shorter ones, Azure-conversation-like):

* ``padded``: the static plan as the backend runs it (each row's blocks span
  the padded length, as a padded engine's rectangular KV cache does);
* ``canonical``: every row really at ``L`` (what the calibration measured);
* ``own-length``: each row gathering only its own tokens and one cache-hot
  scratch block for the rest, which is what the backend did for padded rows
  before it spanned them (the same tensors as a continuous-batching plan of
  the rows' real contexts, whose longest row sets ``L``).

  It prints each version's median forward time, its ratio to ``canonical``
  (medians of per-step ratios) and the profile cost model's price of the
  static plan where a profile for this machine is given (``--profile``).
  CPU timings move with the machine's load. Checks by eye why static batching was
  over-predicted against the torch backend (docs/validation.md, "Static batches at long
  padded contexts").

    python benchmarks/bench_costmodel.py profile-fit [--k 4] [--reference DIR] [--rows 14]
    python benchmarks/bench_costmodel.py padded-decode [--rows 8] [--steps 40] [--rounds 2] [--profile DIR]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import timeit
from pathlib import Path

import numpy as np
import pandas as pd

from simbatch.catalog.profiles import Profile
from simbatch.core.plan import StepPlan
from simbatch.costmodel import RooflineCostModel, build_cost_model
from simbatch.costmodel.fit import fit_curve
from simbatch.costmodel.profile_fit import fit_profile_model
from simbatch.costmodel.vidur import import_vidur

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO.parent / "shared" / "reference"


# -- profile-fit ------------------------------------------------------------------------------

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


def main_profile_fit(args) -> int:
    """Print the accuracy tables and the call costs."""
    profile = None
    if (args.reference / CSV).is_file():
        profile = import_vidur(args.reference / CSV, "llama-2-7b", "a100-80gb")
        print_accuracy(profile, args.k, args.rows)
    else:
        print(f"{args.reference / CSV} not found: accuracy skipped (give --reference DIR)")
    print_cost(profile)
    return 0


# -- padded-decode ----------------------------------------------------------------------------

PROMPTS = (60, 100, 150, 200, 250, 300, 400, 1400)  # a padded batch: one long prompt, shorter ones
BLOCK = 16


def static_plan(ids: list[int], context: int):
    """A static batch's decode step: every row planned at the padded ``context``."""
    rows = len(ids)
    return StepPlan(list(ids), [1] * rows, [context] * rows, num_pad_tokens=[0] * rows, num_decode_slots=rows)


def main_padded_decode(args) -> int:
    """Run the three versions of the static batch's decode steps, interleaved; print them."""
    from simbatch.backends.torch_backend import TorchBackend

    prompts = sorted(PROMPTS)[-args.rows:]
    rows, longest = len(prompts), max(prompts)
    need = 3 * rows * -(-(longest + args.steps + 2) // BLOCK) + 8
    be = TorchBackend("tiny", num_blocks=need, block_size=BLOCK, device="cpu", threads=args.threads)
    for t in be.pool.keys + be.pool.values:
        t.normal_()  # written memory, as a run's blocks are
    be.warmup()
    cost = None
    if args.profile:
        cost = build_cost_model({"kind": "profile", "path": args.profile}, "tiny", "a100-80gb", 1,
                                where="--profile")
    names = ("padded", "canonical", "own-length")
    times = {n: [] for n in names}
    prices = []
    gc.disable()
    for _ in range(args.rounds):
        padded_ids = list(range(rows))
        for rid, prompt in zip(padded_ids, prompts):
            be.pool.pretend(rid, prompt)
        own_ids = [100 + r for r in range(rows)]
        for rid, prompt in zip(own_ids, prompts):
            be.pool.pretend(rid, prompt)
        for t in range(1, args.steps + 1):
            context = longest + t - 1
            plan = static_plan(padded_ids, context)
            times["padded"].append(_forward(be, plan))
            times["canonical"].append(be.replay(plan).forward_s)  # stand-ins each holding `context`
            own = [be.pool.length(rid) for rid in own_ids]
            times["own-length"].append(_forward(be, StepPlan(own_ids, [1] * rows, own, num_decode_slots=rows)))
            be.steps.clear()
            if cost is not None:
                c = cost.step_cost(plan)
                prices.append(c.seconds - c.breakdown["overhead"])
        for rid in padded_ids + own_ids:
            be.release(rid)
    gc.enable()
    _report(times, prices, rows, prompts, args, be.facts["name"])
    return 0


def _forward(be, plan) -> float:
    """Execute ``plan``; its forward-pass seconds."""
    be.step_cost(plan)
    return be.steps[-1].forward_s


def _report(times: dict, prices: list, rows: int, prompts: list[int], args, machine: str) -> None:
    """Medians, ratios to the canonical plan (per step), and the price against the padded step."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{machine}; tiny model, {args.threads} thread(s); static batch of {rows} rows, prompts {prompts}, "
          f"{args.steps} decode steps x {args.rounds} rounds; load average {load:.1f}")
    base = times["canonical"]
    print(f"{'version':>11}  {'forward p50 ms':>14}  {'/ canonical':>11}")
    for name, ts in times.items():
        ratios = [a / b for a, b in zip(ts, base)]
        print(f"{name:>11}  {1e3 * statistics.median(ts):14.2f}  "
              f"{statistics.median(ratios):11.3f}")
    if prices:
        ratios = [p / m for p, m in zip(prices, times["padded"])]
        print(f"profile price of the static plan: p50 {1e3 * statistics.median(prices):.2f} ms; "
              f"price / padded - 1: p50 {100 * (statistics.median(ratios) - 1):+.1f} %")


# -- the command line ---------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    """Parse the subcommand and run it."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", metavar="{profile-fit,padded-decode}", required=True)
    fit = sub.add_parser("profile-fit", help="the profile cost model's held-out accuracy and step_cost's µs",
                         description="Benchmark the profile cost model: held-out fit accuracy and per-call cost.")
    fit.add_argument("--k", type=int, default=4, help="hold out every k-th token count (default 4)")
    fit.add_argument("--rows", type=int, default=14, help="held-out token counts in the table (default 14)")
    fit.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                     help=f"folder holding gpu_profiles/ (default: {DEFAULT_REFERENCE})")
    fit.set_defaults(func=main_profile_fit)
    pad = sub.add_parser("padded-decode", help="a static batch's decode steps on the torch backend, three ways "
                         "(needs torch)", description="Padded (static / dynamic) decode steps on the torch "
                         "backend against the plan the cost model prices.")
    pad.add_argument("--rows", type=int, default=8, help="batch rows (at most 8)")
    pad.add_argument("--steps", type=int, default=40, help="decode steps per round")
    pad.add_argument("--rounds", type=int, default=2)
    pad.add_argument("--threads", type=int, default=1)
    pad.add_argument("--profile", default=None, help="profile folder of this machine, to print the price")
    pad.set_defaults(func=main_padded_decode)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
