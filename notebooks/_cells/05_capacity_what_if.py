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
- Whether splitting the same GPUs into a **prefill pool and a decode pool** (disaggregation) serves more
  goodput per GPU than colocated batching, and why the split ratio and the link matter.
- What a **prefix cache** (reusing the KV of shared prompt prefixes) buys on real multi-turn traffic.

The tool is simbatch's capacity search (`docs/capacity.md`): for each candidate it brackets and bisects the
workload's rate scale for the highest rate at which every SLO holds for every seed *and* the system keeps up.
'''),
("code", r'''
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import yaml
from IPython.display import display

from simbatch import load_scenario, run, scenarios_dir
from simbatch.capacity import (capacity_table, expand, explain_boundary, explain_sizing, find_capacity,
                               format_table, parse_slos, price_table)
from simbatch.runs.executors import make_executor
from simbatch.report.palette import POLICY_COLOURS  # the colours of the CLI's figures and reports too
from simbatch.report.figures_common import plain_ticks  # log axes labelled 200, 1,000, 20k


SCEN = scenarios_dir()  # the bundled scenarios/ of this checkout
ROOT = SCEN.parent


def run_all(scenarios):
    """Run the scenarios on two worker processes; their outputs in the same order."""
    executor = make_executor("process", 2)
    try:
        return executor.map(run, scenarios)
    finally:
        executor.close()


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
# Each panel sorted by the value it plots: fastest first on the left, cheapest first on the right.
fast = table.sort_values("max_rate_per_gpu", ascending=False, kind="stable")
cheap = table.sort_values("target_usd_per_hour", kind="stable")
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 4.8))
for ax, rows, column in ((ax1, fast, "max_rate_per_gpu"), (ax2, cheap, "target_usd_per_hour")):
    x = np.arange(len(rows))
    ax.bar(x, rows[column], color=np.where(rows.hardware == "h100-sxm", "#009E73", "#0072B2"))
    label = rows.policy.str.replace("chunked_prefill", "chunked") + "\n" + rows.hardware + "\n" + rows.model
    ax.set_xticks(x, label, fontsize=7)
    ax.grid(axis="y", alpha=0.3)
for xi, (gpus, cost) in enumerate(zip(cheap.target_gpus, cheap.target_usd_per_hour)):
    if np.isfinite(cost):
        ax2.text(xi, cost, f"{int(gpus)} GPU", ha="center", va="bottom", fontsize=8)
ax1.set(ylabel="max req/s per GPU within the SLO", title="How fast one GPU can go")
ax2.set(ylabel="$ per hour", title=f"What {TARGET:g} req/s costs (fewest replicas that hold, indicative prices)")
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
plain_ticks(ax1)
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
    ax.plot(d["TPOT p99 target (ms)"], d["max req/s"], "o-", color=POLICY_COLOURS["chunked_prefill"], label="chunked prefill, A100, Llama-3-8B")
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
## Disaggregation: one pool or two?

So far every GPU ran the whole request: its prefill and all its decode steps. **Disaggregated serving**
(DistServe, Splitwise, NVIDIA Dynamo) splits the GPUs into a *prefill pool* and a *decode pool*: a prefill GPU
computes the prompt and the first token, then sends the prompt's KV cache over a link to a decode GPU, which
generates the rest. Decodes are then never stalled by someone else's long prompt, at the price of a KV transfer
and of pools that must be sized for the traffic (docs/policies.md, "Prefill/decode disaggregation").

