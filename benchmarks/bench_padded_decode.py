"""Padded (static / dynamic) decode steps on the torch backend against the plan the cost model prices.

A static batch plans every row at the padded context ``L`` (longest prompt +
tokens decoded so far), and the profile cost model prices the step as the
calibration's *canonical* plan: ``D`` rows each really holding ``L`` tokens.
This benchmark executes, interleaved step by step so that a shared machine's
load drifts out of the ratios, three versions of the same decode steps of one
static batch (one long prompt and shorter ones, Azure-conversation-like):

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
A benchmark, not a test: CPU timings move with the machine's load.

    python benchmarks/bench_padded_decode.py [--rows 8] [--steps 40] [--rounds 2] [--profile DIR]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys

PROMPTS = (60, 100, 150, 200, 250, 300, 400, 1400)  # a padded batch: one long prompt, shorter ones
BLOCK = 16


def static_plan(ids: list[int], context: int):
    """A static batch's decode step: every row planned at the padded ``context``."""
    from simbatch.core.plan import StepPlan

    rows = len(ids)
    return StepPlan(list(ids), [1] * rows, [context] * rows, num_pad_tokens=[0] * rows, num_decode_slots=rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=8, help="batch rows (at most 8)")
    p.add_argument("--steps", type=int, default=40, help="decode steps per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--profile", default=None, help="profile folder of this machine, to print the price")
    args = p.parse_args()
    from simbatch.backends.torch_backend import TorchBackend
    from simbatch.core.plan import StepPlan

    prompts = sorted(PROMPTS)[-args.rows:]
    rows, longest = len(prompts), max(prompts)
    need = 3 * rows * -(-(longest + args.steps + 2) // BLOCK) + 8
    be = TorchBackend("tiny", num_blocks=need, block_size=BLOCK, device="cpu", threads=args.threads)
    for t in be.pool.keys + be.pool.values:
        t.normal_()  # written memory, as a run's blocks are
    be.warmup()
    cost = None
    if args.profile:
        from simbatch.costmodel import build_cost_model
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


if __name__ == "__main__":
    sys.exit(main())
