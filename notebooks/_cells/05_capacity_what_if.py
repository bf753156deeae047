"""Cells of notebooks/05_capacity_what_if.ipynb (see ../_make_notebooks.py)."""

CELLS = [
("md", r'''
# 5. Capacity what-if: how many GPUs of which kind?

**What you will learn**

- How to turn a latency SLO into a **maximum sustainable arrival rate** per configuration (policy x GPU x model),
  by simulation rather than by a back-of-the-envelope formula.
- Why "requests per second per GPU" is not the same as "dollars per request": a faster GPU can be the cheaper one.
- How many replicas a **target rate** needs, and why simulating the replicas beats multiplying one GPU's rate.
- How sensitive the answer is to the SLO you promise.

The tool is simbatch's capacity search (`docs/capacity.md`): for each candidate it brackets and bisects the
workload's rate scale for the highest rate at which every SLO holds for every seed *and* the system keeps up.
'''),
("code", r'''
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from simbatch import load_scenario, run
from simbatch.capacity import (capacity_table, expand, explain_boundary, explain_sizing, find_capacity,
                               format_table, parse_slos, price_table)
from simbatch.executors import make_executor


def find_root(start: Path = Path.cwd()) -> Path:
    """The simbatch checkout this notebook lives in (the folder holding scenarios/)."""
    for folder in (start, *start.parents):
        if (folder / "scenarios" / "classroom.yaml").is_file():
            return folder
    raise FileNotFoundError("run this notebook from inside the simbatch repository (e.g. notebooks/)")


ROOT = find_root()
SCEN = ROOT / "scenarios"
pd.set_option("display.precision", 3)
'''),
("md", r'''
## The question

Chat traffic shaped like the Azure conversation trace (`scenarios/chat.yaml`, 600 requests per run to keep
this notebook fast). The promise to users: **TTFT p99 <= 1 s and TPOT p99 <= 60 ms**. The target: **10 requests
per second**. Candidates: continuous batching and chunked prefill, on an A100-80GB or an H100-SXM, serving
Llama-2-7B or Llama-3-8B. Every probe runs with two seeds (two different samples of the traffic) and holds
only if both hold; the bisection stops when the boundary is known within 10 % (the CLI's default is 5 %).
'''),
("code", r'''
chat = load_scenario(SCEN / "chat.yaml", ["workload.synthetic.num_requests=600"])
TTFT_P99_MS, TPOT_P99_MS = 1000, 60
SLO = parse_slos([f"ttft_p99_ms={TTFT_P99_MS}", f"tpot_p99_ms={TPOT_P99_MS}"])
TARGET = 10.0  # req/s
candidates = expand(chat, ["continuous", "chunked_prefill"], ["a100-80gb", "h100-sxm"], ["llama-2-7b", "llama-3-8b"], None, None)
print(len(candidates), "candidates; SLO:", SLO.describe())

executor = make_executor("process", 2)
try:
    result = find_capacity(chat, SLO, candidates, seeds=[0, 1], tolerance=0.1, target_rate=TARGET,
                           executor=executor, log=print)
finally:
    executor.close()
print(f"{len(result.probes)} simulations; the workload as given (rate scale 1) offers {result.base_rate:.2f} req/s")
'''),
("code", r'''
prices = price_table()  # indicative $/GPU-hour presets (docs/capacity.md); override e.g. price_table(["h100-sxm=2.5"])
table = capacity_table(result, prices)
print(format_table(table, with_target=True))
'''),
("md", r'''
Why does each boundary lie where it does? The search keeps the reason the first failing probe failed:
'''),
("code", r'''
for boundary in result.boundaries:
    print(explain_boundary(boundary, result.base_rate, result.gpu_names[boundary.candidate]))
print()
for sizing in result.sizing.values():
    print(explain_sizing(sizing, TARGET, result.gpu_names[sizing.group.with_replicas(1)]))
'''),
("code", r'''
label = table.policy.str.replace("chunked_prefill", "chunked") + "\n" + table.hardware + "\n" + table.model
colors = np.where(table.hardware == "h100-sxm", "#009E73", "#0072B2")
x = np.arange(len(table))
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 4.8))
ax1.bar(x, table.max_rate_per_gpu, color=colors)
ax1.set(ylabel="max req/s per GPU within the SLO", title="How fast one GPU can go")
ax2.bar(x, table.target_usd_per_hour, color=colors)
for xi, (gpus, cost) in enumerate(zip(table.target_gpus, table.target_usd_per_hour)):
    if np.isfinite(cost):
        ax2.text(xi, cost, f"{int(gpus)} GPU", ha="center", va="bottom", fontsize=8)
ax2.set(ylabel="$ per hour", title=f"What {TARGET:g} req/s costs (fewest replicas that hold, indicative prices)")
for ax in (ax1, ax2):
    ax.set_xticks(x, label, fontsize=7)
    ax.grid(axis="y", alpha=0.3)
handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ("#0072B2", "#009E73")]
ax1.legend(handles, ["A100-80GB", "H100-SXM"], fontsize=8)
fig.tight_layout()
plt.show()
'''),
("md", r'''
**Reading the results.**

- The H100 costs more per hour than the A100, but it serves far more requests per second within the SLO
  (left), so it is the cheaper way to buy a request per second (right).
- Llama-3-8B, although larger, goes further than Llama-2-7B on the same GPU: its KV cache per token is 4x
  smaller (grouped-query attention), so more requests fit at once (notebook 1).
- The sizing column (`replicas@R`) is verified by simulating that many replicas behind a round-robin router,
  not by dividing the target by one GPU's rate. Compare it with the linear-scaling guess in the lines above.

## Where the boundary comes from

Every probe of the search is kept (`result.probes`, also written to `probes.csv` by `write_capacity`). For one
candidate, the p99 latencies against the offered rate show which SLO gives way first:
'''),
("code", r'''
probes = pd.DataFrame(result.probes)
pick = probes[(probes.policy == "chunked_prefill") & (probes.hardware == "a100-80gb") & (probes.model == "llama-3-8b")
              & (probes.replicas == 1)].sort_values("rate")
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.2))
for seed, d in pick.groupby("seed"):
    ax1.plot(d.rate, d.ttft_p99_ms, "o-", label=f"seed {seed}")
    ax2.plot(d.rate, d.tpot_p99_ms, "o-", label=f"seed {seed}")
boundary = next(b for b in result.boundaries if (b.candidate.policy, b.candidate.hardware, b.candidate.model)
                == ("chunked_prefill", "a100-80gb", "llama-3-8b"))
ax1.axhline(TTFT_P99_MS, color="black", linestyle=":", label=f"SLO: {TTFT_P99_MS} ms")
ax2.axhline(TPOT_P99_MS, color="black", linestyle=":", label=f"SLO: {TPOT_P99_MS} ms")
for ax in (ax1, ax2):
    ax.axvline(boundary.lo * result.base_rate, color="#D55E00", linestyle="--", label="max rate found")
ax1.set(yscale="log", ylabel="TTFT p99 (ms)", title="chunked prefill, A100, Llama-3-8B: TTFT")
ax2.set(ylabel="TPOT p99 (ms)", title="... and TPOT")
for ax in (ax1, ax2):
    ax.set_xlabel("rate probed (req/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
'''),
("md", r'''
## Why not a cheaper GPU?

The L4 costs a fraction of an A100 per hour. But a decode step of a 7B model in fp16 reads its 13.5 GB of
weights every time, and the L4 moves 300 GB/s. One request alone, on an otherwise idle L4:
'''),
("code", r'''
alone = run(load_scenario(SCEN / "chat.yaml", ["workload.synthetic.num_requests=20", "workload.synthetic.arrival.rate=0.05",
                                               "hardware=l4", "policy.kind=continuous"]))
print(f"L4, Llama-2-7B, 20 requests arriving 20 s apart: TPOT median {alone.summary['tpot_ms']['median']:.0f} ms, "
      f"p99 {alone.summary['tpot_ms']['p99']:.0f} ms (the SLO asks for <= 60 ms p99)")
'''),
("md", r'''
No arrival rate, however low, meets a 60 ms TPOT on that card with this model in fp16: capacity planning
starts from the latency floor of the hardware. (Quantised weights, which simbatch does not model yet, would change this.)

## How much does the SLO cost?

The same search for one configuration (chunked prefill, Llama-3-8B, one A100) under looser and tighter
per-token targets. Use the slider if `ipywidgets` is installed; headless, the cell runs the default list.
'''),
("code", r'''
def max_rate_for(tpot_targets=(40, 60, 100), ttft_ms: int = 1000):
    one = expand(chat, ["chunked_prefill"], ["a100-80gb"], ["llama-3-8b"], None, None)
    rows = []
    for tpot in tpot_targets:
        res = find_capacity(chat, parse_slos([f"ttft_p99_ms={ttft_ms}", f"tpot_p99_ms={tpot}"]), one,
                            seeds=[0], tolerance=0.1)
        b = res.boundaries[0]
        rows.append({"TPOT p99 target (ms)": tpot,
                     "max req/s": b.lo * res.base_rate if b.lo is not None else np.nan})
    d = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(d["TPOT p99 target (ms)"], d["max req/s"], "o-", color="#009E73", label="chunked prefill, A100, Llama-3-8B")
    ax.set(xlabel="TPOT p99 target (ms)", ylabel="max req/s within the SLO", ylim=(0, None),
           title=f"A looser per-token target buys throughput (TTFT p99 <= {ttft_ms} ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    plt.show()
    return d


try:
    import ipywidgets as widgets
    widgets.interact(lambda tpot: display(max_rate_for((tpot,))),
                     tpot=widgets.IntSlider(value=60, min=30, max=150, step=10, continuous_update=False))
except ImportError:  # headless or without ipywidgets
    display(max_rate_for())
'''),
("md", r'''
The maximum rate grows as the TPOT target loosens, until the TTFT target becomes the one that fails first:
from there on, a looser TPOT buys nothing. Every SLO has a binding constraint; find it before you negotiate.
'''),
("md", r'''
## Coming later: disaggregation and prefix caching

Two more what-ifs belong in this notebook and will be added when simbatch supports them:

- **Disaggregated serving** (prefill and decode on separate GPU pools, as in Splitwise and DistServe): how many
  prefill GPUs per decode GPU, and whether splitting them beats chunked prefill for a given SLO.
- **Prefix caching** (reusing the KV cache of shared prompt prefixes, e.g. a common system prompt or a
  conversation's history, as in the Mooncake trace): how much prefill it saves, and how many fewer GPUs that means.

simbatch does not model either today (replicas are identical and requests share no KV), so this notebook
makes no claim about them.

## Questions to try

1. Add `"h200"` to the hardware list. Does its larger memory or its higher bandwidth matter more for this workload?
2. Tighten the SLO to `ttft_p99_ms=500`. Which candidates drop out, and which SLO now sets each boundary?
3. Try tensor parallelism: `expand(chat, ["chunked_prefill"], ["a100-80gb"], ["llama-2-13b"], [1, 2], None)`. Per GPU, is a TP2 replica of Llama-2-13B worth more or less than a TP1 one?
4. Override the prices (`price_table(["h100-sxm=2.2", "a100-80gb=1.2"])`). At what H100 price does the A100 become the cheaper option?
5. Run with three seeds instead of two. Do the boundaries move? What does that tell you about trusting a capacity number from one sample of traffic?
'''),
]