`scenarios/disaggregated.yaml`: chat traffic (Azure-conversation lengths) on **four A100-80GB GPUs** serving
Llama-2-7B, SLO **TTFT <= 500 ms and TPOT <= 25 ms**. With the GPU count fixed at four, we compare colocated
continuous batching and chunked prefill (four replicas behind a round-robin router) with three splits of the
same four GPUs (prefill + decode = 1+3, 2+2, 3+1, NVLink between them), at rising arrival rates.
Goodput per GPU (requests per second that met the SLO, divided by four) is the fair score.
'''),
("code", r'''
DISAGG = ["workload.synthetic.num_requests=500"]
LAYOUTS = {  # name -> overrides of scenarios/disaggregated.yaml; all use four A100s
    "colocated, continuous": ["disaggregation.enabled=false"],
    "colocated, chunked prefill": ["disaggregation.enabled=false", "policy.kind=chunked_prefill",
                                   "policy.max_num_seqs=256", "policy.chunk_size=512"],
    "split 1 prefill + 3 decode": ["disaggregation.prefill.replicas=1", "disaggregation.decode.replicas=3"],
    "split 2 prefill + 2 decode": ["disaggregation.prefill.replicas=2", "disaggregation.decode.replicas=2"],
    "split 3 prefill + 1 decode": ["disaggregation.prefill.replicas=3", "disaggregation.decode.replicas=1"],
}
RATES = [4, 8, 12, 16, 20]  # req/s offered to the four GPUs
grid = [(name, rate) for name in LAYOUTS for rate in RATES]
scenarios = [load_scenario(SCEN / "disaggregated.yaml", DISAGG + [f"workload.synthetic.arrival.rate={rate}"] + LAYOUTS[name])
             for name, rate in grid]
outs = run_all(scenarios)

rows = []
for (name, rate), out in zip(grid, outs):
    s = out.summary
    gpus = s["hardware"]["gpus"]
    rows.append({"layout": name, "rate (req/s)": rate, "GPUs": gpus, "goodput/GPU": s["goodput"] / gpus,
                 "SLO %": 100 * s["slo_attainment"], "TTFT p99 (ms)": s["ttft_ms"]["p99"],
                 "TPOT p99 (ms)": s["tpot_ms"]["p99"], "ITL p99 (ms)": s["itl_ms"]["p99"]})
dis = pd.DataFrame(rows)
display(dis.pivot(index="layout", columns="rate (req/s)", values="goodput/GPU").loc[list(LAYOUTS)]
        .style.format("{:.2f}").set_caption("goodput per GPU (req/s) at each offered rate, four A100s"))
'''),
("code", r'''
styles = {"colocated, continuous": (POLICY_COLOURS["continuous"], "o-"),
          "colocated, chunked prefill": (POLICY_COLOURS["chunked_prefill"], "o-"),
          "split 1 prefill + 3 decode": ("#D55E00", "s--"), "split 2 prefill + 2 decode": ("#CC79A7", "s--"),
          "split 3 prefill + 1 decode": ("#E69F00", "s--")}
fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
panels = [("goodput/GPU", "goodput per GPU (req/s within the SLO)", "Goodput per GPU, four A100s", None),
          ("TTFT p99 (ms)", "TTFT p99 (ms)", "Time to first token", 500),
          ("ITL p99 (ms)", "inter-token latency p99 (ms)", "Decode stalls: inter-token latency", None)]
for ax, (col, ylabel, title, limit) in zip(axes, panels):
    for name, d in dis.groupby("layout", sort=False):
        color, style = styles[name]
        ax.plot(d["rate (req/s)"], d[col], style, color=color, label=name)
    if limit:
        ax.axhline(limit, color="black", linestyle=":", label=f"SLO: {limit} ms")
    if col != "goodput/GPU":
        ax.set_yscale("log")
        plain_ticks(ax)
    ax.set(xlabel="offered rate (req/s)", ylabel=ylabel, title=title)
    ax.grid(True, which="both", alpha=0.3)
axes[0].legend(fontsize=8)
axes[1].legend(fontsize=8)
fig.tight_layout()
plt.show()
'''),
("md", r'''
**Reading the results.**

- **The split ratio matters more than the decision to split.** This chat traffic has ~760-token prompts and
  ~150-token outputs: most of the GPU time goes to decode steps. Three prefill GPUs and one decode GPU starve the
  decode side (TPOT, not TTFT, fails), one prefill GPU for three decode GPUs queues the prompts (TTFT fails).
