"""What a model's shape costs the roofline beyond its GEMMs: the linear layers' rate under
weight quantisation, the memory-bound elements of norms and activations, the fused MoE
kernel's block rows, and the checks of tensor and expert parallelism against the shape.
"""

from __future__ import annotations

from simbatch.catalog.hardware import GPUSpec
from simbatch.catalog.models import ModelSpec
from simbatch.catalog.parallelism import SLICED, ExpertLayout
from simbatch.errors import SimbatchError

# Rows of one expert's block in the fused MoE kernel: vLLM's moe_align_block_size pads each
# expert's tokens to BLOCK_SIZE_M, 16 in its default configurations for small batches
# (vllm/model_executor/layers/fused_moe/fused_moe.py, get_default_config).
MOE_BLOCK_ROWS = 16


# Token rows of one tile of a weight-only quantised GEMM: Marlin (IST-DASLab/marlin, used by
# vLLM for GPTQ/AWQ int4 and for FP8 weights on GPUs without FP8 tensor cores) computes
# 16 x 256 output tiles and is designed for batches of 1-32 tokens.
MARLIN_TILE_TOKENS = 16


def dequantises(model: ModelSpec, gpu: GPUSpec) -> bool:
    """True when the linear layers' weights are quantised but computed at the 16-bit rate
    (int4, or fp8 / int8 on a GPU without those tensor cores): weight-only kernels."""
    return model.weight_quant != "none" and linear_rate(model, gpu) == gpu.peak_flops


def linear_rate(model: ModelSpec, gpu: GPUSpec) -> float:
    """Peak FLOP/s of the linear layers: FP8 or INT8 tensor cores for weights in that format
    where the GPU has them (activations quantised on the fly: W8A8), else the 16-bit rate
    (int4, and FP8 on GPUs without FP8, dequantise the weights inside the GEMM: W4A16 / W8A16)."""
    if model.weight_quant == "fp8" and gpu.fp8_flops:
        return gpu.fp8_flops
    if model.weight_quant == "int8" and gpu.int8_flops:
        return gpu.int8_flops
    return gpu.peak_flops


def quantized_kept_seconds(m: ModelSpec, gpu: GPUSpec, tp: int, p: dict, layout: ExpertLayout = SLICED) -> float:
    """Extra compute-side seconds per token of the linear layers when their weights run on
    tensor cores ``s`` times faster than the 16-bit ones (FP8 or INT8, W8A8): the share of the
    fitted linear term that such a rate does not speed up. 0 at the 16-bit rate (also for the
    weight-only int4 / FP8-on-Ampere kernels), so 16-bit prices are unchanged.

    ``compute_eff`` was fitted on 16-bit layers (Vidur's A100 profiles, ``DEFAULT_PARAMS``):
    the fitted linear term includes work that is not tensor-core arithmetic and is bound by
    memory instead, and dividing the whole term by ``s`` would shrink that too:

    * **the GEMM epilogues**: each GEMM writes its output rows (16-bit for FP8 inputs too)
      after its K loop. tile-ai/tilelang's H800-SXM (H100-SXM compute) sweeps of
      8192 x 8192 x K GEMMs show this part keeping its time when the MMA rate doubles
      (xwhzz/tilelang at commit b2acfc37, benchmark/matmul/README.md for FP16 and
      benchmark/matmul_fp8/README.md for FP8): the FP16 times fit ``a K + 41 us``, 41 us
      being the 8192 x 8192 x 2-byte output written at 3.35 TB/s, and ``a K / 2 + 41 us``
      predicts the FP8 sweep within 6 % for K = 256..16,384, where halving the whole time
      is 36 % too fast at K = 256 and 11 % at K = 1,024 (docs/cost_models.md).
    * **the layer's elementwise kernels** (two RMSNorms, RoPE, the gated activation, the
      residual adds): memory-bound, the same for FP8 weights. In Vidur's A100 timings they
      take 4-9 % of a layer at TP1 (Llama-2-70B: 4.3 %, growing to 13.3 % at TP8, since
      every GPU normalises the whole hidden state).

    Both are priced as their bytes at ``bw_eff`` (``X`` per token: see
    :func:`memory_bound_elements`); of the fitted term ``T16 = G + X`` only ``G`` speeds
    up, so ``T = T16 / s + X (1 - 1/s)``: the second part is returned. The GEMM ramp and
    tile padding stay in tokens (the last partial wave of tiles runs at the faster rate too).
    """
    speedup = linear_rate(m, gpu) / gpu.peak_flops
    if speedup == 1.0:
        return 0.0
    kept = m.dtype_bytes * memory_bound_elements(m, tp, layout) / (gpu.hbm_bandwidth * p["bw_eff"])
    return (kept + attention_16bit_seconds(m, gpu, tp, p)) * (1.0 - 1.0 / speedup)


def attention_16bit_seconds(m: ModelSpec, gpu: GPUSpec, tp: int, p: dict) -> float:
    """Per token, the part of the attention projections' fitted 16-bit time that the faster
    rate must not speed up when they stay in 16 bits (``attention_16bit``): all of it, less
    their output rows, which :func:`quantized_kept_seconds` keeps already; 0 otherwise. The
    GEMM ramp and tile padding stay at the faster rate (a few tokens' worth)."""
    if not m.attention_16bit:
        return 0.0
    q, kv = attention_widths(m, tp)
    gemm = 2.0 * m.num_layers * m.attention_params(tp) / (gpu.peak_flops * p["compute_eff"])
    outputs = m.dtype_bytes * m.num_layers * (q + 2 * kv + m.hidden_size) / (gpu.hbm_bandwidth * p["bw_eff"])
    return gemm - outputs


