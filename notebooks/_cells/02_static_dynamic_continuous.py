"""Cells of notebooks/02_static_dynamic_continuous.ipynb (see ../_make_notebooks.py)."""

CELLS = [
("md", r'''
# 2. Static, dynamic and continuous batching

**What you will learn**

- How the four policies in simbatch decide which requests share the GPU: **static** (fixed batches run to completion),
  **dynamic** (Triton's batcher: static batches sent when full or after a queue delay), **continuous**
  (Orca / vLLM: requests join and leave at every step) and **chunked prefill** (Sarathi-Serve: continuous, with prompts cut in chunks).
- To read a *slot-by-time chart*: who holds a batch slot, who waits in the queue, and which slots sit idle.
- Why a padded batch wastes slots, and how iteration-level (continuous) batching reuses them.
- What that means for throughput and latency on real traffic.
'''),
("code", r'''
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import HTML, display
from matplotlib.animation import FuncAnimation
from matplotlib.patches import Patch, Rectangle

from simbatch import POLICY_ORDER, compare, load_scenario, run, scenarios_dir
from simbatch.report.animation import offline_jshtml  # matplotlib's player, its buttons drawn inline
from simbatch.report.palette import POLICY_COLOURS  # the colours of the CLI's figures and reports too


SCEN = scenarios_dir()  # the bundled scenarios/ of this checkout
ROOT = SCEN.parent
pd.set_option("display.precision", 3)
print(POLICY_ORDER)
'''),
("md", r'''
## The classroom example

Four requests arrive together at t = 0; the GPU (Llama-2-7B on one A100) has **two batch slots**.

| request | prompt tokens | output tokens |
|---|---|---|
| r0 | 128 | 32 |
| r1 | 256 | 64 |
| r2 | 512 | 256 |
| r3 | 64 | 16 |

This is the bundled scenario `scenarios/classroom.yaml`; `compare` runs it under each policy, with the
knobs from its `policies:` section (every policy limited to 2 requests at a time).
'''),
("code", r'''
print((SCEN / "classroom.yaml").read_text())
classroom = load_scenario(SCEN / "classroom.yaml")
runs, table = compare(classroom, jobs=1)
table[["policy", "completed", "duration_s", "ttft_p50_ms", "e2el_p50_ms", "e2el_p99_ms", "padding_waste_frac", "busy_frac"]]
'''),
("md", r'''
## Who holds which slot, and when

The simulator records, for every request, when it arrived, when it was first scheduled, when its first token
came out and when it finished (`out.requests`). We lay those intervals out on batch slots: each request takes
the lowest free slot when it starts. Under the padded policies (static, dynamic) a request keeps its slot until
its whole batch is done, even after its own last token: that slot then computes **padding**.
Requests waiting for a slot are drawn below the slots, in the queue.
'''),
("code", r'''
PHASES = {  # colour and hatch: distinct in colour, in grayscale and by texture
    "queued": ("#F0E442", ".."),
    "prefill": ("#D55E00", "////"),
    "decode": ("#56B4E9", ""),
    "idle slot (padding)": ("#BBBBBB", "xx"),
}


def lanes(starts, ends) -> list[int]:
    """Greedy interval partitioning: each interval (in start order) takes the lowest lane free at its start."""
    free_at, out = [], []
    for start, end in zip(starts, ends):
        lane = next((k for k, f in enumerate(free_at) if f <= start + 1e-9), len(free_at))
        if lane == len(free_at):
            free_at.append(end)
        else:
            free_at[lane] = end
        out.append(lane)
    return out


def slot_layout(out, replica: int = 0) -> pd.DataFrame:
    """The requests of one replica with their slot, queue lane and the time their slot frees."""
    req = out.requests[(out.requests.replica == replica) & out.requests.first_scheduled_s.notna()].copy()
    end = out.steps.end_s.max()
    req["finish_s"] = req.finish_s.fillna(end)
    req = req.sort_values(["first_scheduled_s", "id"], kind="stable")
    if out.summary["policy"]["kind"] in ("static", "dynamic"):
        # a padded batch (its requests start in the same step) holds every slot until its longest request is done
        req["slot_free_s"] = req.groupby("first_scheduled_s").finish_s.transform("max")
    else:
        req["slot_free_s"] = req.finish_s
    req["slot"] = lanes(req.first_scheduled_s, req.slot_free_s)
    req = req.sort_values(["arrival_s", "id"], kind="stable")
    req["queue_lane"] = lanes(req.arrival_s, req.first_scheduled_s)
    return req.sort_values("id")


def draw_slots(ax, lay: pd.DataFrame, num_slots: int, names: bool = True, hatches: bool = True) -> None:
    """Slot rows 0..num_slots-1 on top, the waiting queue below them."""
    spans = {"queued": ("arrival_s", "first_scheduled_s", "queue_lane"),
             "prefill": ("first_scheduled_s", "first_token_s", "slot"),
             "decode": ("first_token_s", "finish_s", "slot"),
             "idle slot (padding)": ("finish_s", "slot_free_s", "slot")}
    for phase, (a, b, row) in spans.items():
        colour, hatch = PHASES[phase]
        y = lay[row] + (num_slots + 0.5 if phase == "queued" else 0)
        height = 0.5 if phase == "queued" else 0.8
        shown = lay[lay[b] > lay[a]].assign(y=y)
        for y_row, g in shown.groupby("y"):  # one collection per row: quick to draw
            ax.broken_barh(list(zip(g[a], g[b] - g[a])), (y_row - height / 2, height), facecolor=colour,
                           hatch=hatch if hatches else None, edgecolor="black", linewidth=0.4)
        if names and phase in ("queued", "decode"):  # name each request in the queue and in its slot
            for x0, y_row, rid in zip(shown[a], shown.y, shown.id):
                ax.text(x0, y_row, f" r{rid}", va="center", ha="left", fontsize=8,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.8})
    queue_rows = int(lay.queue_lane.max()) + 1 if (lay.first_scheduled_s > lay.arrival_s).any() else 0
    ax.axhline(num_slots - 0.5 + 0.25, color="black", linewidth=0.6)
    ticks = list(range(num_slots)) + [num_slots + 0.5 + k for k in range(queue_rows)]
    labels = [f"slot {k}" for k in range(num_slots)] + ["queue"] + [""] * (queue_rows - 1)
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_ylim(num_slots + 0.5 + max(queue_rows, 1) - 0.3, -0.6)


def legend(fig, **kw):
    handles = [Patch(facecolor=c, hatch=h, edgecolor="black", label=p) for p, (c, h) in PHASES.items()]
    handles.append(Patch(facecolor="white", edgecolor="black", label="empty slot"))
    fig.legend(handles=handles, ncol=len(handles), frameon=False, **kw)


layouts = {kind: slot_layout(out) for kind, out in runs.items()}
fig, axes = plt.subplots(len(runs), 1, figsize=(11, 9), sharex=True)
for ax, (kind, out) in zip(axes, runs.items()):
    draw_slots(ax, layouts[kind], num_slots=2)
    ax.set_title(f"{kind}: all four done after {out.summary['duration_s']:.2f} s", loc="left", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
axes[-1].set_xlabel("simulated time (s)")
fig.suptitle("Classroom example: 4 requests, 2 batch slots, Llama-2-7B on A100-80GB")
legend(fig, loc="upper center", bbox_to_anchor=(0.5, 0.965), fontsize=9)
fig.tight_layout(rect=(0, 0, 1, 0.94))
plt.show()
'''),
("md", r'''
**What to look for**

- **static / dynamic**: r0 and r1 form the first batch. r0 is done after 32 tokens, but its slot keeps computing
  padding until r1's 64th token: nothing may join a running batch. r2 and r3 *wait in the queue* for the whole
  first batch, then r3 finishes early and its slot idles (padding) through r2's remaining 240 tokens.
  Dynamic batching is identical here: everyone arrived at once, so there is nothing for its queue delay to wait for.
- **continuous**: the step after r0 finishes, r2 takes its slot; when r1 finishes, r3 takes that one.
  A slot is only empty when nobody is waiting for it.
- **chunked prefill**: like continuous, but a prompt is processed in chunks of at most 256 tokens that share
  steps with running decodes (r1's prompt takes two steps; r2's prefill no longer pauses r1's decoding).

Per request and per policy:
'''),
("code", r'''
def slot_use(out, num_slots: int) -> float:
    """Share of slot-time (over the busy steps) spent on a live request rather than padding or nothing."""
    s = out.steps
    return float((s.duration_s * s.num_seqs).sum() / (s.duration_s.sum() * num_slots))


per_request = pd.concat({kind: out.requests.set_index("id")[["queue_ms", "ttft_ms", "e2el_ms"]]
                         for kind, out in runs.items()}, axis=1).round(0)
display(per_request)
pd.DataFrame({kind: {"all done after (s)": out.summary["duration_s"],
                     "GPU busy (%)": 100 * out.summary["busy_frac"],
                     "padded tokens (%)": 100 * out.summary["padding_waste_frac"],
                     "slot-time on live requests (%)": 100 * slot_use(out, 2),
                     "mean E2EL (s)": out.summary["e2el_ms"]["mean"] / 1e3}
              for kind, out in runs.items()}).round(2)
'''),
("md", r'''
The GPU is busy 100 % of the time under every policy, yet 39 % of the tokens the static batches compute are
padding, so the last request finishes later and every request that waited waited longer.
"Busy" is not the same as "useful". (Continuous batching leaves a slot empty too, at the end, when r2 is the
only request left: nobody is waiting to fill it.)

## One batch of four: the textbook picture

The same four requests as ONE static batch of four slots (the bundled scenario `one_batch`): every slot is
computed until the longest answer (256 tokens) is done, so the batch uses 32 + 64 + 256 + 16 = 368 of its
4 x 256 = 1,024 decode slots, about 36 %. simbatch reports this as **slots used** (`slot_use_frac`: live
request-steps over computed batch rows), beside **padding waste** (by tokens, with the prompts padded to 512)
and **busy** (the GPU's share of time computing anything, which stays at 100 %).
'''),
("code", r'''
one = load_scenario(SCEN / "one_batch.yaml")
one_runs, one_table = compare(one, jobs=1)
one_table[["policy", "duration_s", "slot_use_frac", "padding_waste_frac", "busy_frac"]]
'''),
("md", r'''
Static batching (and dynamic, which here sends the same batch) uses about 36 % of the slots it computes;
continuous batching and chunked prefill use every slot they compute, and finish all four requests sooner.

## Animation: batch slots filling over time

Now a slightly bigger picture: 40 chat requests arriving at random (Poisson, 4 per second), 8 slots.
Static batching (`batch_size: 8`, a partial batch leaves after 0.5 s) against continuous batching
(`max_num_seqs: 8`). Press play.
'''),
("code", r'''
small = ["workload.synthetic.num_requests=40", "workload.synthetic.arrival.rate=4",
         "workload.synthetic.prompt={kind: uniform, low: 64, high: 1024}",
         "workload.synthetic.output={kind: uniform, low: 16, high: 160}"]
anim_runs = {
    "static": run(load_scenario(SCEN / "chat.yaml", small + ["policy.kind=static", "policy.batch_size=8", "policy.max_wait_s=0.5"])),
    "continuous": run(load_scenario(SCEN / "chat.yaml", small + ["policy.kind=continuous", "policy.max_num_seqs=8"])),
}
anim_layouts = {kind: slot_layout(out) for kind, out in anim_runs.items()}
t_end = max(out.summary["duration_s"] for out in anim_runs.values())

fig, axes = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, dpi=72)
curtains, titles = [], []
for ax, (kind, lay) in zip(axes, anim_layouts.items()):
    draw_slots(ax, lay, num_slots=8, names=False, hatches=False)  # the whole run, drawn once...
    # ...and a white curtain over the future, pulled back frame by frame
    curtains.append(ax.add_patch(Rectangle((0, 0), t_end * 1.05, 1, transform=ax.get_xaxis_transform(),
                                           facecolor="white", edgecolor="none", zorder=5)))
    titles.append(ax.set_title("", loc="left", fontsize=10))
    ax.set_xlim(0, t_end * 1.02)
    ax.grid(axis="x", alpha=0.3)
axes[-1].set_xlabel("simulated time (s)")
legend(fig, loc="upper center", fontsize=8)
fig.tight_layout(rect=(0, 0, 1, 0.95))


def frame(t: float):
    for curtain, title, (kind, lay) in zip(curtains, titles, anim_layouts.items()):
        curtain.set_x(t)
        waiting = int(((lay.arrival_s <= t) & (lay.first_scheduled_s > t)).sum())
        done = int((lay.finish_s <= t).sum())
        title.set_text(f"{kind}: t = {t:5.1f} s, finished {done}/{len(lay)}, waiting {waiting}")
    return curtains + titles


animation = FuncAnimation(fig, frame, frames=np.linspace(0, t_end, 30), interval=200, blit=True)
html = offline_jshtml(animation, default_mode="once")  # an HTML/JavaScript player: no ffmpeg, no network
plt.close(fig)
display(HTML(html))
'''),
("code", r'''
pd.DataFrame({kind: {"all done after (s)": out.summary["duration_s"], "TTFT p50 (ms)": out.summary["ttft_ms"]["median"],
                     "E2EL p99 (ms)": out.summary["e2el_ms"]["p99"], "padded tokens (%)": 100 * out.summary["padding_waste_frac"]}
              for kind, out in anim_runs.items()}).round(1)
'''),
("md", r'''
Under static batching a new batch can only start when the previous one has finished, so the queue below the
slots keeps growing and grey padding accumulates to the right of short requests. Under continuous batching a
slot is refilled at the very next step.

## The same on a real trace

The Azure LLM inference conversation trace (Splitwise, CC-BY 4.0) is not shipped with simbatch; if it sits in
`../shared/traces` beside the repository we replay its first 1,000 requests on two A100s
(`scenarios/azure_conv.yaml`). Otherwise we use the shipped synthetic stand-in fitted to it
(`scenarios/chat.yaml`, 1,000 requests on one A100). Static and dynamic batches hold 32 requests.
'''),
("code", r'''
TRACE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
if TRACE.is_file():
    real = load_scenario(SCEN / "azure_conv.yaml", ["workload.num_requests=1000", "cluster.replicas=2"])
    source = "Azure conversation trace, first 1,000 requests, 2 x A100-80GB"
else:
    real = load_scenario(SCEN / "chat.yaml", ["workload.synthetic.num_requests=1000"])
    source = "synthetic chat traffic fitted to the Azure trace (trace not found), 1 x A100-80GB"
print(source)
real_runs, real_table = compare(real, jobs=1)
real_table[["policy", "completed", "request_throughput", "output_throughput", "ttft_p50_ms", "ttft_p99_ms",
            "tpot_p50_ms", "tpot_p99_ms", "itl_p99_ms", "e2el_p99_ms", "slo_attainment", "padding_waste_frac"]]
'''),
("code", r'''
kinds = list(real_table.policy)
colors = [POLICY_COLOURS[k] for k in kinds]
x = np.arange(len(kinds))
fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
axes[0].bar(x, real_table.output_throughput, color=colors)
axes[0].set(ylabel="output tokens/s", title="Throughput")
for ax, metric, unit in ((axes[1], "ttft", "TTFT"), (axes[2], "tpot", "TPOT")):
    ax.bar(x - 0.2, real_table[f"{metric}_p50_ms"], 0.4, color=colors, label="median")
    ax.bar(x + 0.2, real_table[f"{metric}_p99_ms"], 0.4, color=colors, hatch="//", edgecolor="white", label="p99")
    ax.set(ylabel=f"{unit} (ms)", title=f"{unit}: median (plain) and p99 (hatched)")
    ax.legend(fontsize=8)
axes[1].set_yscale("log")
for ax in axes:
    ax.set_xticks(x, kinds, rotation=15)
    ax.grid(axis="y", alpha=0.3)
fig.suptitle(source, fontsize=10)
fig.tight_layout()
plt.show()
'''),
("code", r'''
fig, ax = plt.subplots(figsize=(8, 4.2))
for kind, out in real_runs.items():
    e2el = np.sort(out.requests.e2el_ms.dropna().to_numpy() / 1e3)
    ax.plot(e2el, np.arange(1, len(e2el) + 1) / len(e2el), color=POLICY_COLOURS[kind], label=kind)
ax.set(xscale="log", xlabel="end-to-end latency (s)", ylabel="fraction of requests", title="E2EL distribution per policy")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
plt.show()
'''),
("md", r'''
On real traffic the padded policies lose twice: each batch is padded to its longest prompt and its longest
answer (chat lengths vary a lot, so most of a static batch's compute is padding), and a request that arrives
while a batch runs waits for all of it. Their throughput falls below the arrival rate, the queue grows for
the whole run, and TTFT reaches minutes. Continuous batching keeps up; chunked prefill trades a little median
TTFT for a much shorter inter-token tail (notebook 3 is about that).

## Questions to try

1. In the classroom example, give the static batcher 4 slots (`policies.static.batch_size=4` as an override of `load_scenario`). What is left of its disadvantage, and why?
2. Make the requests arrive 0.1 s apart (edit `workload.requests` with an override) and give the dynamic batcher `max_queue_delay_us: 200000`. When does dynamic batching now differ from static?
3. In the animation, raise the arrival rate to 8 per second. Which policy's queue grows without bound?
4. On the real trace, switch the static batch to 8 requests (`policies.static.batch_size=8`). Does throughput go up or down, and what happens to TTFT?
5. Compare the TPOT of static and continuous batching on the real trace. Which is higher? Look at the static run's `out.steps` (`num_slots`, `num_seqs`, `padded_tokens`): what does a padded decode step compute that a continuous one does not?
'''),
]
