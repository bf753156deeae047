"""Cells of notebooks/01_why_batch.ipynb (see ../_make_notebooks.py)."""

CELLS = [
("md", r'''
# 1. Why batch at all? Arithmetic intensity, the roofline and the KV cache

**What you will learn**

- What one engine step of an LLM costs on a GPU, and why serving one request at a time wastes the GPU.
- *Arithmetic intensity* (FLOPs per byte moved) and the *roofline*: why **decode is memory-bound** and **prefill is compute-bound**.
- How the step time and the tokens per second change with the batch size on a few GPUs (L4, A100, H100).
- What the **KV cache** costs per token, and how it, not the scheduler, caps how many requests can run at once.

Every number below comes from simbatch's roofline cost model (Llama-2-7B and Llama-3-8B in fp16 on datasheet GPUs):
we build tiny scenarios, run them through the simulator, and read the steps it priced. Nothing is typed in by hand.
'''),
("code", r'''
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from simbatch import load_scenario, run, scenarios_dir


SCEN = scenarios_dir()  # the bundled scenarios/ of this checkout
ROOT = SCEN.parent
GPU_COLORS = {"l4": "#E69F00", "a100-80gb": "#0072B2", "h100-sxm": "#009E73", "h200": "#CC79A7"}
pd.set_option("display.precision", 3)
print("scenarios from", SCEN)
'''),
("md", r'''
## Pricing one engine step

An LLM server runs in *steps*: each step pushes some tokens through all the layers of the model.
A **prefill** step processes the prompt (many tokens per request, all at once);
a **decode** step produces one new token for every running request.

To see what one step costs we let the simulator run a tiny job: `batch` identical requests that all arrive at
t = 0, served as one static batch, each generating 2 tokens. The first step is then the prefill of all prompts,
and the second is one decode step for the whole batch. We start from the bundled `classroom` scenario and
override fields exactly as `simbatch run --set key=value` would.
'''),
("code", r'''
def burst(n: int, prompt: int, output: int) -> str:
    """A --set override: n requests at t=0 with fixed prompt and output lengths."""
    return ("workload={synthetic: {num_requests: %d, arrival: {kind: burst}, "
            "prompt: {kind: constant, value: %d}, output: {kind: constant, value: %d}}}" % (n, prompt, output))


def two_steps(gpu: str, batch: int, prompt: int, model: str = "llama-2-7b"):
    """Run `batch` identical requests as one static batch: (run, its prefill step, its first decode step)."""
    scenario = load_scenario(SCEN / "classroom.yaml", [
        burst(batch, prompt, 2), f"hardware={gpu}", f"model={model}",
        "policy.kind=static", f"policy.batch_size={batch}", "policy.max_wait_s=0"])
    out = run(scenario)
    return out, out.steps.iloc[0], out.steps.iloc[1]


out, prefill, decode = two_steps("a100-80gb", 8, 512)
print(out.summary["cost_model"]["kind"], "cost model,", out.summary["model"]["name"], "on", out.summary["hardware"]["name"])
print(f"prefill / decode: {prefill.duration_s / decode.duration_s:.0f}x the time, "
      f"{prefill.useful_flops / decode.useful_flops:.0f}x the FLOPs, {prefill.useful_bytes / decode.useful_bytes:.1f}x the bytes")
out.steps.head(2)[["step", "num_seqs", "prefill_tokens", "decode_tokens", "duration_s", "useful_flops", "useful_bytes"]]
'''),
("md", r'''
Eight prompts of 512 tokens (4,096 tokens) take a few hundred milliseconds to prefill; one decode step for
the same eight requests (8 tokens) takes about a twentieth of that. Per token, decode is far more expensive.
`useful_flops` and `useful_bytes` are the work the cost model counted for the step: decode moves a comparable
number of bytes (every step reads all the weights once) but does hundreds of times fewer FLOPs.

## Step time vs batch size

Now sweep the batch size for decode (1 to 256 requests, 128-token prompts) and the prompt length for prefill
(one request, 16 to 4,000 tokens) on three GPUs. The x-axis is the number of tokens the step computes.
'''),
("code", r'''
GPUS = ["l4", "a100-80gb", "h100-sxm"]
rows, runs = [], {}
for gpu in GPUS:
    for batch in [1, 2, 4, 8, 16, 32, 64, 128, 256]:
        out, _, step = two_steps(gpu, batch, 128)
        rows.append({"gpu": gpu, "phase": "decode", "asked": batch, "tokens": int(step.decode_tokens),
                     "ms": step.duration_s * 1e3, "flops": step.useful_flops, "bytes": step.useful_bytes})
        runs[gpu] = out
    for prompt in [16, 32, 64, 128, 256, 512, 1024, 2048, 4000]:
        out, step, _ = two_steps(gpu, 1, prompt)
        rows.append({"gpu": gpu, "phase": "prefill", "asked": prompt, "tokens": int(step.prefill_tokens),
                     "ms": step.duration_s * 1e3, "flops": step.useful_flops, "bytes": step.useful_bytes})
steps = pd.DataFrame(rows)
for r in steps[steps.asked != steps.tokens].itertuples():
    print(f"{r.gpu}: a batch of {r.asked} was cut to {r.tokens} requests, the most whose KV cache fits")
steps = steps.drop_duplicates(["gpu", "phase", "tokens"]).reset_index(drop=True)
steps["tokens_per_s"] = steps["tokens"] / (steps["ms"] / 1e3)
steps["intensity"] = steps["flops"] / steps["bytes"]  # FLOPs per byte moved
steps.pivot(index="tokens", columns=["phase", "gpu"], values="ms").round(2)
'''),
("code", r'''
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
for gpu in GPUS:
    for phase, style in (("decode", "-o"), ("prefill", "--^")):
        d = steps[(steps.gpu == gpu) & (steps.phase == phase)]
        ax1.plot(d.tokens, d.ms, style, color=GPU_COLORS[gpu], label=f"{phase}, {gpu}", markersize=4)
        ax2.plot(d.tokens, d.tokens_per_s, style, color=GPU_COLORS[gpu], label=f"{phase}, {gpu}", markersize=4)
ax1.set(xscale="log", yscale="log", xlabel="tokens computed in the step (decode: batch size)",
        ylabel="step time (ms)", title="Step time: Llama-2-7B, one GPU")
ax2.set(xscale="log", yscale="log", xlabel="tokens computed in the step (decode: batch size)",
        ylabel="throughput (tokens/s)", title="Tokens per second within one step")
for ax in (ax1, ax2):
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
fig.tight_layout()
plt.show()
'''),
("md", r'''
**Reading the plot.**

- *Decode (solid)*: from 1 to a few dozen requests the step time hardly moves. Each decode step has to read
  all 13.5 GB of weights from memory whatever the batch, and that read dominates. So tokens per second grow
  almost linearly with the batch: **batching decode is nearly free** until the step stops being memory-bound.
- *Prefill (dashed)*: a single prompt of a few hundred tokens already keeps the GPU's arithmetic units busy;
  beyond that the step time grows in proportion to the tokens and tokens per second stay flat.
  Prefill is **compute-bound**: batching prompts together gains little.
- At the same number of tokens, decode costs more than prefill because each decode token also reads its
  request's whole KV cache (128 tokens of context here).
- The GPUs differ by their two datasheet numbers: memory bandwidth sets the flat part of the decode curves,
  peak FLOP/s sets the slope of prefill.

## Arithmetic intensity and the roofline

*Arithmetic intensity* = FLOPs done / bytes moved. A GPU can do `peak FLOP/s` but only move `bandwidth` bytes/s,
so a step with intensity *I* can reach at most `min(peak, I x bandwidth)` FLOP/s: the **roofline**.
The ridge point `peak / bandwidth` separates memory-bound steps (left) from compute-bound ones (right).

The run's summary reports MFU and MBU (model FLOPs / bandwidth utilisation, `docs/metrics.md`):
achieved FLOP/s divided by the peak. Dividing the achieved rates by them gives back the peaks the cost model uses.
'''),
("code", r'''
def peaks(out) -> tuple[float, float]:
    """(peak FLOP/s, peak bytes/s) of the run's GPU, from the achieved rates and the summary's MFU and MBU."""
    s, busy = out.steps, out.steps["duration_s"].sum()
    return s["useful_flops"].sum() / busy / out.summary["mfu"], s["useful_bytes"].sum() / busy / out.summary["mbu"]


PEAKS = {gpu: peaks(runs[gpu]) for gpu in GPUS}
pd.DataFrame({gpu: {"peak TFLOP/s": f / 1e12, "bandwidth GB/s": b / 1e9, "ridge point (FLOP/byte)": f / b}
              for gpu, (f, b) in PEAKS.items()}).T.round(1)
'''),
("code", r'''
fig, axes = plt.subplots(1, len(GPUS), figsize=(14, 4.3), sharey=True)
intensity = np.logspace(-0.5, 4, 200)
for ax, gpu in zip(axes, GPUS):
    peak, bw = PEAKS[gpu]
    ax.plot(intensity, np.minimum(peak, intensity * bw) / 1e12, color="black", linewidth=1.2, label="roofline (datasheet)")
    ax.axvline(peak / bw, color="grey", linestyle=":", linewidth=1, label=f"ridge point {peak / bw:.0f} FLOP/B")
    for phase, marker in (("decode", "o"), ("prefill", "^")):
        d = steps[(steps.gpu == gpu) & (steps.phase == phase)]
        achieved = d.flops / (d.ms / 1e3) / 1e12
        ax.scatter(d.intensity, achieved, marker=marker, color=GPU_COLORS[gpu] if phase == "decode" else "white",
                   edgecolor=GPU_COLORS[gpu], zorder=3, label=f"{phase} steps")
    ax.set(xscale="log", yscale="log", title=f"Roofline: {gpu}", xlabel="arithmetic intensity (FLOP/byte)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
axes[0].set_ylabel("achieved TFLOP/s")
fig.tight_layout()
plt.show()
'''),
("md", r'''
Decode steps sit on the sloped (memory) part of the roof: a batch of *B* requests does about 2 FLOPs per weight
per token, so intensity grows roughly with *B* while the bytes (the weights) stay the same. Prefill steps with
hundreds of tokens sit on the flat (compute) part. The points lie below the roof because real kernels reach
only part of the datasheet peaks (the cost model's efficiencies, fitted to measured A100 timings, and a fixed
1 ms of CPU overhead per step).

**The lesson:** a decode step for one request uses well under one per cent of the GPU's arithmetic. Serving
requests one at a time wastes most of the GPU; batching many decodes together is how a server gets its throughput.

## The KV cache: memory per token, and the cap it puts on the batch

Each token a request has seen keeps its keys and values in GPU memory for every layer:
`KV bytes per token = layers x 2 (K and V) x KV heads x head size x 2 bytes`.
Whatever memory the weights leave over (90 % of the GPU by default, as vLLM) holds the KV cache.
The run summary reports the model's KV bytes per token and the replica's cache size in blocks.
'''),
("code", r'''
kv_rows = []
for model in ["llama-2-7b", "llama-3-8b"]:
    for gpu in ["l4", "a100-80gb", "h100-sxm", "h200"]:
        summary = two_steps(gpu, 1, 128, model)[0].summary
        tokens = summary["hardware"]["kv_blocks_per_replica"] * summary["hardware"]["kv_block_size"]
        kv_rows.append({"model": model, "gpu": gpu,
                        "weights (GiB)": summary["model"]["num_params"] * 2 / 2**30,
                        "KV per token (KiB)": summary["model"]["kv_bytes_per_token"] / 2**10,
                        "KV cache (tokens)": tokens,
                        "requests of 2k tokens": tokens // 2048})
kv = pd.DataFrame(kv_rows)
kv.round(1)
'''),
("code", r'''
context = np.array([256, 512, 1024, 2048, 4096, 8192])
fig, ax = plt.subplots(figsize=(8, 4.5))
for _, row in kv.iterrows():
    style = "-o" if row["model"] == "llama-2-7b" else "--s"
    ax.plot(context, row["KV cache (tokens)"] // context, style, color=GPU_COLORS[row["gpu"]],
            label=f"{row['model']} on {row['gpu']}", markersize=4)
ax.axhline(256, color="black", linewidth=0.8, linestyle=":", label="max_num_seqs = 256 (vLLM's default cap)")
ax.set(xscale="log", yscale="log", xlabel="tokens per request (prompt + output)",
       ylabel="requests whose KV fits at once", title="How many requests fit in the KV cache")
ax.set_xticks(context, [str(c) for c in context])
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=8, ncol=2)
fig.tight_layout()
plt.show()
'''),
("md", r'''
Llama-2-7B keeps 32 KV heads (512 KiB per token); Llama-3-8B shares 8 KV heads among its 32 query heads
(grouped-query attention, 128 KiB per token), so four times as many tokens fit. On an A100 with Llama-2-7B,
requests of 2k tokens fit about 60 at a time: a scheduler cap of 256 would never be reached.

### Watching the cap bite

400 requests (1,024-token prompts, 256-token answers) are queued at once, served by continuous batching with
a cap of 256 running requests on one A100. How many actually run together?
'''),
("code", r'''
burst_runs = {}
for model in ["llama-2-7b", "llama-3-8b"]:
    scenario = load_scenario(SCEN / "classroom.yaml", [
        burst(400, 1024, 256), f"model={model}", "hardware=a100-80gb",
        "policy.kind=continuous", "policy.max_num_seqs=256", "policy.max_num_batched_tokens=8192"])
    burst_runs[model] = run(scenario)

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
for (model, out), color in zip(burst_runs.items(), ["#D55E00", "#0072B2"]):
    s = out.steps
    capacity = out.summary["hardware"]["kv_blocks_per_replica"]
    decode_steps = s[s.decode_tokens > 0]  # (steps that admit new prompts pause the decodes)
    ax1.plot(decode_steps.start_s, decode_steps.decode_tokens, ".", markersize=2, color=color, label=model)
    ax2.step(s.start_s, 100 * s.kv_used_blocks / capacity, where="post", color=color, label=model)
ax1.axhline(256, color="black", linestyle=":", linewidth=0.8, label="max_num_seqs = 256")
ax1.set(xlabel="simulated time (s)", ylabel="requests decoding in the step",
        title="Decode batch size (cap 256), A100-80GB", ylim=(0, 270))
ax2.set(xlabel="simulated time (s)", ylabel="KV cache in use (%)", title="KV cache use", ylim=(0, 105))
for ax in (ax1, ax2):
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

pd.DataFrame({model: {"largest decode batch": int(out.steps.decode_tokens.max()),
                      "output tokens/s": out.summary["output_throughput"],
                      "TPOT median (ms)": out.summary["tpot_ms"]["median"],
                      "preemptions": out.summary["preemptions"],
                      "finished after (s)": out.summary["duration_s"]}
              for model, out in burst_runs.items()}).round(1)
'''),
("md", r'''
With Llama-2-7B the KV cache, not the cap of 256, decides the batch: it fills up and the running batch
stays at about half the cap (new requests wait until finished ones free their blocks, and when a growing
request needs a block that is not there, the newest one is preempted and recomputed later). Llama-3-8B, with a quarter
of the KV bytes per token, runs a much larger batch on the same GPU and finishes the job sooner, even though
its weights are larger. (The gaps in the left panel are admission phases: in this prefill-first scheduler a
step that admits new prompts runs only prompts, and the running decodes wait; notebook 3 is about that.)

## Questions to try

1. Re-run the step-time sweep with `model="llama-3-8b"` or on `"h200"` (add it to `GPUS`). Which curves move, and why?
2. At what batch size does a decode step on the A100 take twice as long as with one request? What is its arithmetic intensity there, compared with the ridge point?
3. Change the decode context from 128 to 2,048 tokens (the `prompt` argument in the decode sweep). Why does decode get slower with a longer context even at batch 1?
4. In the KV table, how many 4k-token requests fit on an L4 with Llama-2-7B? What does that mean for serving long documents on that card?
5. In "watching the cap bite", set `policy.max_num_seqs=32`. Does the job finish sooner or later? Why?
'''),
]
