"""Cells of notebooks/03_chunked_prefill.ipynb (see ../_make_notebooks.py)."""

CELLS = [
("md", r'''
# 3. Prefill starvation and chunked prefill

**What you will learn**

- Why a long prompt arriving at a busy server makes every running conversation *stutter*
  under continuous batching (vLLM's original prefill-first scheduler).
- How **chunked prefill** (Sarathi-Serve; vLLM's default today) cuts that prompt into pieces that share steps
  with the running decodes, so no step is much longer than the others.
- The price: the long prompt's own first token (TTFT) comes later, and smaller chunks cost more.
  We measure the **chunk-size trade-off between TTFT and inter-token latency (ITL)** on chat traffic.
'''),
("code", r'''
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from simbatch import load_scenario, run, scenarios_dir
from simbatch.report.palette import POLICY_COLOURS  # the colours of the CLI's figures and reports too


SCEN = scenarios_dir()  # the bundled scenarios/ of this checkout
ROOT = SCEN.parent
pd.set_option("display.precision", 1)
'''),
("md", r'''
## A long prompt among chatty decodes

Twelve chat requests (150-260 prompt tokens, 400 output tokens each) arrive in the first 0.6 s and start
generating. At t = 1 s a document of 3,800 tokens arrives (say, "summarise this"). Llama-2-7B on one A100.

We run it twice:

- `continuous` with a step budget of 4,096 tokens: the whole prompt is prefilled in one step, and in vLLM's
  prefill-first scheduler the running decodes pause for that step;
- `chunked_prefill` with chunks of 256 tokens: every step decodes all running requests first and fills the
  rest of its 256-token budget with a piece of the prompt.
'''),
("code", r'''
chatty = [f"{{prompt: {150 + 10 * i}, output: 400, arrival_s: {0.05 * i:.2f}}}" for i in range(12)]
document = "{prompt: 3800, output: 32, arrival_s: 1.0}"
WORKLOAD = "workload.requests=[" + ", ".join(chatty + [document]) + "]"
LONG = 12  # the document is the 13th request


def stall_run(kind: str, chunk_size: int = 256):
    knobs = (["policy.kind=continuous", "policy.max_num_batched_tokens=4096"] if kind == "continuous"
             else ["policy.kind=chunked_prefill", f"policy.chunk_size={chunk_size}"])
    return run(load_scenario(SCEN / "classroom.yaml", [WORKLOAD, "policy.max_num_seqs=64"] + knobs))


stall = {"continuous": stall_run("continuous"), "chunked_prefill": stall_run("chunked_prefill", 256)}
stall["continuous"].requests.tail(3)[["id", "arrival_s", "prompt_tokens", "output_tokens", "ttft_ms", "e2el_ms"]]
'''),
("md", r'''
## Per-token latency of the running requests

`out.result.log.token_times()` (see `docs/metrics.md`) gives, for every request, the time each of its output
tokens came out. The gaps between consecutive tokens are what a user watching the text stream sees.
'''),
("code", r'''
def token_gaps(out, ids):
    """(time of token, gap since the previous token in ms) for the given requests."""
    times = out.result.log.token_times()
    return {i: (times[i][1:], np.diff(times[i]) * 1e3) for i in ids}


fig, axes = plt.subplots(1, 2, figsize=(13, 4.3), sharey=True)
for ax, (kind, out) in zip(axes, stall.items()):
    for i, (t, gap) in token_gaps(out, range(12)).items():
        # a gap belongs to the interval that ends with its token: draw it over that interval
        ax.step(t, gap, where="pre", color=POLICY_COLOURS[kind], alpha=0.5, linewidth=1,
                label="the 12 chat requests" if i == 0 else None)
    doc = out.requests.loc[LONG]
    ax.axvspan(doc.arrival_s, doc.first_token_s, color="grey", alpha=0.2, label="document waiting for its first token")
    ax.set(xlabel="simulated time (s)", title=f"{kind}: gap between tokens of each chat request", xlim=(0.5, 2.5))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
axes[0].set_ylabel("time since the previous token (ms)")
fig.tight_layout()
plt.show()

pd.DataFrame({kind: {"worst gap of a chat request (ms)": max(g.max() for _, g in token_gaps(out, range(12)).values()),
                     "median gap (ms)": np.median(np.concatenate([g for _, g in token_gaps(out, range(12)).values()])),
                     "ITL p99, all requests (ms)": out.summary["itl_ms"]["p99"],
                     "document's TTFT (ms)": out.requests.loc[LONG, "ttft_ms"]}
              for kind, out in stall.items()})
'''),
("md", r'''
Under `continuous`, every chat request freezes for the length of one 3,800-token prefill step (a quarter of a
second, twenty times a normal token gap): a visible stutter for twelve users at once. Under `chunked_prefill`
the prompt is spread over a series of short steps; each of those is a little longer than a pure decode step, so
the chat requests slow down slightly for a while instead of stopping. The document, in exchange, gets its
first token later, because its prefill now shares every step with the decodes.

### What the engine did, step by step

The steps table (`out.steps`) shows it directly: each bar below is one engine step, as wide as it lasted and
as high as its duration. Continuous batching runs one huge prefill step; chunked prefill runs a series of
steps that each carry the decodes plus a chunk of the prompt (the step budget is 256 tokens, decodes first).
'''),
("code", r'''
fig, axes = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
for ax, (kind, out) in zip(axes, stall.items()):
    s = out.steps[(out.steps.start_s > 0.9) & (out.steps.start_s < 1.5)]
    prefill = s.prefill_tokens > 0
    for mask, colour, label in ((prefill, "#D55E00", "step with prefill tokens"), (~prefill, "#56B4E9", "decode-only step")):
        ax.bar(s.start_s[mask], s.duration_s[mask] * 1e3, width=s.duration_s[mask], align="edge", color=colour,
               edgecolor="white", linewidth=0.5, label=label)
    ax.set(ylabel="step duration (ms)",
           title=f"{kind}: {int(prefill.sum())} step(s) carry the document's {int(s.prefill_tokens.sum())} prompt tokens")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
axes[-1].set_xlabel("simulated time (s)")
fig.tight_layout()
plt.show()
'''),
("md", r'''
Try other chunk sizes on this example (a slider if `ipywidgets` is installed; otherwise the cell just runs with
the default of 256 tokens):
'''),
("code", r'''
def show_stall(chunk_size: int = 256):
    out = stall_run("chunked_prefill", chunk_size)
    gaps = token_gaps(out, range(12))
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for i, (t, gap) in gaps.items():
        ax.step(t, gap, where="pre", color=POLICY_COLOURS["chunked_prefill"], alpha=0.5, linewidth=1)
    ax.set(xlabel="simulated time (s)", ylabel="time since previous token (ms)", xlim=(0.5, 2.5),
           title=f"chunk_size = {chunk_size}: worst chat gap {max(g.max() for _, g in gaps.values()):.0f} ms, "
                 f"document TTFT {out.requests.loc[LONG, 'ttft_ms']:.0f} ms")
    ax.grid(alpha=0.3)
    plt.show()


try:
    import ipywidgets as widgets
    widgets.interact(show_stall, chunk_size=widgets.SelectionSlider(options=[64, 128, 256, 512, 1024, 2048, 4096], value=256))
except ImportError:  # headless or without ipywidgets: one static picture
    show_stall(256)
'''),
("md", r'''
## The chunk-size trade-off on chat traffic

One example is a story; a workload is evidence. We replay 1,000 requests of the bundled chat workload
(`scenarios/chat.yaml`: lengths fitted to the Azure conversation trace, 2.5 req/s, Llama-2-7B on one A100)
under chunked prefill with chunks from 64 to 4,096 tokens, and under plain continuous batching for reference.
'''),
("code", r'''
CHAT = ["workload.synthetic.num_requests=1000"]
baseline = run(load_scenario(SCEN / "chat.yaml", CHAT + ["policy.kind=continuous"])).summary
rows = []
for chunk in [64, 128, 256, 512, 1024, 2048, 4096]:
    s = run(load_scenario(SCEN / "chat.yaml", CHAT + ["policy.kind=chunked_prefill", f"policy.chunk_size={chunk}"])).summary
    rows.append({"chunk_size": chunk, "TTFT p50": s["ttft_ms"]["median"], "TTFT p99": s["ttft_ms"]["p99"],
                 "ITL p99": s["itl_ms"]["p99"], "TPOT p50": s["tpot_ms"]["median"],
                 "req/s": s["request_throughput"], "SLO %": 100 * s["slo_attainment"]})
trade = pd.DataFrame(rows).set_index("chunk_size")
print(f"continuous (no chunks): TTFT p50 {baseline['ttft_ms']['median']:.0f} ms, TTFT p99 {baseline['ttft_ms']['p99']:.0f} ms, "
      f"ITL p99 {baseline['itl_ms']['p99']:.0f} ms, SLO attained by {100 * baseline['slo_attainment']:.1f} %")
trade
'''),
("code", r'''
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.3))
ax1.plot(trade.index, trade["TTFT p50"], "-o", color=POLICY_COLOURS["chunked_prefill"], label="chunked prefill, TTFT p50")
ax1.plot(trade.index, trade["TTFT p99"], "--o", color=POLICY_COLOURS["chunked_prefill"], label="chunked prefill, TTFT p99")
ax1.axhline(baseline["ttft_ms"]["median"], color=POLICY_COLOURS["continuous"], linestyle="-", linewidth=1, label="continuous, TTFT p50")
ax1.axhline(baseline["ttft_ms"]["p99"], color=POLICY_COLOURS["continuous"], linestyle="--", linewidth=1, label="continuous, TTFT p99")
ax1.set(yscale="log", ylabel="time to first token (ms)", title="TTFT vs chunk size")
ax2.plot(trade.index, trade["ITL p99"], "-s", color=POLICY_COLOURS["chunked_prefill"], label="chunked prefill, ITL p99")
ax2.plot(trade.index, trade["TPOT p50"], ":s", color=POLICY_COLOURS["chunked_prefill"], label="chunked prefill, TPOT p50")
ax2.axhline(baseline["itl_ms"]["p99"], color=POLICY_COLOURS["continuous"], linestyle="-", linewidth=1, label="continuous, ITL p99")
slo_tpot = baseline["slo"]["tpot_ms"]  # the scenario's SLO
ax2.axhline(slo_tpot, color="black", linestyle=":", linewidth=0.8, label=f"SLO: TPOT {slo_tpot:g} ms")
ax2.set(ylabel="inter-token latency (ms)", title="Inter-token latency vs chunk size")
for ax in (ax1, ax2):
    ax.set_xscale("log", base=2)
    ax.set_xticks(trade.index, [str(c) for c in trade.index])
    ax.set_xlabel("chunk_size (tokens per step)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
fig.suptitle("Chat workload, 1,000 requests at 2.5 req/s, Llama-2-7B on A100-80GB", fontsize=10)
fig.tight_layout()
plt.show()
'''),
("md", r'''
**Reading the trade-off.**

- *Right panel*: the bigger the chunk, the longer the steps that carry one, so the worst inter-token gaps grow with the chunk size;
  at 2,048-4,096 tokens chunked prefill is back to continuous batching's stutter.
- *Left panel*: the smaller the chunk, the more steps a prompt needs, so TTFT grows. Each step also pays a fixed
  cost (reading the weights, CPU overhead) for fewer prefill tokens, so very small chunks waste capacity:
  at 64 tokens queues build up and the TTFT tail reaches seconds.
- In between (here 256-512 tokens) both tails are acceptable. Sarathi-Serve chooses its token budget in
  this spirit: the largest one whose step time still meets the inter-token latency target.

## Questions to try

1. In the stall example, make the document 1,500 tokens instead of 3,800. How long is the stall under `continuous` now? Is it proportional?
2. Move the chat traffic to twice the load (`workload.rate_scale=2`). Which chunk sizes still keep up, and what happens to the best one?
3. Repeat the sweep with `scenarios/long_context.yaml` (4k-token prompts, Llama-3-8B on an H100, `workload.synthetic.num_requests=600`). Where is the sweet spot now?
4. Chunked prefill with `chunk_size=4096` is not quite the same as `continuous`. Look at the definitions in `docs/policies.md`: what still differs?
5. Which chunk size would you choose for an SLO of TTFT p99 <= 500 ms and TPOT p99 <= 30 ms? Is there one?
'''),
]
