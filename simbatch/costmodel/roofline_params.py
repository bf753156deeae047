"""The roofline's parameters: each default with the measurement it was fitted to or the source
it was read from, and the check of a scenario's ``cost_model:`` overrides.
"""

from __future__ import annotations

import math

from simbatch.errors import SimbatchError

DEFAULT_PARAMS: dict[str, float] = {
    # Linear layers, FITTED (least squares on log time, all TP1 rows up to 4096
    # tokens of the three A100-80GB profiles: Llama-2-7B, Llama-3-8B and
    # Llama-2-70B) to Vidur's per-operator timings (microsoft/vidur,
    # data/profiling/ at commit 7d47513, copied to shared/reference/
    # gpu_profiles/a100/*_mlp.csv), jointly with gemm_ramp_tokens below
    # (calibration/fit_roofline_vidur.py reproduces all three): the per-layer
    # median of every non-attention op but the embedding, i.e. the QKV, O,
    # gate+up and down GEMMs plus the two norms, RoPE, SiLU-mul and the
    # residual add, which the linear term must also pay for (~10% of it).
    # These are effective rates, a little below pure-GEMM ones (0.72 / 0.68).
    "compute_eff": 0.685,
    "bw_eff": 0.66,
    # GEMM tile quantization: cuBLAS tiles the token dimension by 128, so 129
    # tokens cost like 256 on the compute side (visible as steps in Vidur's
    # profile; modelling it cuts the worst error on 7B from 33% to 14%).
    "gemm_tile_tokens": 128,
    # GEMM efficiency ramp over the token dimension M: a GEMM's efficiency
    # rises as eff(M) = M / (M + gemm_ramp_tokens) of compute_eff and
    # saturates, i.e. every GEMM pays a fixed tail worth gemm_ramp_tokens
    # tokens (the last, partly filled wave of output tiles over the SMs, the
    # pipeline fill and drain of each tile's K loop). The compute side costs
    # max(tile-padded tokens, M + gemm_ramp_tokens): both are lower bounds, and
    # below a tile the padding already dominates. FITTED with compute_eff /
    # bw_eff above: Vidur's Llama-2-70B GEMMs run ~8% slower per token at
    # 512-1024 tokens than at 2048-4096 (the 7B/8B ones barely change), which
    # a tail of 64 tokens reproduces on average; it cuts the 70B RMS error
    # from 8.1% to 6.2% (RMS log error over all TP1 rows of the three models:
    # 0.061 -> 0.056; 7B / 8B 5.0 / 4.9% -> 5.2 / 5.2%).
    "gemm_ramp_tokens": 64,
    # Attention, NOT fitted. Prefill: FlashAttention-2 (Dao, 2023) reaches
    # 50-73% of A100 peak in the forward pass, the low end for the short,
    # causal, variable-length sequences of serving. Decode: paged decode
    # kernels (vLLM PagedAttention, FlashInfer, Flash-Decoding) are
    # bandwidth-bound and get close to peak only on long contexts; 0.7 is a
    # middle value. A measured `profile` cost model should replace both.
    "attn_compute_eff": 0.5,
    "attn_bw_eff": 0.7,
    # All-reduce: Vidur's A100 NCCL profiles (pairwise NVLink and DGX, 2-8
    # GPUs, 50-100 MB messages) move ~200 GB/s per direction against the
    # datasheet's 300 GB/s.
    "allreduce_eff": 0.65,
    # CPU time per step the GPU waits for (scheduling, input preparation,
    # sampling, launch). vLLM >= 0.6 overlaps most of it with the GPU (async
    # output processing, multi-step / async scheduling); ~1 ms is what stays
    # exposed. Before that, vLLM's blog (Sept 2024) measured the GPU busy only
    # 38% of the time for Llama-3-8B on an H100: set several ms to model that.
    "step_overhead_s": 1e-3,
    "per_seq_overhead_s": 0.0,
    # Engine CPU time per token of the step (building per-token input lists, as
    # vLLM v0 did in Python); a serving engine's preset sets it (simbatch.catalog.servers).
    "per_token_overhead_s": 0.0,
    # The least time a step's kernels take: the CPU's time to issue them. An eager engine
    # (PyTorch without CUDA graphs, a Python call per layer and operator) launches kernels
    # asynchronously, so the GPU waits for the CPU only while its kernels are shorter than
    # that: a step costs max(kernels, launch_floor_s) + overhead, the difference shown as
    # "launch_wait". 0 (the default): not modelled (CUDA graphs, or kernels that always take
    # longer). A serving engine's preset sets it (simbatch.catalog.servers: sarathi-serve).
    "launch_floor_s": 0.0,
}


_EFFICIENCIES = ("compute_eff", "bw_eff", "attn_compute_eff", "attn_bw_eff", "allreduce_eff")


def check_params(params: dict, where: str) -> dict[str, float]:
    """Defaults overlaid with ``params``, after checking names and ranges."""
    out = dict(DEFAULT_PARAMS)
    for key, value in params.items():
        here = f"{where}.{key}"
        if key not in DEFAULT_PARAMS:
            raise SimbatchError(here, f"unknown roofline parameter; allowed: {', '.join(DEFAULT_PARAMS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SimbatchError(here, f"must be a finite number, got {value!r}")
        if key in _EFFICIENCIES and not 0 < value <= 1:
            raise SimbatchError(here, f"must be in (0, 1], got {value!r}")
        if key == "gemm_tile_tokens" and (value < 1 or value != int(value)):
            raise SimbatchError(here, f"must be a positive integer (1 disables tiling), got {value!r}")
        if value < 0:
            raise SimbatchError(here, f"must be >= 0, got {value!r}")
        out[key] = value
    return out