- **Disaggregation removes decode stalls** (right): in a decode pool no step carries a prompt, so the p99
  inter-token latency stays near the decode step time, where colocated continuous batching stalls every
  running request for each arriving prompt. Chunked prefill gets much of the same benefit without a transfer.
- At this SLO and on these four GPUs, colocated chunked prefill serves the most goodput per GPU; the best split
  (2+2) matches it at low rates and falls behind as TTFT on its two prefill GPUs grows. The disaggregation papers report wins when TTFT and TPOT targets are both
  tight and the pools can be sized (and scaled) separately: try the questions at the end.

### Does the link matter?

The prefill GPU keeps a request's KV blocks until the transfer ends, and each prefill replica sends one
request's KV at a time. 1,000 Llama-2-7B tokens are about 0.5 GB of KV. The 2+2 split at 12 req/s, over
NVLink, a PCIe-class link (25 GB/s, also InfiniBand HDR's figure) and two Ethernet links:
'''),
("code", r'''
LINKS = {"NVLink 3 (300 GB/s)": "nvlink", "PCIe 4 / IB HDR (25 GB/s)": "pcie",
         "100 Gb Ethernet (12.5 GB/s)": "{bandwidth_gbps: 100, latency_us: 10}",
         "25 Gb Ethernet (3.1 GB/s)": "{bandwidth_gbps: 25, latency_us: 10}"}
rows = []
for name, link in LINKS.items():
    s = run(load_scenario(SCEN / "disaggregated.yaml", DISAGG + ["workload.synthetic.arrival.rate=12",
                                                                 f"disaggregation.link={link}"])).summary
    d = s["disaggregation"]
    rows.append({"link": name, "transfer p50 (ms)": d["transfer_ms"]["median"], "transfer p99 (ms)": d["transfer_ms"]["p99"],
                 "wait for link p99 (ms)": d["transfer_wait_ms"]["p99"], "TPOT p99 (ms)": s["tpot_ms"]["p99"],
                 "E2EL p50 (ms)": s["e2el_ms"]["median"], "goodput/GPU": s["goodput"] / d["gpus"]})
display(pd.DataFrame(rows).set_index("link").style.format("{:.1f}").format("{:.2f}", subset=["goodput/GPU"])
        .set_caption("2 prefill + 2 decode A100s, 12 req/s: the KV transfer over different links"))
'''),
("md", r'''
TTFT does not see the link (the first token leaves the prefill GPU), but every later token waits for the
transfer, so it lands in TPOT and end-to-end latency. Over NVLink the transfer is a millisecond or two; over a
25 Gb/s network a long prompt's KV takes longer than its prefill, transfers queue behind each other on the
prefill GPU's link, and the SLO collapses. Disaggregation across machines needs a fast network.

## Prefix caching: how much does reusing shared prefixes buy?

In a multi-turn chat, each turn's prompt starts with the previous turns; many apps also put the same system
prompt in front of every request. With **prefix caching** (vLLM's automatic prefix caching, SGLang's
RadixAttention) the KV blocks of a prompt prefix already in the cache are reused, so only the rest is
prefilled: less compute per request, shorter TTFT (docs/policies.md, "Prefix caching").

The Mooncake (Kimi) conversation trace records, for each request, the hashes of its 512-token prompt blocks,
so it says exactly which prefixes repeat. `scenarios/prefix_cache.yaml` replays it on Llama-3.1-70B over one
8x H200 node (TP8), SLO **TTFT <= 10 s and TPOT <= 150 ms** (its prompts average 12k tokens). We use the first
5 minutes of the trace, scaled to several arrival rates, with and without the cache. If the trace is not beside
the repository (`../shared/traces/`), a hand-built stand-in takes its place: multi-turn conversations sharing a
two-block system prompt, as inline requests with `hash_ids`.
'''),
("code", r'''
TRACE = ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"


def shared_prefix_requests(num_conversations: int = 80, seed: int = 0, block: int = 512) -> list[dict]:
    """Multi-turn conversations that all start with the same 2-block system prompt, as inline requests.

    Each turn's prompt is the conversation so far (earlier prompts and outputs) plus a new message.
    ``hash_ids`` name its 512-token blocks as Mooncake's do: equal ids, equal content. Full blocks of the
    history keep their ids; the partly filled last block is new content, so it gets a fresh id.
    """
    rng = np.random.default_rng(seed)
    system = [0, 1]
    requests, starts = [], np.cumsum(rng.exponential(2.5, num_conversations))
    for c in range(num_conversations):
        context, t = len(system) * block, starts[c]
        for _ in range(rng.integers(1, 7)):
            prompt = context + int(rng.lognormal(np.log(1500), 0.8))
            output = int(np.clip(rng.lognormal(np.log(300), 0.6), 8, 1500))
            ids = system + [1000 * (c + 1) + j for j in range(len(system), prompt // block)]
            if prompt % block:
                ids.append(10**7 + len(requests))
            requests.append({"arrival_s": round(float(t), 3), "prompt": prompt, "output": output, "hash_ids": ids})
            context, t = prompt + output, t + rng.exponential(40)  # the user reads, then types the next turn
    return sorted(requests, key=lambda r: r["arrival_s"])


if TRACE.is_file():
    PC_PATH, PC_BASE, SCALES = SCEN / "prefix_cache.yaml", ["workload.window=[0,300]"], [0.2, 0.3, 0.4, 0.5, 0.6, 0.8]
    print(f"replaying the Mooncake conversation trace ({TRACE.name}), first 300 s")
else:
    spec = yaml.safe_load((SCEN / "prefix_cache.yaml").read_text())  # the same model, GPUs, policy and SLO
    spec["workload"] = {"requests": shared_prefix_requests(), "max_total_tokens": 32768}
    PC_PATH = Path(tempfile.mkdtemp(prefix="simbatch-nb05-")) / "shared_prefix.yaml"
    PC_PATH.write_text(yaml.safe_dump(spec))
    PC_BASE, SCALES = [], [1, 2, 3, 4, 5, 6]
    print(f"{TRACE} not found: using {len(spec['workload']['requests'])} hand-built multi-turn requests instead")

grid = [(cache, k) for cache in (True, False) for k in SCALES]
scenarios = [load_scenario(PC_PATH, PC_BASE + [f"workload.rate_scale={k}", f"kv_cache.prefix_caching={str(cache).lower()}"])
             for cache, k in grid]
outs = run_all(scenarios)

rows = []
for (cache, k), out in zip(grid, outs):
    s, arrivals = out.summary, out.requests.arrival_s
    pc = s["prefix_cache"] or {}
    rows.append({"cache": "on" if cache else "off", "rate scale": k,
                 "offered (req/s)": (len(arrivals) - 1) / (arrivals.max() - arrivals.min()),
                 "served (req/s)": s["request_throughput"], "goodput (req/s)": s["goodput"],
                 "SLO %": 100 * s["slo_attainment"], "TTFT p50 (ms)": s["ttft_ms"]["median"],
                 "TTFT p99 (ms)": s["ttft_ms"]["p99"], "TPOT p99 (ms)": s["tpot_ms"]["p99"],
                 "token hit %": 100 * pc["token_hit_rate"] if pc else np.nan,
                 "tokens saved": pc.get("tokens_saved", np.nan)})
pcache = pd.DataFrame(rows)
display(pcache.style.format(precision=2).format("{:,.0f}", subset=["TTFT p50 (ms)", "TTFT p99 (ms)", "tokens saved"],
                                                na_rep="-"))
'''),
("code", r'''
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4.5))
for cache, color in (("on", "#009E73"), ("off", "#D55E00")):
    d = pcache[pcache.cache == cache]
    ax1.plot(d["offered (req/s)"], d["goodput (req/s)"], "o-", color=color, label=f"goodput, cache {cache}")
    ax1.plot(d["offered (req/s)"], d["served (req/s)"], "x:", color=color, label=f"served, cache {cache}")
    ax2.plot(d["offered (req/s)"], d["TTFT p50 (ms)"], "o-", color=color, label=f"TTFT p50, cache {cache}")
    ax2.plot(d["offered (req/s)"], d["TTFT p99 (ms)"], "s--", color=color, label=f"TTFT p99, cache {cache}")
ax1.plot(pcache["offered (req/s)"], pcache["offered (req/s)"], color="grey", lw=0.8, label="y = offered")
ax2.axhline(10_000, color="black", linestyle=":", label="SLO: 10 s")
ax1.set(xlabel="offered rate (req/s)", ylabel="req/s", title="One 8x H200 node, Llama-3.1-70B: served and goodput")
ax2.set(xlabel="offered rate (req/s)", ylabel="time to first token (ms)", yscale="log",
        title="TTFT with and without the prefix cache")
plain_ticks(ax2)
for ax in (ax1, ax2):
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

best = {c: pcache[(pcache.cache == c) & (pcache["SLO %"] >= 95)]["offered (req/s)"].max() for c in ("on", "off")}
sat = {c: pcache[pcache.cache == c]["served (req/s)"].max() for c in ("on", "off")}
print(f"highest rate probed with >= 95 % of requests within the SLO: {best['on']:.2f} req/s with the cache, "
      f"{best['off']:.2f} without")
print(f"most the node served at any load: {sat['on']:.2f} req/s with the cache, {sat['off']:.2f} without "
      f"({100 * (sat['on'] / sat['off'] - 1):+.0f} %)")
'''),
("md", r'''
**Reading the results.**

- The hit rate does not depend on the load: it is a property of the traffic (how much of each prompt was seen
  before) and of how much KV memory keeps it. On the Mooncake trace about a sixth of the prompt tokens come from
  the cache (the hand-built stand-in's conversations share far more); the node is prefill-bound (long prompts),
  so every cached token is prefill compute it no longer does.
- At low load the cache shortens TTFT (less to prefill); near saturation it moves the knee: the same node serves
  more requests per second before the queue (and TTFT) takes off. More rate per node means fewer nodes for a
  target rate, as in the first half of this notebook.
- Limits of this what-if (docs/policies.md): each replica has its own cache and none of the routers sees which
  replica holds a conversation's prefix, so with several replicas behind round-robin a conversation's turns
  land on different caches and the hit rate drops. Much of Mooncake's multi-turn reuse lies farther back than
  one node's KV memory reaches; Mooncake itself keeps a KV pool in CPU memory for that, which simbatch does not model.

## Questions to try

1. Add `"h200"` to the hardware list. Does its larger memory or its higher bandwidth matter more for this workload?
2. Tighten the SLO to `ttft_p99_ms=500`. Which candidates drop out, and which SLO now sets each boundary?
3. Try tensor parallelism: `expand(chat, ["chunked_prefill"], ["a100-80gb"], ["llama-2-13b"], [1, 2], None)`. Per GPU, is a TP2 replica of Llama-2-13B worth more or less than a TP1 one?
4. Override the prices (`price_table(["h100-sxm=2.2", "a100-80gb=1.2"])`). At what H100 price does the A100 become the cheaper option?
5. Run with three seeds instead of two. Do the boundaries move? What does that tell you about trusting a capacity number from one sample of traffic?
6. Disaggregation: tighten the SLO (`slo.tpot_ms=20`) or lengthen the prompts (`workload.synthetic.prompt.median=3000`). Does a split now beat colocated chunked prefill per GPU? Which split?
7. Give the decode pool chunked prefill (`disaggregation.decode.policy={kind: chunked_prefill, chunk_size: 512}`) or the prefill pool a faster GPU (`disaggregation.prefill.hardware=h100-sxm`). What moves, TTFT or TPOT?
8. Prefix caching with two nodes: add `cluster.replicas=2` (and scale the rate up). What happens to the token hit rate under `round_robin`, and why?
9. Set `policy.queue_order=lpm` (longest prefix match first) with the cache on. Does the hit rate or the TTFT improve?
'''),
]
