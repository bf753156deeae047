"""Cells of notebooks/06_is_the_simulator_right.ipynb (see ../_make_notebooks.py)."""

CELLS = [
("md", r'''
# 6. Is the simulator right? Validation against a real model on CPU

**What you will learn**

- How a simulator's cost model is **calibrated** (micro-benchmarks and whole steps measured on the device) and
  how it is **validated**: run the same requests on a real transformer, in real time, and compare.
- How to read a **predicted-vs-measured** plot of step times, and why steps are paired by their plan, not by
  their number.
- The difference between **per-step errors** and **end-to-end errors** (TTFT, TPOT, E2EL, throughput), and how
  small step errors compound through the schedule.
- Where the remaining errors come from (a busy CPU, padded attention, the garbage collector) and what that means
  for trusting a what-if.

**This notebook needs torch** (CPU build is enough): `pip install torch==2.13.0 && pip install -e ".[torch]"`.
Without it, every cell prints a short "skipped" message instead of failing. The model is simbatch's `tiny`
Llama-shaped decoder with random weights: no download. The measured side runs in wall-clock time, about 20 s.
'''),
("code", r'''
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from simbatch import load_scenario, scenarios_dir, validate
from simbatch.report.palette import POLICY_COLOURS  # the colours of the CLI's figures and reports too
from simbatch.report.figures_common import plain_ticks  # log axes labelled 2, 10, 200

try:
    import torch  # noqa: F401  (the real model runs on it)
    HAVE_TORCH = True
except (ImportError, OSError) as exc:
    HAVE_TORCH = False
    WHY = f"{type(exc).__name__}: {exc}"
SKIP = ("skipped: torch is not installed, so there is no real model to measure. "
        "Install it with  pip install torch==2.13.0 && pip install -e \".[torch]\"  and re-run this notebook.")
if not HAVE_TORCH:
    print(SKIP)
    print(f"(importing torch said: {WHY})")


def with_validation(cell):
    """Run a cell's body on the validation result, or say why it is skipped (no torch)."""
    if VALIDATION is None:
        print(SKIP)
    else:
        cell(VALIDATION)
    return cell


SCEN = scenarios_dir()  # the bundled scenarios/ of this checkout
ROOT = SCEN.parent
pd.set_option("display.precision", 3)
'''),
("md", r'''
## The experiment

`simbatch validate` (docs/validation.md) has two sides:

- **Measured.** The same engine, policies and event log as a simulation, but in a real-time SimPy environment:
  requests are released at their arrival times and every step's batch is executed by the **torch backend**, a
  real Llama-architecture forward pass with a paged KV cache. Each step's time is measured: the forward pass
  plus the *overhead* (the policy's scheduling, the engine's bookkeeping, preparing the inputs).
- **Predicted.** The same workload simulated with the **profile cost model** calibrated for this CPU and model:
  per-operator micro-benchmarks (GEMMs, attention, norms...), plus terms fitted on whole forward passes of the
  backend (what the operators miss: weights no longer in cache, the KV gather, glue), plus the measured host and
  engine overhead per step. The calibrated profile ships in `calibration/profiles/`.

The scenario, `scenarios/validate_cpu.yaml`: chat-shaped lengths scaled down 4x on the `tiny` model, arriving at
4 req/s. To keep this notebook short we take 24 requests and two policies: **continuous batching** and
**static batching** (batches of 8, padded). The full run (`simbatch validate scenarios/validate_cpu.yaml
--device cpu`) takes 32 requests and all four policies, 2-3 minutes.
'''),
("code", r'''
print((SCEN / "validate_cpu.yaml").read_text())
scenario = load_scenario(SCEN / "validate_cpu.yaml", ["workload.synthetic.num_requests=24"])
POLICIES = ["continuous", "static"]


def milestones(line):
    """Print the run's milestones; the calibration's line per operator and per step (about 60) would
    bury them, so those are left out ("calibrated in ..." says when it ended)."""
    if not (line.startswith("calibrate: ") and ", ETA " in line):
        print(line)


VALIDATION = validate(scenario, "cpu", POLICIES, progress=milestones) if HAVE_TORCH else None
'''),
("code", r'''
@with_validation
def what_ran(v):
    from simbatch.validation import format_table

    b, c = v.backend, v.cost_model
    print(f"measured: torch {b['torch']} on {b['device']} ({b['source']}), {b['dtype']}, {b['threads']} thread(s), "
          f"model {b['model']}")
    print(f"predicted: {c['kind']} cost model from {v.profile_path.name}"
          f"{' (calibrated just now)' if v.profile_fresh else ' (shipped)'}")
    print(v.kv_note)
    for kind, p in v.policies.items():
        load = p.errors.get("load_average_1min") or {}
        print(f"{kind}: {len(p.pairs)} steps measured in {p.wall_s:.1f} s; "
              f"1-minute load average {load.get('before')} -> {load.get('after')}")
    print()
    print(format_table(v))
'''),
("md", r'''
The table has two kinds of error:

- **Step APE** (absolute percentage error), unsigned: |predicted / measured - 1| for every step the real model
  ran, as a median and a 90th percentile, overall and per kind of step (`decode` = every slot decodes,
  `prefill` = prompt tokens are at least half of the step). `fwd` is the same for the forward pass alone.
- **End-to-end errors**, signed: predicted / measured - 1 of the two runs' TTFT, TPOT and E2EL percentiles and
  throughput. Negative means the simulator is optimistic (shorter latencies than the real run).

## Predicted against measured, step by step

Every step the real model executed is priced by the cost model **from its own plan** (the same rows, tokens
and contexts). Comparing step *i* of the real run with step *i* of the simulated run would compare different
batches as soon as the two schedules drift apart; pairing by plan compares like with like.
'''),
("code", r'''
KIND_COLORS = {"decode_only": "#0072B2", "prefill_heavy": "#D55E00", "mixed": "#009E73"}


@with_validation
def step_scatter(v):
    fig, axes = plt.subplots(1, len(v.policies), figsize=(6.5 * len(v.policies), 5.5), squeeze=False)
    for ax, (kind, p) in zip(axes[0], v.policies.items()):
        d = p.pairs
        for step_kind, g in d.groupby("kind"):
            ax.scatter(1e3 * g.measured_s, 1e3 * g.predicted_s, s=8, alpha=0.5,
                       color=KIND_COLORS.get(step_kind, "grey"), label=f"{step_kind} ({len(g)} steps)")
        lo = 1e3 * min(d.measured_s.min(), d.predicted_s.min()) / 1.5
        hi = 1e3 * max(d.measured_s.max(), d.predicted_s.max()) * 1.5
        x = np.array([lo, hi])
        ax.plot(x, x, color="black", lw=1, label="y = x (perfect)")
        ax.fill_between(x, x / 1.25, x * 1.25, color="grey", alpha=0.15, label="within 25 %")
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured step time (ms)",
               ylabel="predicted step time (ms)",
               title=f"{kind}: median step error {100 * p.errors['step_ape']['median']:.0f} %")
        plain_ticks(ax, "x")
        plain_ticks(ax, "y")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("Cost model vs the real tiny model on this CPU, one point per step")
    fig.tight_layout()
    plt.show()
'''),
("md", r'''
Points on the diagonal are steps the cost model priced exactly; the grey band is +-25 %. The big cloud at the
bottom left is decode steps (a few milliseconds each: one token per running request); the few points at the top
right are prefills (a whole prompt in one step), priced mostly from large matrix multiplications. For each kind,
look at whether the points straddle the line (noise) or sit on one side of it (a bias): above means predicted
too slow, below too fast. Decode steps are small, so fixed costs and noise weigh more in them.

## Errors per kind of step: bias or noise?

An unsigned error does not say whether the model is *wrong* (a bias: always too slow or too fast) or just
*noisy* (scattered around the truth). The signed error per step, predicted / measured - 1, tells them apart.
'''),
("code", r'''
@with_validation
def per_kind(v):
    rows = []
    for kind, p in v.policies.items():
        d = p.pairs.assign(signed=p.pairs.predicted_s / p.pairs.measured_s - 1,
                           fwd_signed=p.pairs.predicted_forward_s / p.pairs.forward_s - 1)
        for step_kind, g in [("all", d), *d.groupby("kind")]:
            rows.append({"policy": kind, "step kind": step_kind, "steps": len(g),
                         "APE p50 %": 100 * g.ape.median(), "APE p90 %": 100 * g.ape.quantile(0.9),
                         "signed p50 %": 100 * g.signed.median(), "forward signed p50 %": 100 * g.fwd_signed.median(),
                         "measured p50 (ms)": 1e3 * g.measured_s.median(),
                         "predicted p50 (ms)": 1e3 * g.predicted_s.median()})
    display(pd.DataFrame(rows).set_index(["policy", "step kind"]).style.format(precision=1)
            .set_caption("Step errors per policy and kind (signed: + = predicted slower than measured)"))

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4.5))
    bins = np.linspace(-0.8, 1.2, 61)
    for kind, p in v.policies.items():
        color = POLICY_COLOURS[kind]
        d = p.pairs
        signed = (d.predicted_s / d.measured_s - 1)[d.kind == "decode_only"].clip(bins[0], bins[-1])
        ax1.hist(100 * signed, bins=100 * bins, alpha=0.5, color=color, label=f"{kind} decode steps")
        ax1.axvline(100 * signed.median(), color=color, linestyle="--", label=f"{kind} median {100 * signed.median():+.0f} %")
        measured = [1e3 * d.forward_s.median(), 1e3 * d.overhead_s.median()]
        predicted = [1e3 * d.predicted_forward_s.median(), 1e3 * d.predicted_overhead_s.median()]
        i = list(v.policies).index(kind)
        ax2.bar(np.array([0, 1]) + 0.2 * (2 * i - 1) - 0.1, measured, 0.2, color=color, label=f"{kind} measured")
        ax2.bar(np.array([0, 1]) + 0.2 * (2 * i - 1) + 0.1, predicted, 0.2, color=color, alpha=0.45, hatch="//",
                label=f"{kind} predicted")
    ax1.axvline(0, color="black", lw=1)
    ax1.set(xlabel="signed step error, predicted / measured - 1 (%)", ylabel="steps",
            title="Decode steps: bias (median) and spread")
    ax2.set_xticks([0, 1], ["forward pass", "overhead (scheduling, inputs)"])
    ax2.set(yscale="log", ylabel="median per step (ms)", title="Where a step's time goes, measured vs predicted")
    plain_ticks(ax2)
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    plt.show()
'''),
("md", r'''
A median signed error near zero with a wide histogram means noise; a median far from zero means the cost model
misses something systematic. The right panel splits each step into the forward pass and the overhead around it:
on this tiny model the overhead is a visible share of a decode step, which is why the calibration measures it.

## Where do the errors come from?

A systematic error shows up as a trend against some feature of the step. Two candidates from docs/validation.md:
the **context** the decode rows attend to (static batching pads every row to the longest context, while the cost
model prices the summed contexts) and **time** (the load from other processes on a shared CPU changes during the
run, so the same step takes longer at some moments than at others).
'''),
("code", r'''
@with_validation
def error_sources(v):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4.5))
    for kind, p in v.policies.items():
        color = POLICY_COLOURS[kind]
        d = p.pairs[p.pairs.kind == "decode_only"]
        signed = 100 * (d.predicted_s / d.measured_s - 1)
        ax1.scatter(d.context_tokens, signed, s=6, alpha=0.35, color=color, label=f"{kind} decode steps")
        edges = np.unique(np.quantile(d.context_tokens, np.linspace(0, 1, 9)))
        mid = pd.Series(signed.values).groupby(pd.cut(d.context_tokens.values, edges, include_lowest=True),
                                               observed=True).median()
        ax1.plot([iv.mid for iv in mid.index], mid.values, "o-", color=color, lw=2, label=f"{kind} median per bin")
        wall = d.measured_s.cumsum()  # seconds of decode work so far: a proxy for wall time
        ax2.plot(wall, signed.rolling(50, min_periods=10).median(), color=color, label=f"{kind}, rolling median of 50 steps")
    for ax in (ax1, ax2):
        ax.axhline(0, color="black", lw=1)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set(xlabel="context tokens attended in the step (sum over rows)", ylabel="signed step error (%)",
            ylim=(-80, 120), title="Error against the KV context of decode steps")
    ax2.set(xlabel="decode time elapsed in the measured run (s)", ylabel="signed step error (%)",
            title="Error over the run: drifting load shows up here")
    fig.tight_layout()
    plt.show()
'''),
("md", r'''
If the error climbs with the context under static batching but not under continuous batching, that is a
systematic error of padded batches: static's decode rows are padded to the longest context, and the cost model
prices that padded context with terms fitted on unpadded steps, a case outside its calibration grid. If the
rolling median wanders up and down over the run for both policies alike, that is the machine, not the model:
on a shared 2-core machine the same step moves by 30-60 % over tens of seconds, and the profile was measured at
a different moment (with a different load) than this run.

## From steps to what users see: latency distributions

Step errors compound. A step predicted too short lets the simulated run admit the next request earlier, which
changes later batches, and so on. Each request's TTFT and end-to-end latency, measured (solid) and predicted
(dashed):
'''),
("code", r'''
@with_validation
def latency_cdfs(v):
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    metrics = [("ttft_ms", "time to first token (ms)"), ("tpot_ms", "time per output token (ms)"),
               ("e2el_ms", "end-to-end latency (ms)")]
    for kind, p in v.policies.items():
        color = POLICY_COLOURS[kind]
        for ax, (col, label) in zip(axes, metrics):
            for side, style in ((p.measured, "-"), (p.predicted, "--")):
                x = np.sort(side.requests[col].dropna().to_numpy())
                ax.step(x, np.arange(1, len(x) + 1) / len(x), style, where="post", color=color,
                        label=f"{kind}, {'measured' if side is p.measured else 'predicted'}")
            ax.set(xlabel=label, ylabel="fraction of requests", xscale="log",
                   title=f"{label.split(' (')[0].capitalize()}: measured vs predicted")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    plt.show()

    rows = {kind: {"TTFT p50 %": p.errors["ttft_p50_err"], "TTFT p99 %": p.errors["ttft_p99_err"],
                   "TPOT p50 %": p.errors["tpot_p50_err"], "E2EL p50 %": p.errors["e2el_p50_err"],
                   "E2EL p99 %": p.errors["e2el_p99_err"], "throughput %": p.errors["throughput_err"]}
            for kind, p in v.policies.items()}
    display((100 * pd.DataFrame(rows).T.astype(float)).style.format("{:+.1f}")
            .set_caption("End-to-end errors, predicted / measured - 1 (negative: the simulator is optimistic)"))
'''),
("md", r'''
## What the errors mean

- **Throughput** is the most robust number: at 4 req/s the arrivals, not the steps, bound it, so both runs serve
  about the same requests per second whatever the step errors. Static batching is the exception when its
  predicted steps are too slow: its padded batches then queue up in the simulated run.
- **Medians** of TTFT, TPOT and E2EL follow the median step error; **tails** (p99) depend on a few steps (a
  garbage-collector pause, a moment of load) and on the schedule drifting, so they move most between runs.
- **The sign flips between runs.** docs/validation.md reports the same profile and workload giving a 10 % decode
  error in one run and 54 % in the next, optimistic in one and pessimistic in the other. Run this notebook twice
  and compare: what changes is mostly the machine's load, not the simulator.
- **What this validates.** The engine, the policies and the metrics are the same code on both sides, so a match
  here says the *simulator's machinery* is right and a calibrated cost model can predict a real backend. It
  does not say that the GPU roofline presets used in notebooks 1-5 are exact for your GPU: for that, calibrate
  on the GPU (`simbatch calibrate`) and validate there (`scenarios/validate_gpu.yaml`, `--device cuda`).
- **Known sources of error**, from docs/validation.md: load on a shared CPU (dominant here), padded decode
  attention (priced from summed contexts), steps outside the calibration grid (a static batch's padded prefill),
  Python's garbage collector (rare multi-millisecond outliers), and schedule drift, which compounds all of them.

## Questions to try

1. Run the validation cell twice. Which numbers stay put (throughput, prefill errors) and which move (decode
   medians, tails)? Look at the load averages printed above.
2. Add `"chunked_prefill"` and `"dynamic"` to `POLICIES` (about 10 s each). Which policy does the simulator
   predict best, and which worst? Why might a padded policy be harder to predict?
3. Raise the load: `"workload.synthetic.arrival.rate=8"`. Does the throughput error stay small once the tiny
   model, rather than the arrivals, bounds the throughput?
4. Make the contexts more uneven (`"workload.synthetic.prompt.sigma=1.5"`). Does the decode error under
   continuous batching grow with the context, as padded attention predicts?
5. Validate with two torch threads (`validate(scenario, "cpu", POLICIES, threads=2)`) against the profile
   measured with one. What happens, and why does docs/validation.md recommend one thread on a shared machine?
6. Write the full report: `from simbatch.validation import write_validation; write_validation("runs/validate",
   VALIDATION)`, then open `step_scatter.png`, `latency_cdfs.png` and `steps.csv`.
'''),
]
