"""Cells of notebooks/04_throughput_vs_latency.ipynb (see ../_make_notebooks.py)."""

CELLS = [
("md", r'''
# 4. Throughput vs latency: choosing the batch cap

**What you will learn**

- How the **batch cap** (`max_num_seqs`: the most requests running at once) trades throughput for latency.
- Where the **knee** of the throughput-latency curve is, and why past it a bigger cap buys little throughput for a lot of latency.
- How to pick the cap from an **SLO** (a latency target per request) and the expected **arrival rate**, with a parameter sweep.
- What the usual rules of thumb (interactive chat 8-32, API traffic 32-128, offline batch jobs 256-1024)
  look like for Llama-2-7B on one A100, and when the KV cache makes a large cap meaningless.

All the runs here go through simbatch's sweep API (`docs/sweeps.md`): a grid of `--set`-style values over one
scenario, run in parallel, returned as one tidy table with a row per run.
'''),
("code", r'''
import atexit
import shutil
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from simbatch import load_scenario, run, scenarios_dir
from simbatch.runs.executors import make_executor
from simbatch.sweep import parse_grid_args, run_sweep


SCEN = scenarios_dir()  # the bundled scenarios/ of this checkout
ROOT = SCEN.parent
WORK = Path(tempfile.mkdtemp(prefix="simbatch-nb04-"))  # sweep files go here, not into the repository...
atexit.register(shutil.rmtree, WORK, ignore_errors=True)  # ...and go away with the kernel
CAPS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def sweep(scenario, grid: list[str], name: str) -> pd.DataFrame:
    """Run a grid over `scenario` on a local process pool; one row per run."""
    executor = make_executor("process", 2)
    try:
        return run_sweep(scenario, parse_grid_args(grid), WORK / name, executor)
    finally:
        executor.close()


def cap_axis(ax):
    ax.set_xscale("log", base=2)
    ax.set_xticks(CAPS, [str(c) for c in CAPS])
    ax.set_xlabel("batch cap max_num_seqs (requests)")
    ax.grid(True, which="both", alpha=0.3)


pd.set_option("display.precision", 3)
print("sweep files in", WORK)
'''),
("md", r'''
## 1. The pure trade-off: an offline job

When every request is already queued (`scenarios/offline.yaml`: 600 chat-shaped requests at t = 0), the cap is
the only thing that sets the batch. Sweep it from 1 to 1,024 under continuous batching, for Llama-2-7B and for
Llama-3-8B (whose KV cache per token is 4x smaller; see notebook 1).
'''),
("code", r'''
offline = load_scenario(SCEN / "offline.yaml", ["workload.synthetic.num_requests=600"])
off = sweep(offline, ["model=llama-2-7b,llama-3-8b", "policy.max_num_seqs=" + ",".join(map(str, CAPS))], "offline")
off[["model", "policy.max_num_seqs", "output_throughput", "tpot_ms.median", "tpot_ms.p99", "e2el_ms.p99",
     "kv_peak_frac", "preemptions"]]
'''),
("code", r'''
MODEL_COLORS = {"llama-2-7b": "#D55E00", "llama-3-8b": "#0072B2"}
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
for model, d in off.groupby("model"):
    d = d.sort_values("policy.max_num_seqs")
    ax1.plot(d["tpot_ms.median"], d["output_throughput"], "-o", color=MODEL_COLORS[model], label=model)
    previous = None
    for cap, x, y in zip(d["policy.max_num_seqs"], d["tpot_ms.median"], d["output_throughput"]):
        if cap in (1, 8, 32, 128, 512) and (x, y) != previous:  # same point as a smaller cap: not labelled again
            ax1.annotate(f"cap {cap}", (x, y), textcoords="offset points", fontsize=8,
                         xytext=(6, -12) if model == "llama-2-7b" else (-10, 8))
        previous = (x, y)
    ax2.plot(d["policy.max_num_seqs"], 100 * d["kv_peak_frac"], "-o", color=MODEL_COLORS[model], label=model)
ax1.set(xlabel="time per output token, median (ms)", ylabel="output throughput (tokens/s)",
        title="Offline job: throughput vs latency as the cap grows")
ax1.grid(alpha=0.3)
ax1.legend()
cap_axis(ax2)
ax2.set(ylabel="peak KV cache use (%)", title="Where the KV cache, not the cap, sets the batch", ylim=(0, 105))
ax2.legend()
fig.tight_layout()
plt.show()
'''),
("md", r'''
Each point is one cap. Going right along a curve, every step up in cap slows each request's tokens down a
little (bigger decode steps) and raises the throughput a lot, until the **knee**: past it, the throughput
hardly grows and only the latency does. We can locate the knee as the smallest cap that reaches 90 % of the
best throughput:
'''),
("code", r'''
def knee(d: pd.DataFrame, metric: str = "output_throughput", share: float = 0.9) -> int:
    """The smallest cap reaching `share` of the best value of `metric`."""
    d = d.sort_values("policy.max_num_seqs")
    return int(d.loc[d[metric] >= share * d[metric].max(), "policy.max_num_seqs"].iloc[0])


for model, d in off.groupby("model"):
    full = d[d["kv_peak_frac"] > 0.95]["policy.max_num_seqs"]
    print(f"{model}: knee at cap {knee(d)}; best {d.output_throughput.max():.0f} tok/s; "
          f"KV cache full from cap {int(full.min()) if len(full) else 'never'}")
'''),
("md", r'''
With Llama-2-7B the KV cache fills up at a cap of about a hundred: any larger cap is the same run (the curve
stops moving). Llama-3-8B, with four times more room per token, keeps gaining up to a few hundred.
**The offline rule of thumb (256-1024) only makes sense when the KV cache can hold that many requests.**

## 2. Open traffic: the cap, the arrival rate and the SLO

Interactive traffic does not wait in a queue of 600: requests arrive at some rate, and a cap larger than the
number of requests actually in the system changes nothing. Now sweep the cap *and* the load on the chat
workload (`scenarios/chat.yaml`, 600 requests, lengths fitted to the Azure conversation trace; `rate_scale`
multiplies its 2.5 req/s). SLO from the scenario: TTFT <= 500 ms and TPOT <= 50 ms per request.
'''),
("code", r'''
chat = load_scenario(SCEN / "chat.yaml", ["workload.synthetic.num_requests=600", "policy.kind=continuous"])
OPEN_CAPS = CAPS[2:-2]  # 4 ... 256: below 4 the queue only grows, above 256 nothing changes at these rates
RATES = [0.5, 1, 1.5, 2]
open_loop = sweep(chat, ["workload.rate_scale=" + ",".join(map(str, RATES)),
                         "policy.max_num_seqs=" + ",".join(map(str, OPEN_CAPS))], "chat")
print(len(open_loop), "runs; SLO:", chat.slo.as_dict())
open_loop[["workload.rate_scale", "policy.max_num_seqs", "request_throughput", "ttft_ms.p99", "tpot_ms.p99",
           "slo_attainment", "goodput"]].head(9)
'''),
("code", r'''
RATE_COLORS = dict(zip(RATES, ["#56B4E9", "#0072B2", "#E69F00", "#D55E00"]))
base_rate = 2.5
fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
for rate, d in open_loop.groupby("workload.rate_scale"):
    d = d.sort_values("policy.max_num_seqs")
    label = f"{rate * base_rate:g} req/s"
    axes[0].plot(d["policy.max_num_seqs"], d["ttft_ms.p99"], "-o", color=RATE_COLORS[rate], label=label)
    axes[1].plot(d["policy.max_num_seqs"], d["tpot_ms.p99"], "-o", color=RATE_COLORS[rate], label=label)
    axes[2].plot(d["policy.max_num_seqs"], d["goodput"], "-o", color=RATE_COLORS[rate], label=label)
axes[0].axhline(chat.slo.ttft_ms, color="black", linestyle=":", label="SLO")
axes[1].axhline(chat.slo.tpot_ms, color="black", linestyle=":", label="SLO")
axes[0].set(yscale="log", ylabel="TTFT p99 (ms)", title="Time to first token")
axes[1].set(ylabel="TPOT p99 (ms)", title="Time per output token")
axes[2].set(ylabel="goodput (req/s meeting the SLO)", title="Goodput")
for ax in axes:
    cap_axis(ax)
    ax.legend(fontsize=8, title="arrival rate")
fig.suptitle("Chat workload, continuous batching, Llama-2-7B on A100-80GB", fontsize=10)
fig.tight_layout()
plt.show()
'''),
("md", r'''
- A **small cap** starves the server: requests queue, TTFT grows without bound, goodput collapses.
- A **larger cap** admits more requests at once: the decode batch and each step get bigger, so TPOT rises
  (and with prefill-first scheduling, more prompts interrupt the decodes). At 5 req/s TPOT p99 crosses the SLO.
- Once the cap exceeds the number of requests ever in the system at that rate, it stops mattering: the curves go flat.
- The cap to choose is where the SLO holds for the most requests: the peak of goodput, and on a plateau its
  smallest cap (it keeps TPOT bounded when a burst comes that this sample did not contain). It moves with the rate:
'''),
("code", r'''
def choose(d: pd.DataFrame, metric: str = "goodput") -> pd.Series:
    """The run whose cap gives the highest `metric` (the smallest cap among equals)."""
    d = d.sort_values("policy.max_num_seqs")
    return d.loc[d[metric].idxmax()]


choice = pd.DataFrame([{"arrival rate (req/s)": rate * base_rate, "best cap": int(best["policy.max_num_seqs"]),
                        "goodput (req/s)": best["goodput"], "SLO attained (%)": 100 * best["slo_attainment"],
                        "TTFT p99 (ms)": best["ttft_ms.p99"], "TPOT p99 (ms)": best["tpot_ms.p99"]}
                       for rate, d in open_loop.groupby("workload.rate_scale") for best in [choose(d)]])
choice.round(2)
'''),
("md", r'''
Pick a rate with the slider (if `ipywidgets` is installed; headless, the cell runs once at 2.5 req/s) to see
the cap's effect at that load, from a fresh sweep:
'''),
("code", r'''
def at_rate(rate: float = 2.5):
    scale = rate / base_rate
    d = sweep(chat, [f"workload.rate_scale={scale:g}", "policy.max_num_seqs=4,8,16,32,64,128"], f"chat-{scale:g}")
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.plot(d["policy.max_num_seqs"], 100 * d["slo_attainment"], "-o", color="#0072B2", label="SLO attained")
    ax.plot(d["policy.max_num_seqs"], 100 * d["request_throughput"] / rate, "--s", color="#009E73",
            label="throughput / arrival rate")
    cap_axis(ax)
    ax.set(ylabel="%", ylim=(0, 105), title=f"{rate:g} req/s: best cap {int(choose(d)['policy.max_num_seqs'])}")
    ax.legend(fontsize=8)
    plt.show()


try:
    import ipywidgets as widgets
    widgets.interact(at_rate, rate=widgets.FloatSlider(value=2.5, min=0.5, max=6, step=0.5, continuous_update=False))
except ImportError:  # headless or without ipywidgets
    at_rate(2.5)
'''),
("md", r'''
## 3. The rules of thumb, on this model

Practitioners often start from: **interactive chat 8-32** running requests, **API traffic 32-128**, **offline
batch jobs 256-1024**. Here is where those bands fall on our three workloads (Llama-2-7B on one A100):

- *chat*: the chat workload at 2.5 req/s with its SLO (TTFT <= 500 ms, TPOT <= 50 ms);
- *API*: the same request shapes at twice the rate (5 req/s) with a looser, throughput-minded SLO
  (TTFT <= 2 s, TPOT <= 100 ms), as for a programmatic API;
- *offline*: the offline job from part 1, where only throughput counts.
'''),
("code", r'''
api = load_scenario(SCEN / "chat.yaml", ["workload.synthetic.num_requests=600", "policy.kind=continuous",
                                         "workload.rate_scale=2", "slo.ttft_ms=2000", "slo.tpot_ms=100"])
api_sweep = sweep(api, ["policy.max_num_seqs=" + ",".join(map(str, OPEN_CAPS))], "api")
panels = [
    ("chat, 2.5 req/s", open_loop[open_loop["workload.rate_scale"] == 1], "goodput", "goodput (req/s)", (8, 32)),
    ("API, 5 req/s, loose SLO", api_sweep, "goodput", "goodput (req/s)", (32, 128)),
    ("offline, llama-2-7b", off[off.model == "llama-2-7b"], "output_throughput", "output tokens/s", (256, 1024)),
]
fig, axes = plt.subplots(1, 3, figsize=(16, 4.3))
for ax, (title, d, metric, ylabel, band) in zip(axes, panels):
    d = d.sort_values("policy.max_num_seqs")
    ax.axvspan(*band, color="#F0E442", alpha=0.4, label=f"rule of thumb {band[0]}-{band[1]}")
    ax.plot(d["policy.max_num_seqs"], d[metric], "-o", color="#0072B2", label="simulated")
    best = choose(d, metric)
    ax.axvline(best["policy.max_num_seqs"], color="#D55E00", linestyle="--",
               label=f"best here: cap {int(best['policy.max_num_seqs'])}")
    cap_axis(ax)
    ax.set(ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
fig.suptitle("Rules of thumb vs simulation: Llama-2-7B on one A100-80GB", fontsize=10)
fig.tight_layout()
plt.show()
for (title, d, metric, _, band) in panels:
    best = int(choose(d, metric)["policy.max_num_seqs"])
    where = "inside" if band[0] <= best <= band[1] else ("below" if best < band[0] else "above")
    print(f"{title}: best cap {best}, {where} the rule of thumb {band[0]}-{band[1]}")
'''),
("md", r'''
Read the three panels against the yellow bands. On this model and GPU the chat and API optima fall inside
their bands, because the SLO and the arrival rate put them there (change either and they move; see part 2).
The offline band is out of reach: the KV cache holds only about a hundred of these requests, so every cap
from 128 up is the same run. With Llama-3-8B (part 1) or on an H200 the offline optimum moves up into the band.
The rules of thumb are starting points; a sweep like this one is the answer for *your* model, GPU and traffic.

## Questions to try

1. Add `policy.kind=chunked_prefill` to the chat sweep (as a grid axis: `policy.kind=continuous,chunked_prefill`). Does chunked prefill change the best cap? Why might it allow a larger one?
2. Halve the SLO's TPOT target (`slo.tpot_ms=25`). Which caps still work at 2.5 req/s?
3. In part 1, replace the A100 by an H200 (`hardware=h200` as a grid value). Where is the knee now, and is the KV cache still the limit?
4. The knee was defined at 90 % of the best throughput. What happens to your choice with 80 % or 95 %, and which would you defend to an operator?
5. Why does a cap of 1 give the lowest TPOT of all, and why is it still a terrible choice?
'''),
]