def attention_widths(m: ModelSpec, tp: int) -> tuple[int, int]:
    """Per GPU, the query width and one K / V width (MLA: its latent) of a layer."""
    if m.is_mla:
        return m.num_heads // tp * m.head_dim, m.kv_lora_rank + m.qk_rope_head_dim
    return m.q_size // tp, max(1, m.num_kv_heads // tp) * m.head_dim


def memory_bound_elements(m: ModelSpec, tp: int, layout: ExpertLayout = SLICED) -> int:
    """16-bit elements per token per GPU, over all layers, of the linear term's memory-bound
    work: the GEMMs' output rows (QKV, O, gate/up and down; a token's ``k`` routed experts)
    and the elementwise kernels, ``7 h + 2 (q + kv)`` per layer for the two norms, the
    residual adds and RoPE plus the gated activation's inputs and output (the counts of
    ``whatif``'s ``misc_layer``)."""
    h = m.hidden_size
    q, kv = attention_widths(m, tp)

    def mlp(width: int, part: int) -> int:  # up (and gate) out, down out; activation in and out
        w = width // part
        up = (2 if m.gated_mlp else 1) * w
        return (up + h) + (up + w) if width else 0

    moe = m.num_moe_layers
    # Routed experts: sliced over TP, each GPU runs its slice of every token's k experts;
    # whole under expert parallelism, each GPU runs 1/tp of the token-expert rows (the mean)
    k = m.experts_per_token
    routed = (k * mlp(m.moe_intermediate_size, 1) // tp if layout.expert_parallel
              else k * mlp(m.moe_intermediate_size, tp))
    attn = (q + 2 * kv + h) + (7 * h + 2 * (q + kv))  # QKV and O outputs; norms, adds, RoPE
    return (m.num_layers * attn + (m.num_layers - moe) * mlp(m.intermediate_size, tp)
            + moe * (mlp(m.shared_expert_intermediate_size, tp) + routed))


def activation_elements(m: ModelSpec, tp: int) -> int:
    """Activation elements the dense GEMMs (all but the routed experts) read and write per
    token per GPU, over all layers: each GEMM's input and output row."""
    h, heads = m.hidden_size, m.num_heads // tp
    if m.is_mla:
        nope = m.head_dim - m.qk_rope_head_dim
        q = (h + m.q_lora_rank + m.q_lora_rank + heads * m.head_dim) if m.q_lora_rank else h + heads * m.head_dim
        kv = h + m.kv_lora_rank + m.qk_rope_head_dim + m.kv_lora_rank + heads * (nope + m.v_head_dim)
        attn = q + kv + heads * m.v_head_dim + h
    else:
        q, kv = m.q_size // tp, max(1, m.num_kv_heads // tp) * m.head_dim
        attn = h + q + 2 * kv + q + h  # QKV in and out, O in and out

    def mlp(width: int) -> int:  # up (and gate) in and out, down in and out
        w = width // tp
        return h + (2 if m.gated_mlp else 1) * w + w + h if width else 0

    moe = m.num_moe_layers
    return (m.num_layers * attn + (m.num_layers - moe) * mlp(m.intermediate_size)
            + moe * (mlp(m.shared_expert_intermediate_size) + h + m.num_experts))  # router: h in, E out


def check_tensor_parallel(tp, model: ModelSpec, where: str) -> int:
    """A valid tensor-parallel degree for ``model``: it must split heads evenly."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise SimbatchError(where, f"must be a positive integer, got {tp!r}")
    kv = model.num_kv_heads
    if model.num_heads % tp or (kv % tp and tp % kv):
        raise SimbatchError(where, f"{tp} does not split {model.name}'s {model.num_heads} heads "
                                   f"/ {kv} KV heads evenly")
    return tp


def check_expert_parallel(model: ModelSpec, layout: ExpertLayout, tp: int, where: str) -> int:
    """GPUs the routed experts are spread over: ``tp`` under expert parallelism (vLLM's
    ``--enable-expert-parallel`` without data parallelism: the EP group is the TP group),
    ``tp x attention_data_parallel`` under data-parallel attention (vLLM's ``ep_size = dp x
    tp``), else 1 (every GPU holds a slice of every expert). The experts must split evenly."""
    if not layout.expert_parallel:
        return 1
    if not model.is_moe:
        raise SimbatchError(where, f"applies to a mixture of experts; {model.name} is dense")
    dp = layout.attention_data_parallel
    ep = tp * dp
    if model.num_experts % ep:
        raise SimbatchError(where, f"{ep} GPUs (tensor_parallel {tp} x {dp} data-parallel "
                                   f"ranks) do not split {model.name}'s {model.num_experts} experts evenly"
                            if dp > 1 else
                            f"tensor_parallel {tp} does not split {model.name}'s {model.num_experts} "
                            f"experts evenly over its GPUs")
    if (model.num_experts + layout.redundant_experts) % ep:
        raise SimbatchError("cluster.redundant_experts", f"{model.num_experts} experts + {layout.redundant_experts} "
                                                         f"redundant do not split evenly over {ep} GPUs")
    return ep
