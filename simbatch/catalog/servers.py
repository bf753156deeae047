"""Serving engines: what a real server spends besides GPU kernels, and the memory it holds back.

A cost model prices a step's kernels. A real serving engine adds two things
that matter under load, and the scenario's ``engine:`` section models both:

- **Engine overhead** per step, outside the GPU kernels: scheduling, building
  the step's input tensors, sampling, detokenising, and hops between
  processes (vLLM behind Ray pickles every running sequence's metadata to its
  worker and the outputs back, each step). Before vLLM overlapped it with the
  GPU (v0.6, Sept 2024) this time was serial with the kernels, so it adds to
  the step: ``step_s + per_seq_s x sequences + per_token_s x tokens`` (Vidur
  profiles the same pieces of vLLM: schedule, prepare inputs, sampler,
  process outputs, Ray communication, each as a function of the batch).
- **Front-end latency** per request: from the client's send to the
  scheduler seeing it (HTTP, the tokeniser, the hop into the engine process):
  ``request_s``, added to every latency of the request, never to a step.
- **Memory held back from the KV cache.** Each engine sizes its KV pool as
  ``total memory x gpu_memory_utilization - what it holds back``, by its own
  rule. vLLM v0 (``Worker.profile_num_available_blocks``, v0.1.7 to v0.2.3 at
  least; DistServe's measured baseline is v0.2.3, see the preset) runs one dummy forward pass of
  ``max_num_batched_tokens`` tokens over ``max_num_seqs`` sequences and holds
  back ``torch.cuda.max_memory_allocated()`` after it: the weights and that
  pass's activations, nothing outside PyTorch (``profile_activations``).
  Later vLLM releases measure ``total - free`` instead, which adds the CUDA
  context and library workspaces (``non_torch_gib``). DistServe
  (``distserve/worker.py``, ``_profile_num_available_blocks``) profiles
  nothing: it holds back its weight estimate and 1 % of the total memory
  (``reserve_fraction``).

Presets name real engines; their overhead figures were fitted by
``simbatch calibrate --from-log`` on the measured runs they cite (only the
runs at 2 req/s or less for vLLM), and nothing in them depends on a file or a
rate. ``preset: none`` (the default) keeps the cost model's own
``step_overhead_s`` / ``per_seq_overhead_s`` and holds no memory back, as
simbatch always did. See docs/cost_models.md, "Engine overhead".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from simbatch.catalog.models import ModelSpec
from simbatch.core.horizon import MAX_STEP_S, MAX_TIME_S
from simbatch.errors import SimbatchError

GiB = 1 << 30
OVERHEAD_TERMS = ("step_s", "per_seq_s", "per_token_s")
FITTED_TERMS = (*OVERHEAD_TERMS, "request_s")  # what `calibrate --from-log` fits
# Bytes the dummy pass's sampler holds per logit: vLLM v0.2's sampler (top-k/top-p
# requested by the profiling run) keeps the fp32 logits, their softmax and log-softmax
# and the sorted copy (4 bytes each) and the sort's int64 indices (8 bytes). V1's
# _dummy_sampler_run asks for top-k and top-p too (temperature 0.5, top_p 0.9, top_k
# vocab - 1) on [max_num_seqs, vocab] logits cast to float32, whose PyTorch path
# (apply_top_k_top_p) sorts them the same way: one figure for both.
SAMPLER_BYTES_PER_LOGIT = 4 * 4 + 8
# The memory rules of vLLM V1 (vllm/v1/worker/gpu_worker.py, Worker.determine_available_memory):
# KV = total x utilisation - (weights + the profile run's torch peak + memory outside PyTorch);
# the profile run is _dummy_run(max_num_batched_tokens) spread over max_num_seqs requests
# (attention metadata None: no attention kernel) then _dummy_sampler_run on their last
# tokens; CUDA graphs are captured after the pool is allocated, out of the 1 - utilisation
# headroom. What "outside PyTorch" counts differs by release:
# - 0.8.x: device used after the profile run minus torch's allocations: the CUDA context,
#   cuBLAS / NCCL workspaces. PR #2031 (vllm-project/vllm, 2023-12) measured that gap on an
#   A100-80GB at TP1 (Llama-2-7B): 98 blocks of 8 MiB = 0.77 GiB.
# - 0.9 on (memory_profiling, vllm/utils): only what grew outside PyTorch since the baseline
#   snapshot taken after the CUDA context and NCCL came up; no source states its size, so
#   it is fitted: on the one shared run that records its block count (vLLM 0.19, Llama-3.1-8B,
#   RTX 4090: 2,588 blocks), which that run therefore does not check.
#   VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (PR #30515) deducts graph memory only from
#   v0.21.0 on (off before), so graph_gib is 0 here.
V1_CONTEXT_GIB = 0.77
V1_NON_TORCH_INCREASE_GIB = 0.39

# Each preset: the overhead terms (seconds) and the engine's KV sizing rule: whether it
# profiles activations at start-up, the memory it counts outside PyTorch (GiB), the share
# of the GPU's memory it holds back.
PRESETS: dict[str, dict] = {
    "none": {},
    # vLLM v0.2.3 (v0 engine, no CUDA graphs), DistServe's baseline: its evaluation docs say
    # "We use version v0.2.3"; the fork's v0.2.3 branch got its timing changes from 2024-04-13
    # on and the measured logs were committed on 2024-04-23, while the fork's v0.1.7 branch
    # changes only from 2024-04-25. Its scheduler pads prompt batches (policy max_paddings in
    # scenarios/vllm_opt13b_a100.yaml). Started with --engine-use-ray --worker-use-ray, as DistServe's artifact ran it
    # (shared/measured/README.md). Overhead fitted (`simbatch calibrate --from-log`,
    # roofline cost model) on vllm-100-1, vllm-150-1.5, vllm-100-2 and vllm-200-2
    # (OPT-13B, one A100-80GB), checked on vllm-250-2.5 and vllm-300-3
    # (benchmarks/bench_fidelity.py), before the scenario had v0.2.3's padded prompt batches:
    # refitted with them (step 5.73 ms, 0.758 ms a sequence, front end 37 ms) the held-out
    # TPOT p50 goes to +32 %/+28 %, so these terms stay (README, "How accurate is it?").
    # The memory terms are not fitted: v0.2.3 holds
    # back max_memory_allocated() after its profiling pass (weights + activations).
    "vllm-0.2-ray": {"step_s": 8.09e-3, "per_seq_s": 5.21e-4, "per_token_s": 0.0, "request_s": 3.26e-2,
                     "profile_activations": True},
    # DistServe (OSDI'24) on SwiftTransformer kernels behind Ray, one prefill and one
    # decode instance; fitted the same way on its 3 and 4.5 req/s runs (OPT-13B,
    # prefill TP2 + decode TP1), checked on 6-12 req/s. Its workers profile nothing:
    # they hold back the weights and 1 % of the total memory (distserve/worker.py).
    # vLLM V1 as released in 0.8.x (April-May 2025; the llm-d runs of shared/measured used the
    # vllm/vllm-openai:latest image of 2025-05-02, v0.8.5): its memory rule (above). The
    # scheduler is simbatch's chunked_prefill policy (V1 always chunks), whose knobs the
    # release's API-server defaults fill where a scenario leaves them out (V1_DEFAULTS below).
    "vllm-0.8": {"profile_activations": True, "rope_cache": True, "non_torch_gib": V1_CONTEXT_GIB},
    # vLLM 0.19 (2026): the baseline-relative memory rule (above); async scheduling on by default.
    "vllm-0.19": {"profile_activations": True, "rope_cache": True, "non_torch_gib": V1_NON_TORCH_INCREASE_GIB},
    "distserve": {"step_s": 4.52e-3, "per_seq_s": 1.70e-4, "per_token_s": 8.81e-6, "request_s": 1.10e-2,
                  "reserve_fraction": 0.01},
    # Sarathi-Serve (OSDI'24; github.com/microsoft/sarathi-serve at ceaa066, osdi-sarathi-serve),
    # the research engine behind shared/measured/sarathi-serve-a100: eager PyTorch (no CUDA graph
    # in sarathi/), a Python call per layer and operator, every step a Ray call to the workers
    # (BaseLLMEngine.step -> _run_workers -> ray.get). launch_s: the CPU's time to issue one
    # forward, which the GPU waits out when its kernels are shorter (decode) and hides behind
    # them otherwise (prefill chunks); step_s / per_seq_s: the CPU work serial with the GPU.
    # Fitted by calibration/fit_sarathi_engine.py on figure 2 (Yi-34B TP2, A100-80GB PCIe, the
    # roofline at its defaults); table 2 and figure 9 held out (benchmarks/bench_fidelity.py sarathi).
    # The memory rule is not modelled (none of its runs records a block count).
    "sarathi-serve": {"launch_s": 4.17e-2, "step_s": 6.36e-3, "per_seq_s": 1.19e-3},
}


# The API server's scheduler defaults of each V1 release, by the GPU's memory (vllm/engine/
# arg_utils.py, EngineArgs._set_default_args_v1): (max_num_batched_tokens, max_num_seqs).
# 0.8.x: GPUs of 70 GiB or more get 8,192 / 1,024 (PR #17073, merged 2025-04-23), others 2,048 /
# 256; from PR #17885 (2025-05-09) on, A100s keep the small defaults (the 0.19 rule). V1 always
# chunks prefills (chunked prefill cannot be turned off), so they apply to chunked_prefill.
LARGE_GPU_GIB = 70
V1_DEFAULTS = {"large": (8192, 1024), "small": (2048, 256)}


def v1_scheduler_defaults(preset: str, gpu_name: str, gpu_memory_bytes: float) -> dict | None:
    """``{max_num_batched_tokens, max_num_seqs}`` the vLLM V1 release ``preset`` gives its API
    server on this GPU, or None for an engine without such defaults."""
    if preset not in ("vllm-0.8", "vllm-0.19"):
        return None
    large = gpu_memory_bytes >= LARGE_GPU_GIB * GiB and (preset == "vllm-0.8" or "a100" not in gpu_name.lower())
    tokens, seqs = V1_DEFAULTS["large" if large else "small"]
    return {"max_num_batched_tokens": tokens, "max_num_seqs": seqs}


def with_engine_defaults(policy: dict, engine_spec, gpu_name: str, gpu_memory_bytes: float,
                         chunked: bool) -> dict:
    """``policy`` (a scenario's ``policy:`` mapping) with the knobs it leaves out filled by the
    engine release's defaults: a vLLM V1 preset's scheduler budget and sequence cap for a
    chunked-prefill policy (``chunked``: the policy's class is chunked prefill's or a subclass;
    :func:`v1_scheduler_defaults`); other policies unchanged."""
    preset = engine_spec.get("preset") if isinstance(engine_spec, dict) else engine_spec
    defaults = v1_scheduler_defaults(preset, gpu_name, gpu_memory_bytes) if isinstance(preset, str) else None
    if not defaults or not chunked:
        return policy
    budget_given = any(k in policy for k in ("max_num_batched_tokens", "chunk_size"))
    filled = {k: v for k, v in defaults.items() if k not in policy
              and not (k == "max_num_batched_tokens" and budget_given)}
    return {**policy, **filled} if filled else policy


@dataclass(frozen=True)
class EngineParams:
    """The scenario's ``engine:`` section, resolved: a preset overlaid with explicit fields."""

    preset: str = "none"
    step_s: float | None = None
    per_seq_s: float | None = None
    per_token_s: float | None = None
    request_s: float = 0.0  # front end: client send -> scheduler (HTTP, tokeniser, process hops)
    # The CPU's time to issue a step's kernels (eager engines): the step's kernels take at least
    # this long (the cost model's launch_floor_s; 0: not modelled).
    launch_s: float = 0.0
    profile_activations: bool = False
    non_torch_gib: float = 0.0  # memory outside PyTorch the engine counts (CUDA context, NCCL, ...)
    graph_gib: float = 0.0  # CUDA-graph memory the engine deducts before sizing the pool
    # vLLM loads a rotary model's cos/sin cache beside the weights: max_position x head_dim in
    # the model's dtype, one buffer shared by every layer (model_executor/layers/rotary_embedding);
    # "Model loading took 14.9889 GiB" for Llama-3.1-8B (PR #17122) is its 14.957 GiB of
    # parameters plus this 0.031 GiB.
    rope_cache: bool = False
    reserve_fraction: float = 0.0  # share of the GPU's total memory held back (DistServe: 0.01)

    @property
    def is_plain(self) -> bool:
        """True when the scenario models no serving engine (every field at its default)."""
        return self == EngineParams()

    @property
    def has_overhead(self) -> bool:
        """True when the engine sets the step overhead (else the cost model's own applies)."""
        return any(getattr(self, k) is not None for k in OVERHEAD_TERMS)

    def overhead_params(self) -> dict[str, float]:
        """The cost model parameters these terms set (missing terms are 0; the launch floor only
        where set)."""
        launch = {"launch_floor_s": self.launch_s} if self.launch_s else {}
        if not self.has_overhead:
            return launch
        return {"step_overhead_s": self.step_s or 0.0, "per_seq_overhead_s": self.per_seq_s or 0.0,
                "per_token_overhead_s": self.per_token_s or 0.0, **launch}

    def describe(self) -> dict:
        """Every field, for ``summary.json``."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def memory_terms(self, model: ModelSpec, tensor_parallel: int, policy,
                     gpu_memory_bytes: float) -> dict[str, float]:
        """Bytes per GPU this engine holds back from the KV cache, by term (the names of
        :func:`simbatch.catalog.kv_budget.size_budget`), for a replica running a policy with
        parameters ``policy`` (its step budget and ``max_num_seqs`` size the profiling pass;
        a policy without a budget profiles only its sampler) on a GPU of ``gpu_memory_bytes``."""
        activations = profiling_peak_bytes(model, tensor_parallel, *profiling_shape(policy)) \
            if self.profile_activations else 0.0
        return {"activation_bytes": activations, "graph_bytes": self.graph_gib * GiB,
                "other_bytes": self.non_torch_gib * GiB + self.reserve_fraction * gpu_memory_bytes}

    def loaded_extra_bytes(self, model: ModelSpec) -> float:
        """Bytes per GPU the engine loads beside the parameters (the rotary cache; OPT, the
        one preset with a plain MLP, learns its positions instead)."""
        return float(model.max_context * model.head_dim * model.dtype_bytes) \
            if self.rope_cache and model.gated_mlp else 0.0

    def reserved_bytes(self, model: ModelSpec, tensor_parallel: int, policy,
                       gpu_memory_bytes: float) -> float:
        """Every byte per GPU :meth:`memory_terms` holds back, added up."""
        return sum(self.memory_terms(model, tensor_parallel, policy, gpu_memory_bytes).values())


def profiling_shape(policy) -> tuple[int, int]:
    """(tokens, sequences) of the start-up dummy pass for a policy's parameters (vLLM: the
    step budget over ``max_num_seqs`` sequences; padded batches: their batch size)."""
    tokens = getattr(policy, "budget", None) or getattr(policy, "max_num_batched_tokens", None) or 0
    seqs = next((v for v in (getattr(policy, k, None) for k in ("max_num_seqs", "batch_size", "max_batch_size"))
                 if v), 0)
    return int(tokens), int(seqs)


def profiling_peak_bytes(model: ModelSpec, tensor_parallel: int, tokens: int, seqs: int) -> float:
    """Peak activation bytes per GPU of one forward pass of ``tokens`` tokens whose last
    tokens of ``seqs`` sequences are sampled: the larger of the layer's widest moment
    (residual and hidden states, the MLP's up projection and its activation) and the
    sampler's logits; the caching allocator reuses one for the other."""
    tp, dt = tensor_parallel, model.dtype_bytes

    def mlp(width: int, rows: int) -> int:  # the MLP's up projection and its activation
        return rows * ((2 if model.gated_mlp else 1) * width // tp + width // tp)

    widest = mlp(model.intermediate_size, tokens) if model.num_dense_layers or not model.is_moe else 0
    if model.is_moe:  # each token's rows through its experts (the fused MoE kernel's buffers)
        widest = max(widest, mlp(model.moe_intermediate_size, tokens * model.experts_per_token))
    forward = dt * (tokens * 2 * model.hidden_size + widest)
    sampler = min(seqs, tokens or seqs) * model.vocab_size * SAMPLER_BYTES_PER_LOGIT
    return float(max(forward, sampler))


def parse_engine(spec, where: str) -> EngineParams:
    """``engine:`` as a preset name or ``{preset, step_s, per_seq_s, per_token_s, request_s, launch_s,
    profile_activations, non_torch_gib, graph_gib, rope_cache, reserve_fraction}``; fields given override the
    preset's."""
    if spec is None:
        return EngineParams()
    if isinstance(spec, str):
        spec = {"preset": spec}
    if not isinstance(spec, dict):
        raise SimbatchError(where, f"expected a preset name or a mapping, got {type(spec).__name__}")
    names = [f.name for f in fields(EngineParams)]
    for key in spec:
        if key not in names:
            raise SimbatchError(f"{where}.{key}", f"unknown field; allowed: {', '.join(names)}")
    preset = spec.get("preset", "none")
    if not isinstance(preset, str) or preset not in PRESETS:  # a list is no name (nor hashable)
        raise SimbatchError(f"{where}.preset", f"unknown engine {preset!r}; presets: {', '.join(PRESETS)}")
    values = {**PRESETS[preset], **{k: v for k, v in spec.items() if k != "preset"}}
    for key, value in values.items():
        _check(key, value, f"{where}.{key}")
    return replace(EngineParams(preset=preset), **values)


# Bounds on the engine's figures, so that simulated time stays within its horizon
# (simbatch.core.horizon). Each time term (a field in seconds, named *_s) is a fixed cost a step
# (or, request_s, a request's latency) pays per step, sequence or token: at most MAX_STEP_S
# (1,000 s, a million steps of which fill the horizon; the fitted presets' are milliseconds).
# request_s of 1e300 gave a TTFT of 1e303 ms and a TPOT of 0.0 ms (every later figure rounded
# away). A memory term over MAX_HELD_GIB (thousands of times the largest GPU's 256 GiB) holds
# back more than any GPU has (1e300 GiB made the KV pool NaN).
MAX_HELD_GIB = 1e6
_MEMORY_TERMS = ("non_torch_gib", "graph_gib")


def _check(key: str, value, where: str) -> None:
    """One field of ``engine:``: true/false for the switches, else a number >= 0 within its
    bound (above)."""
    if key in ("profile_activations", "rope_cache"):
        if not isinstance(value, bool):
            raise SimbatchError(where, f"expected true or false, got {value!r}")
        return
    if value is None and key in OVERHEAD_TERMS:
        return
    # 0 <= value < inf, not math.isfinite: an integer past a float's range must not overflow
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise SimbatchError(where, f"expected a finite number >= 0, got {_short(value)}")
    if key.endswith("_s") and value > MAX_STEP_S:
        raise SimbatchError(where, f"expected at most {MAX_STEP_S:,.0f} s (a million such steps fill simulated "
                                   f"time's horizon of {MAX_TIME_S:.0e} s), got {_short(value)}")
    if key in _MEMORY_TERMS and value > MAX_HELD_GIB:
        raise SimbatchError(where, f"expected at most {MAX_HELD_GIB:,.0f} GiB (thousands of times any GPU's "
                                   f"memory), got {_short(value)}")
    if key == "reserve_fraction" and value >= 1:
        raise SimbatchError(where, f"expected a share of the GPU's memory below 1, got {value!r}")


def _short(value) -> str:
    """A value for a message: an integer too long to print whole by its size in bits."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)
