"""An analytic roofline cost model: a step's time from FLOPs, bytes and two rates.

Each kernel group of one engine step (the linear layers, the LM head, prefill
attention, decode attention, a mixture's routed experts) takes ``max(FLOPs /
effective peak, bytes / effective bandwidth)``; tensor-parallel all-reduces (and,
under expert parallelism with ``all2all`` dispatch, the MoE layers' all-to-alls)
and a fixed CPU overhead are added on top. Kernels run one after another, so the
parts add up; an eager engine's kernels take at least its launch floor (``launch_floor_s``).

Everything that does not depend on the plan is precomputed per GPU for the
whole model in ``__init__``; :meth:`RooflineCostModel.step_cost` only takes a
few C-level sums over the plan's lists (it runs once per simulated step).
"""

from __future__ import annotations

import math
from functools import reduce
from itertools import compress
from operator import add, mul

import numpy as np

from simbatch.catalog.hardware import GPUSpec, get_gpu
from simbatch.catalog.models import ModelSpec, get_model
from simbatch.core.plan import StepPlan
from simbatch.costmodel.base import NO_ATTN, AttnWork, StepCost, StepWork
from simbatch.costmodel.routing import ExpertLoad
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


class PricedByWork:
    """Cost models that price a step from its summed work (``price(work, kept, live)``).

    Besides :meth:`step_cost` they price the engine fast path's steps in O(1),
    through the same ``price`` and the same integers, so the seconds are
    bit-identical to pricing the plans themselves.
    """

    _floor = 0.0  # launch_floor_s (DEFAULT_PARAMS): the least seconds a step's kernels take

    def price(self, work: StepWork, kept: StepWork, live: int) -> StepCost:
        """The cost of a step computing ``work``, of which ``kept`` is not padding, over
        ``live`` non-padding slots."""
        raise NotImplementedError

    def launch_wait(self, kernels: float) -> float:
        """Seconds the GPU waits for the CPU to issue a step whose kernels take ``kernels``
        (``launch_floor_s`` in ``DEFAULT_PARAMS``); every pricing path uses this one expression."""
        return self._floor - kernels if kernels < self._floor else 0.0

    def overhead(self, work: StepWork, live: int) -> float:
        """The step's CPU-side seconds (``price``'s ``overhead`` part) for ``work`` over
        ``live`` sequences."""
        raise NotImplementedError

    def step_cost(self, plan: StepPlan) -> StepCost:
        """Seconds for one step, split by part; useful FLOPs/bytes exclude padding."""
        if plan.num_streams > 1:
            return self.streams_cost(plan)
        work, kept, live = plan_work(plan)
        return self.price(work, kept, live)

    def bounds(self, work: StepWork) -> tuple[float, float]:
        """(compute-bound, memory-bound) seconds of the GPU kernels of ``work``, summed over
        kernels (what overlapping streams can share); models without one raise."""
        raise NotImplementedError(f"{type(self).__name__} cannot price overlapping streams")

    def streams_cost(self, plan: StepPlan) -> StepCost:
        """A step issued as micro-batches on separate streams (``plan.micro_batches()``);
        see :meth:`price_streams`."""
        return self.price_streams([plan_work(m) for m in plan.micro_batches()])

    def price_streams(self, parts: list[tuple]) -> StepCost:
        """A step of micro-batches ``parts`` (``(work, kept, live)`` each) on separate streams.

        Streams share the GPU's compute and its memory bandwidth, so the kernels
        of all micro-batches together take at least the larger of their summed
        compute time and their summed memory time, and never less than the
        slowest micro-batch alone: ``max(sum C, sum M, max T_i)``, where ``T_i``
        is micro-batch ``i`` priced on its own. Every micro-batch reads the
        weights again, so splitting a batch that is already memory-bound costs
        time; overlapping a memory-bound decode with a compute-bound prefill
        saves it. All-reduces do not overlap; the step's overhead is the whole
        step's (once, with all its sequences and tokens). One part is priced as
        it is (a step of one phase is not split).
        """
        if len(parts) == 1:
            return self.price(*parts[0])
        costs = [self.price(*part) for part in parts]
        compute = memory = 0.0
        for work, _, _ in parts:
            c, m = self.bounds(work)
            compute, memory = compute + c, memory + m
        fixed = ("allreduce", "all_to_all", "overhead", "launch_wait")
        own = [sum(v for k, v in c.breakdown.items() if k not in fixed) for c in costs]
        overlapped = max(compute, memory, max(own))
        bd: dict[str, float] = {}
        for c in costs:
            for k, v in c.breakdown.items():
                bd[k] = bd.get(k, 0.0) + v
        whole = reduce(add_work, (part[0] for part in parts))
        bd["overhead"] = self.overhead(whole, sum(part[2] for part in parts))
        bd["stream_overlap"] = overlapped - sum(own)  # <= 0: time the streams hide
        if self._floor:  # the whole step's kernels against the floor, not each part's
            bd.pop("launch_wait", None)
            bd["launch_wait"] = self.launch_wait(sum(v for k, v in bd.items() if k != "overhead"))
        return StepCost(sum(bd.values()), bd, sum(c.useful_flops for c in costs),
                        sum(c.useful_bytes for c in costs))

    def decode_cost(self, num_seqs: int, context_sum: int) -> StepCost:
        """:meth:`step_cost` of ``num_seqs`` unpadded decode slots whose contexts sum to ``context_sum``."""
        work = decode_work(num_seqs, context_sum)
        return self.price(work, work, num_seqs)

    def mixed_cost(self, num_decodes: int, context_sum: int, chunk_new: list[int],
                   chunk_ctx: list[int], streams: int = 1) -> StepCost:
        """:meth:`step_cost` of ``num_decodes`` unpadded decode slots (contexts summing to
        ``context_sum``) followed by prefill chunks of ``chunk_new`` tokens over ``chunk_ctx``,
        on ``streams`` streams (2: decodes and chunks as two micro-batches, as
        ``StepPlan.micro_batches`` splits them)."""
        n, s = num_decodes, context_sum
        pre = _attn_sums(chunk_new, chunk_ctx)
        if streams > 1 and n and chunk_new:
            dec = decode_work(n, s)
            chunks = StepWork((pre.q_tokens, len(chunk_new) - chunk_new.count(0), NO_ATTN, pre))
            return self.price_streams([(dec, dec, n), (chunks, chunks, len(chunk_new))])
        work = StepWork((n + pre.q_tokens, n + len(chunk_new) - chunk_new.count(0), AttnWork((s + n, s + n, n)),
                         pre))
        return self.price(work, work, n + len(chunk_new))

    def padded_decode_costs(self, num_slots: int, num_live: list[int], contexts) -> tuple[list, list, list]:
        """:meth:`padded_decode_cost` of a run of steps, one per entry of ``contexts`` (and of
        ``num_live``, each step's live rows): (seconds, useful FLOPs, useful bytes), each a
        list. Cost models that can price the run at once override this; here it is one call
        per step."""
        costs = [self.padded_decode_cost(num_slots, int(n), int(c)) for n, c in zip(num_live, contexts)]
        return ([c.seconds for c in costs], [c.useful_flops for c in costs], [c.useful_bytes for c in costs])

    def padded_decode_cost(self, num_slots: int, num_live: int, context: int) -> StepCost:
        """:meth:`step_cost` of a padded batch's decode step: ``num_slots`` rows at context
        ``context``, of which ``num_live`` hold a live request (the rest compute padding)."""
        return self.price(decode_work(num_slots, num_slots * context),
                          decode_work(num_live, num_live * context), num_live)


class RooflineCostModel(PricedByWork):
    """Prices a :class:`StepPlan` with a per-kernel roofline (see the module docstring)."""

    name = "roofline"

    def __init__(self, model: ModelSpec | str | dict, gpu: GPUSpec | str | dict,
                 tensor_parallel: int = 1, **params: float):
        self.model = get_model(model, "model")
        self.gpu = get_gpu(gpu, "gpu")
        self.tensor_parallel = check_tensor_parallel(tensor_parallel, self.model, "tensor_parallel")
        self.expert_parallel = check_expert_parallel(self.model, self.tensor_parallel, "cluster.expert_parallel")
        self.params = check_params(params, "cost_model")
        self._precompute()
        self._stream_terms: dict[tuple[int, int], tuple] = {}  # _count_terms by (tokens, rows)

    def describe(self) -> dict:
        """Kind, source, what is priced, and every parameter (defaults included)."""
        m, moe = self.model, {}
        if m.expert_parallel:
            moe = {"expert_parallel": self.expert_parallel, "expert_dispatch": m.expert_dispatch}
            if m.attention_data_parallel > 1:
                moe["attention_data_parallel"] = m.attention_data_parallel
            if m.eplb:
                moe.update(eplb=True, redundant_experts=m.redundant_experts)
        if m.routing_skew:
            moe["routing_skew"] = m.routing_skew
        return {"kind": "roofline", "source": "analytic", "model": self.model.name,
                "gpu": self.gpu.name, "tensor_parallel": self.tensor_parallel, **moe, **self.params}

    def _precompute(self) -> None:
        """Per-GPU, whole-model constants: FLOPs and bytes per token, per row, per pair."""
        m, g, p, tp = self.model, self.gpu, self.params, self.tensor_parallel
        L, h, dt = m.num_layers, m.hidden_size, m.dtype_bytes
        # Weights every step reads whole: attention, dense MLPs, shared experts, routers.
        params = m.dense_layer_params(tp)
        self._lin_flops_tok = 2.0 * params
        # Attention kept in 16 bits (attention_16bit) adds its bytes over the quantised format.
        self._lin_weight_bytes = float(params * m.weight_bytes_per_param) + m.attention_kept_bytes(tp)
        # Activations each GEMM reads and writes, per token (see _activation_elements).
        self._lin_act_tok = float(dt * _activation_elements(m, tp))
        rate = linear_rate(m, g)
        self._lin_inv_flops = 1.0 / (rate * p["compute_eff"])
        self._inv_bw = 1.0 / (g.hbm_bandwidth * p["bw_eff"])
        self._tile = int(p["gemm_tile_tokens"])
        if _dequantises(m, g):  # weight-only kernels (Marlin) tile tokens by 16, built for small batches
            self._tile = min(self._tile, MARLIN_TILE_TOKENS)
        self._ramp = p["gemm_ramp_tokens"]
        self._floor = p["launch_floor_s"]
        # What a faster (FP8 / INT8) tensor-core rate does not speed up (0 at the 16-bit rate).
        self._lin_fixed_tok = quantized_kept_seconds(m, g, tp, p)
        self._moe = m.is_moe
        # Data-parallel attention: this replica is one of `dp` ranks whose GPUs share the routed
        # experts; priced with the other ranks as loaded as this one (docs/cost_models.md).
        self._dp = m.attention_data_parallel
        if self._moe:  # routed experts: priced per step from the experts its tokens touch
            # Tensor parallelism slices every expert over the GPUs; expert parallelism keeps
            # each whole on one GPU (E / ep of them a GPU).
            part = 1 if m.expert_parallel else tp
            expert = m.expert_params(part)
            self._expert_flops_row = 2.0 * m.num_moe_layers * expert  # one token through one expert
            self._expert_bytes = float(m.num_moe_layers * expert * m.weight_bytes_per_param)
            width = m.moe_intermediate_size // part
            self._expert_act_row = float(m.num_moe_layers * dt * (h + (2 if m.gated_mlp else 1) * width + width + h))
            self._load = ExpertLoad(m.num_experts, m.experts_per_token, self.expert_parallel, m.routing_skew,
                                    m.eplb, m.redundant_experts)
        # LM head (vocab-parallel, kept in 16 bits): one row of logits per slot.
        vocab = m.vocab_size / tp
        self._lm_inv_flops = 1.0 / (g.peak_flops * p["compute_eff"])
        self._lm_flops_row = 2.0 * h * vocab
        self._lm_weight_bytes = h * vocab * dt
        self._lm_act_row = (h + vocab) * dt
        # Attention: 2 FLOPs per (query, key) pair per head and QK width, 2 per value width.
        heads = m.num_heads // tp
        self._mla = m.is_mla
        if m.is_mla:
            # Prefill expands the latent into per-head K and V (head_dim, v_head_dim); decode
            # scores queries absorbed into the latent space against the cached latent itself
            # (kv_lora_rank + rope width for QK, kv_lora_rank for PV), as vLLM's MLA backends do
            # (DeepSeek-V2 paper, section 2.1.3).
            latent = m.kv_lora_rank + m.qk_rope_head_dim
            self._attn_flops_pair = 2.0 * heads * (m.head_dim + m.v_head_dim) * L
            self._attn_flops_pair_dec = 2.0 * heads * (latent + m.kv_lora_rank) * L
            self._attn_q_tok = float(L * heads * (m.head_dim + m.v_head_dim) * dt)
            self._attn_q_tok_dec = float(L * heads * (latent + m.kv_lora_rank) * dt)
        else:
            q = m.q_size // tp
            self._attn_flops_pair = self._attn_flops_pair_dec = 4.0 * q * L
            self._attn_q_tok = self._attn_q_tok_dec = float(L * 2 * q * dt)  # Q in, O out
        self._attn_kv_tok = float(m.kv_bytes_per_token_per_gpu(tp))
        self._attn_inv_flops = 1.0 / (g.peak_flops * p["attn_compute_eff"])
        self._attn_inv_bw = 1.0 / (g.hbm_bandwidth * p["attn_bw_eff"])
        # Two ring all-reduces per layer (after O and after down) of T x hidden; with all2all
        # dispatch the MoE layers' second one is replaced by a dispatch and a combine
        # (see _all_to_all_seconds).
        ep = self.expert_parallel
        self._a2a = self._moe and m.expert_parallel and m.expert_dispatch == "all2all" and ep > 1
        link = g.link_bandwidth * p["allreduce_eff"]
        if tp > 1:
            reduces = 2 * L - (m.num_moe_layers if self._a2a else 0)
            self._ar_tok = reduces * 2 * (tp - 1) / tp * h * dt / link
            self._ar_fixed = reduces * g.link_latency_s
        else:
            self._ar_tok = self._ar_fixed = 0.0
        # all-to-all: the bytes of one row a GPU receives from the other GPUs of the EP group
        self._a2a_row = (ep - 1) / ep * h * dt / link if ep > 1 else 0.0

    def price(self, work: StepWork, kept: StepWork, live: int) -> StepCost:
        """The step's cost from its summed work (:func:`plan_work`); ``live``: non-padding slots."""
        tokens, rows, dec, pre = work
        lin = self._linear_seconds(tokens)
        lm = max(rows * self._lm_flops_row * self._lm_inv_flops,
                 (self._lm_weight_bytes + rows * self._lm_act_row) * self._inv_bw) if rows else 0.0
        bd = {
            "linear": lin,
            "lm_head": lm,
            "attn_prefill": self.attn_seconds(pre),
            "attn_decode": self.attn_seconds(dec, decode=True),
            "allreduce": tokens * self._ar_tok + self._ar_fixed if tokens else 0.0,
            "overhead": self.overhead(work, live),
        }
        if self._moe:
            bd["experts"] = max(self._expert_bounds(tokens))
            if self._a2a:
                bd["all_to_all"] = self._all_to_all_seconds(tokens)
        if self._floor:
            bd["launch_wait"] = self.launch_wait(sum(v for k, v in bd.items() if k != "overhead"))
        flops, nbytes = self.counts(kept)
        return StepCost(sum(bd.values()), bd, flops, nbytes)

    def decode_cost(self, num_seqs: int, context_sum: int) -> StepCost:
        """:meth:`price` of ``decode_work(num_seqs, context_sum)`` (the fast path's steady decode
        step), by :meth:`_dense_price`."""
        if self._moe or not num_seqs:  # routed experts and all-to-all terms: the general path
            return super().decode_cost(num_seqs, context_sum)
        pairs = context_sum + num_seqs  # decode_work: (n, n, (s + n, s + n, n), no prefill)
        return self._dense_price(num_seqs, num_seqs, pairs, num_seqs, 0, 0, 0, num_seqs)

    def step_cost(self, plan: StepPlan) -> StepCost:
        """A step of one prompt (or chunk) alone, continuous batching's prefill-first step, is
        priced by :meth:`_dense_price`; every other plan by the general path."""
        rids = plan.request_ids
        if (len(rids) != 1 or plan.num_decode_slots or plan.num_pad_tokens is not None
                or plan.num_streams != 1 or self._moe or rids[0] < 0 or plan.num_new_tokens[0] < 2):
            return super().step_cost(plan)
        k, c = plan.num_new_tokens[0], plan.num_context_tokens[0]
        return self._dense_price(k, 1, 0, 0, k * c + (k * k + k) // 2, c + k, k, 1)  # _attn_sums([k], [c])

    def mixed_cost(self, num_decodes: int, context_sum: int, chunk_new: list[int],
                   chunk_ctx: list[int], streams: int = 1) -> StepCost:
        # The fast path's chunked-prefill steps of a dense model: two streams by
        # _two_stream_cost, one by _dense_price; the rest (MoE, nothing computed), the base's.
        n = num_decodes
        if self._moe or not (n or sum(chunk_new)):
            return super().mixed_cost(n, context_sum, chunk_new, chunk_ctx, streams)
        if streams > 1 and n and chunk_new:  # two micro-batches (an empty one: the base's price_streams)
            if sum(chunk_new):
                return self._two_stream_cost(n, context_sum, chunk_new, chunk_ctx)
            return super().mixed_cost(n, context_sum, chunk_new, chunk_ctx, streams)
        if len(chunk_new) == 1 and chunk_new[0]:  # the usual step under load: one chunk (_attn_sums inline)
            k, c = chunk_new[0], chunk_ctx[0]
            pp, pkv, pq, rows = k * c + (k * k + k) // 2, c + k, k, 1
        else:
            pp, pkv, pq = _attn_sums(chunk_new, chunk_ctx)
            rows = len(chunk_new) - chunk_new.count(0)
        pairs = context_sum + n
        return self._dense_price(n + pq, n + rows, pairs, n, pp, pkv, pq, n + len(chunk_new))

    def _dense_price(self, tokens: int, rows: int, dec_pairs: int, dec_q: int, pre_pairs: int,
                     pre_kv: int, pre_q: int, live: int) -> StepCost:
        """:meth:`price` of a dense model's step of ``tokens`` tokens and ``rows`` logit rows (both
        > 0) over ``live`` slots, its decode attention ``(dec_pairs, dec_pairs, dec_q)`` and its
        prefill attention ``(pre_pairs, pre_kv, pre_q)``, with the work all kept.

        The fast path's steps (steady decode, one prompt, chunked prefill's mixed step) are
        priced here from the linear, LM-head and all-reduce terms :meth:`_count_terms` keeps per
        count, and the rest by the expressions :meth:`price`, :meth:`attn_seconds`,
        :meth:`overhead` and :meth:`counts` use, added in their order, so the prices are
        bit-identical (``tests/test_fast_prices.py``); only ``sum``'s exact start is left out.
        """
        lin, lm, _, _, _, part_flops, lin_bytes, lm_bytes, ar = (
            self._stream_terms.get((tokens, rows)) or self._count_terms(tokens, rows))
        aif, aib, kvt = self._attn_inv_flops, self._attn_inv_bw, self._attn_kv_tok
        attn_p = (max(pre_pairs * self._attn_flops_pair * aif, (pre_kv * kvt + pre_q * self._attn_q_tok) * aib)
                  if pre_q else 0.0)
        attn_d = (max(dec_pairs * self._attn_flops_pair_dec * aif,
                      (dec_pairs * kvt + dec_q * self._attn_q_tok_dec) * aib) if dec_q else 0.0)
        p = self.params  # overhead(), written out
        over = p["step_overhead_s"] + p["per_seq_overhead_s"] * live + p["per_token_overhead_s"] * tokens
        if self._mla:  # counts(): decode and prefill attention count differently
            attn_flops = dec_pairs * self._attn_flops_pair_dec + pre_pairs * self._attn_flops_pair
            q_bytes = dec_q * self._attn_q_tok_dec + pre_q * self._attn_q_tok
        else:
            attn_flops, q_bytes = (dec_pairs + pre_pairs) * self._attn_flops_pair, (dec_q + pre_q) * self._attn_q_tok
        nbytes = (dec_pairs + pre_kv) * kvt + q_bytes
        nbytes += lin_bytes
        nbytes += lm_bytes
        bd = {"linear": lin, "lm_head": lm, "attn_prefill": attn_p, "attn_decode": attn_d, "allreduce": ar,
              "overhead": over}
        seconds = lin + lm + attn_p + attn_d + ar + over
        if self._floor:
            bd["launch_wait"] = wait = self.launch_wait(lin + lm + attn_p + attn_d + ar)
            seconds += wait
        return StepCost(seconds, bd, float(part_flops + attn_flops), float(nbytes))

    def overhead(self, work: StepWork, live: int) -> float:
        p = self.params  # (_two_stream_cost writes this formula out too: one call less a step)
        return p["step_overhead_s"] + p["per_seq_overhead_s"] * live + p["per_token_overhead_s"] * work[0]

    def _two_stream_cost(self, n: int, s: int, chunk_new: list[int], chunk_ctx: list[int]) -> StepCost:
        """:meth:`price_streams` of ``n`` decodes (contexts summing to ``s``) beside prefill
        chunks holding at least one token, for a dense model, without the two ``price`` calls,
        the two ``bounds`` calls and the breakdown dicts merged.

        Bit-identical to the general path: each kernel's compute-side and memory-side seconds
        are computed once, by the same expressions in the same order as :meth:`price`,
        :meth:`bounds` and :meth:`counts` compute them, and the sums below add the same floats
        in the same order. Only additions of an exact ``0.0`` (a part's missing kernel,
        ``sum``'s start) are left out: ``x + 0.0 == x`` for every price here (none is
        ``-0.0``). What depends only on a micro-batch's token and row counts (its linear layers
        and LM head) comes from :meth:`_stream_terms`, computed once per count.
        ``tests/test_fast_prices.py`` compares the two paths on random steps.
        """
        aif, aib, kvt = self._attn_inv_flops, self._attn_inv_bw, self._attn_kv_tok
        # The decode micro-batch: decode_work(n, s) = (n tokens, n rows, (s + n, s + n, n), no prefill).
        pairs = s + n
        lin_d, lm_d, part_c, part_m, part_own, part_flops, lin_bytes, lm_bytes, ar_d = (
            self._stream_terms.get((n, n)) or self._count_terms(n, n))
        at_c, at_m = pairs * self._attn_flops_pair_dec * aif, (pairs * kvt + n * self._attn_q_tok_dec) * aib
        attn_d = max(at_c, at_m)
        compute, memory = part_c + at_c, part_m + at_m  # bounds(): (linear + LM head) + attention
        own_d = part_own + attn_d  # price()'s kernels: linear, lm_head, (attn_prefill 0.0), attn_decode
        flops = part_flops + pairs * self._attn_flops_pair_dec  # counts()
        nbytes = pairs * kvt + n * self._attn_q_tok_dec
        nbytes += lin_bytes
        nbytes += lm_bytes
        # The chunk micro-batch: p tokens over r rows, prefill attention only (_attn_sums; one
        # chunk of k tokens over c cached ones: k c + k (k + 1) / 2 pairs, c + k KV tokens).
        if len(chunk_new) == 1:
            k, c = chunk_new[0], chunk_ctx[0]
            pre_pairs, pre_kv, p, r = k * c + (k * k + k) // 2, c + k, k, 1
        else:
            pre_pairs, pre_kv, p = _attn_sums(chunk_new, chunk_ctx)
            r = len(chunk_new) - chunk_new.count(0)
        lin_p, lm_p, part_c, part_m, part_own, part_flops, lin_bytes, lm_bytes, ar_p = (
            self._stream_terms.get((p, r)) or self._count_terms(p, r))
        at_c, at_m = pre_pairs * self._attn_flops_pair * aif, (pre_kv * kvt + p * self._attn_q_tok) * aib
        attn_p = max(at_c, at_m)
        compute += part_c + at_c
        memory += part_m + at_m
        own_p = part_own + attn_p  # linear, lm_head, attn_prefill, (attn_decode 0.0)
        flops += part_flops + pre_pairs * self._attn_flops_pair
        nbytes_p = pre_kv * kvt + p * self._attn_q_tok
        nbytes_p += lin_bytes
        nbytes_p += lm_bytes
        # price_streams: the parts' breakdowns added key by key, the whole step's overhead,
        # and the time the streams hide.
        linear, lm_head, ar = lin_d + lin_p, lm_d + lm_p, ar_d + ar_p
        pr, slots = self.params, n + len(chunk_new)  # overhead() of the whole step, written out
        over = pr["step_overhead_s"] + pr["per_seq_overhead_s"] * slots + pr["per_token_overhead_s"] * (n + p)
        overlap = max(compute, memory, max(own_d, own_p)) - (own_d + own_p)
        bd = {"linear": linear, "lm_head": lm_head, "attn_prefill": attn_p, "attn_decode": attn_d,
              "allreduce": ar, "overhead": over, "stream_overlap": overlap}
        seconds = linear + lm_head + attn_p + attn_d + ar + over + overlap
        if self._floor:
            bd["launch_wait"] = wait = self.launch_wait(linear + lm_head + attn_p + attn_d + ar + overlap)
            seconds += wait
        return StepCost(seconds, bd, flops, nbytes + nbytes_p)

    def _count_terms(self, tokens: int, rows: int) -> tuple:
        """The terms of a micro-batch of ``tokens`` tokens (> 0) and ``rows`` logit rows (> 0)
        that do not depend on its attention, as :meth:`price`, :meth:`bounds` and :meth:`counts`
        compute them: (linear s, LM head s, their compute-side sum, their memory-side sum,
        linear + LM head s, linear + LM head FLOPs, linear bytes, LM head bytes, all-reduce s).
        Kept in :attr:`_stream_terms` (token counts stay within a step's budget)."""
        lin_c = self._gemm_tokens(tokens) * self._lin_flops_tok * self._lin_inv_flops + tokens * self._lin_fixed_tok
        lin_m = (self._lin_weight_bytes + tokens * self._lin_act_tok) * self._inv_bw
        lm_c = rows * self._lm_flops_row * self._lm_inv_flops
        lm_m = (self._lm_weight_bytes + rows * self._lm_act_row) * self._inv_bw
        lin, lm = max(lin_c, lin_m), max(lm_c, lm_m)
        flops = tokens * self._lin_flops_tok + rows * self._lm_flops_row
        terms = (lin, lm, lin_c + lm_c, lin_m + lm_m, lin + lm, flops,
                 self._lin_weight_bytes + tokens * self._lin_act_tok, self._lm_weight_bytes + rows * self._lm_act_row,
                 tokens * self._ar_tok + self._ar_fixed)
        if len(self._stream_terms) < STREAM_TERMS_KEPT:
            self._stream_terms[tokens, rows] = terms
        return terms

    def padded_decode_costs(self, num_slots: int, num_live: list[int], contexts) -> tuple[list, list, list]:
        """A padded batch's run of decode steps priced at once with numpy: the same
        operations, in the same order, as :meth:`price` on each step's
        ``decode_work`` (so bit-identical): only the attention's context and the live rows
        (``num_live``, per step) vary."""
        if self._moe:  # the experts' term is not in the sum below; price step by step
            return super().padded_decode_costs(num_slots, num_live, contexts)
        S, n = num_slots, np.asarray(num_live, dtype=np.int64)
        ctx = np.asarray(contexts, dtype=np.int64)
        pairs = S * ctx + S  # decode_work: (context sum + slots) pairs and KV tokens
        attn = np.maximum(pairs * self._attn_flops_pair_dec * self._attn_inv_flops,
                          (pairs * self._attn_kv_tok + S * self._attn_q_tok_dec) * self._attn_inv_bw)
        lm = max(S * self._lm_flops_row * self._lm_inv_flops,
                 (self._lm_weight_bytes + S * self._lm_act_row) * self._inv_bw)
        ar = S * self._ar_tok + self._ar_fixed
        over = self.overhead(decode_work(S, 0), n)  # S tokens over n live sequences
        # price(): sum(bd.values()) = 0 + linear + lm_head + attn_prefill (0.0) + attn_decode + ...
        kernels = (self._linear_seconds(S) + lm + 0.0) + attn + ar
        seconds = kernels + over
        if self._floor:  # launch_wait(), elementwise
            seconds = seconds + np.where(kernels < self._floor, self._floor - kernels, 0.0)
        kept = n * ctx + n  # the live rows' pairs and KV tokens (counts on the kept work)
        flops = (n * self._lin_flops_tok + n * self._lm_flops_row) + kept * self._attn_flops_pair_dec
        nbytes = ((kept * self._attn_kv_tok + n * self._attn_q_tok_dec)
                  + (self._lin_weight_bytes + n * self._lin_act_tok) + (self._lm_weight_bytes + n * self._lm_act_row))
        return seconds.tolist(), flops.tolist(), nbytes.tolist()

    def bounds(self, work: StepWork) -> tuple[float, float]:
        tokens, rows, dec, pre = work
        c = m = 0.0
        if tokens:
            c += self._gemm_tokens(tokens) * self._lin_flops_tok * self._lin_inv_flops + tokens * self._lin_fixed_tok
            m += (self._lin_weight_bytes + tokens * self._lin_act_tok) * self._inv_bw
        if rows:
            c += rows * self._lm_flops_row * self._lm_inv_flops
            m += (self._lm_weight_bytes + rows * self._lm_act_row) * self._inv_bw
        for (pairs, kv_tokens, q_tokens), flops_pair, q_tok in ((pre, self._attn_flops_pair, self._attn_q_tok),
                                                                (dec, self._attn_flops_pair_dec, self._attn_q_tok_dec)):
            if q_tokens:
                c += pairs * flops_pair * self._attn_inv_flops
                m += (kv_tokens * self._attn_kv_tok + q_tokens * q_tok) * self._attn_inv_bw
        if self._moe and tokens:
            ec, em = self._expert_bounds(tokens)
            c, m = c + ec, m + em
        return c, m

    def _linear_seconds(self, tokens: int) -> float:
        """QKV/O/MLP GEMMs of all layers over ``tokens`` rows."""
        if not tokens:
            return 0.0
        return max(self._gemm_tokens(tokens) * self._lin_flops_tok * self._lin_inv_flops
                   + tokens * self._lin_fixed_tok,
                   (self._lin_weight_bytes + tokens * self._lin_act_tok) * self._inv_bw)

    def _gemm_tokens(self, tokens: int) -> float:
        """Tokens the GEMMs' compute side costs like at full efficiency: the larger of the
        tile-padded count and ``tokens / eff(tokens)`` with ``eff(M) = M / (M + ramp)``,
        i.e. ``tokens + gemm_ramp_tokens`` (see ``DEFAULT_PARAMS``)."""
        tiled = -(-tokens // self._tile) * self._tile if self._tile > 1 else tokens
        return max(tiled, tokens + self._ramp)

    def _expert_bounds(self, tokens: int) -> tuple[float, float]:
        """(compute, memory) seconds of the routed experts of all MoE layers over ``tokens``,
        on the GPU that waits longest.

        With uniform routing, ``tokens`` tokens each picking ``k`` of ``E`` experts touch
        ``E (1 - (1 - k/E)^tokens)`` distinct experts on average, and only those are read:
        a decode step of a few sequences reads about the active parameters, a large batch
        all of them; skewed routing touches fewer (:mod:`simbatch.costmodel.routing`).
        Compute counts the ``k`` experts of each token, each touched expert's rows padded to
        a block of :data:`MOE_BLOCK_ROWS` (the fused MoE kernel aligns every expert's rows to
        its tile), plus the GEMM ramp once (one grouped GEMM). Under expert parallelism each
        GPU computes its own whole experts and the step waits for the busiest: the expected
        most rows and most distinct experts over the GPUs (possibly two different GPUs, so an
        upper bound on the slowest one).
        """
        if not tokens:
            return 0.0, 0.0
        rows, touched = self._load.busiest(tokens * self._dp)  # the EP group's tokens
        padded = touched * math.ceil(rows / touched / MOE_BLOCK_ROWS) * MOE_BLOCK_ROWS
        compute = (padded + self._ramp) * self._expert_flops_row * self._lin_inv_flops
        memory = (touched * self._expert_bytes + rows * self._expert_act_row) * self._inv_bw
        return compute, memory

    def _all_to_all_seconds(self, tokens: float) -> float:
        """The MoE layers' dispatch and combine all-to-alls under expert parallelism with
        ``all2all`` dispatch.

        Each GPU sends its ``1/ep`` share of the step's tokens, ``k`` copies of each token's
        hidden state (one per chosen expert; DeepEP sends a token once per GPU, so this is an
        upper bound), to the GPUs holding those experts, and the combine sends the expert
        outputs back. The busiest GPU receives its rows' states from the other ``ep - 1``
        GPUs: ``rows (ep-1)/ep x hidden`` elements. An all-to-all of ``S`` bytes a GPU takes
        ``S (n-1)/n / B`` on links of ``B`` per direction (nccl-tests, doc/PERFORMANCE.md:
        the all-to-all bus bandwidth is ``algbw (n-1)/n``), plus the link's latency; priced on
        the GPU's link at ``allreduce_eff`` like the all-reduces.
        """
        if not tokens:
            return 0.0
        rows = self._load.busiest(tokens * self._dp)[0]
        return 2 * self.model.num_moe_layers * (rows * self._a2a_row + self.gpu.link_latency_s)

    def _expert_mean_bytes(self, tokens: int) -> float:
        """HBM bytes the routed experts read per GPU, averaged over the GPUs (MBU counts)."""
        if self.expert_parallel == 1:
            return self._expert_bounds(tokens)[1] / self._inv_bw
        load, group = self._load, tokens * self._dp
        return (load.distinct(group) * self._expert_bytes
                + group * load.k * self._expert_act_row) / self.expert_parallel

    def attn_seconds(self, sums: AttnWork, decode: bool = False) -> float:
        """One attention kernel over its slots' summed work (``decode``: one query per slot,
        which MLA scores in its latent space)."""
        pairs, kv_tokens, q_tokens = sums
        if not q_tokens:
            return 0.0
        if decode:
            return max(pairs * self._attn_flops_pair_dec * self._attn_inv_flops,
                       (kv_tokens * self._attn_kv_tok + q_tokens * self._attn_q_tok_dec) * self._attn_inv_bw)
        return max(pairs * self._attn_flops_pair * self._attn_inv_flops,
                   (kv_tokens * self._attn_kv_tok + q_tokens * self._attn_q_tok) * self._attn_inv_bw)

    def counts(self, work: StepWork) -> tuple[float, float]:
        """FLOPs and HBM bytes (per GPU) of ``work`` (MFU and MBU count the kept work)."""
        tokens, rows, (dp, dkv, dq), (pp, pkv, pq) = work
        if self._mla:  # decode and prefill attention count differently
            attn_flops = dp * self._attn_flops_pair_dec + pp * self._attn_flops_pair
            q_bytes = dq * self._attn_q_tok_dec + pq * self._attn_q_tok
        else:
            attn_flops, q_bytes = (dp + pp) * self._attn_flops_pair, (dq + pq) * self._attn_q_tok
        flops = tokens * self._lin_flops_tok + rows * self._lm_flops_row + attn_flops
        nbytes = (dkv + pkv) * self._attn_kv_tok + q_bytes
        if tokens:
            nbytes += self._lin_weight_bytes + tokens * self._lin_act_tok
            if self._moe:  # per GPU: the routed work shared by the expert-parallel GPUs
                flops += (tokens * self._dp * self.model.experts_per_token * self._expert_flops_row
                          / self.expert_parallel)
                nbytes += self._expert_mean_bytes(tokens)
        if rows:
            nbytes += self._lm_weight_bytes + rows * self._lm_act_row
        return float(flops), float(nbytes)


# How many (tokens, rows) entries RooflineCostModel._count_terms keeps: a two-stream step's
# micro-batches hold at most a step's token budget, so a few thousand cover any scenario.
STREAM_TERMS_KEPT = 65536


# Rows of one expert's block in the fused MoE kernel: vLLM's moe_align_block_size pads each
# expert's tokens to BLOCK_SIZE_M, 16 in its default configurations for small batches
# (vllm/model_executor/layers/fused_moe/fused_moe.py, get_default_config).
MOE_BLOCK_ROWS = 16


# Token rows of one tile of a weight-only quantised GEMM: Marlin (IST-DASLab/marlin, used by
# vLLM for GPTQ/AWQ int4 and for FP8 weights on GPUs without FP8 tensor cores) computes
# 16 x 256 output tiles and is designed for batches of 1-32 tokens.
MARLIN_TILE_TOKENS = 16


def _dequantises(model: ModelSpec, gpu: GPUSpec) -> bool:
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


def quantized_kept_seconds(m: ModelSpec, gpu: GPUSpec, tp: int, p: dict) -> float:
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
    :func:`_memory_bound_elements`); of the fitted term ``T16 = G + X`` only ``G`` speeds
    up, so ``T = T16 / s + X (1 - 1/s)``: the second part is returned. The GEMM ramp and
    tile padding stay in tokens (the last partial wave of tiles runs at the faster rate too).
    """
    speedup = linear_rate(m, gpu) / gpu.peak_flops
    if speedup == 1.0:
        return 0.0
    kept = m.dtype_bytes * _memory_bound_elements(m, tp) / (gpu.hbm_bandwidth * p["bw_eff"])
    return (kept + _attention_16bit_seconds(m, gpu, tp, p)) * (1.0 - 1.0 / speedup)


def _attention_16bit_seconds(m: ModelSpec, gpu: GPUSpec, tp: int, p: dict) -> float:
    """Per token, the part of the attention projections' fitted 16-bit time that the faster
    rate must not speed up when they stay in 16 bits (``attention_16bit``): all of it, less
    their output rows, which :func:`quantized_kept_seconds` keeps already; 0 otherwise. The
    GEMM ramp and tile padding stay at the faster rate (a few tokens' worth)."""
    if not m.attention_16bit:
        return 0.0
    q, kv = _attention_widths(m, tp)
    gemm = 2.0 * m.num_layers * m.attention_params(tp) / (gpu.peak_flops * p["compute_eff"])
    outputs = m.dtype_bytes * m.num_layers * (q + 2 * kv + m.hidden_size) / (gpu.hbm_bandwidth * p["bw_eff"])
    return gemm - outputs


def _attention_widths(m: ModelSpec, tp: int) -> tuple[int, int]:
    """Per GPU, the query width and one K / V width (MLA: its latent) of a layer."""
    if m.is_mla:
        return m.num_heads // tp * m.head_dim, m.kv_lora_rank + m.qk_rope_head_dim
    return m.q_size // tp, max(1, m.num_kv_heads // tp) * m.head_dim


def _memory_bound_elements(m: ModelSpec, tp: int) -> int:
    """16-bit elements per token per GPU, over all layers, of the linear term's memory-bound
    work: the GEMMs' output rows (QKV, O, gate/up and down; a token's ``k`` routed experts)
    and the elementwise kernels, ``7 h + 2 (q + kv)`` per layer for the two norms, the
    residual adds and RoPE plus the gated activation's inputs and output (the counts of
    ``whatif``'s ``misc_layer``)."""
    h = m.hidden_size
    q, kv = _attention_widths(m, tp)

    def mlp(width: int, part: int) -> int:  # up (and gate) out, down out; activation in and out
        w = width // part
        up = (2 if m.gated_mlp else 1) * w
        return (up + h) + (up + w) if width else 0

    moe = m.num_moe_layers
    # Routed experts: sliced over TP, each GPU runs its slice of every token's k experts;
    # whole under expert parallelism, each GPU runs 1/tp of the token-expert rows (the mean)
    k = m.experts_per_token
    routed = k * mlp(m.moe_intermediate_size, 1) // tp if m.expert_parallel else k * mlp(m.moe_intermediate_size, tp)
    attn = (q + 2 * kv + h) + (7 * h + 2 * (q + kv))  # QKV and O outputs; norms, adds, RoPE
    return (m.num_layers * attn + (m.num_layers - moe) * mlp(m.intermediate_size, tp)
            + moe * (mlp(m.shared_expert_intermediate_size, tp) + routed))


def _activation_elements(m: ModelSpec, tp: int) -> int:
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


def plan_work(plan: StepPlan) -> tuple[StepWork, StepWork, int]:
    """(work computed, work kept, live slots) of a plan; kept work leaves padding out."""
    new, ctx, pad, rids = plan.num_new_tokens, plan.num_context_tokens, plan.num_pad_tokens, plan.request_ids
    q = new if pad is None else list(map(add, new, pad))
    work = _work(q, ctx, plan.num_decode_slots)
    kept = work
    if pad is not None or -1 in rids:  # padding present: count kept work only
        kept_new = _zero_padding_slots(new, rids) if -1 in rids else new
        kept = _work(kept_new, ctx, plan.num_decode_slots)
    return work, kept, len(rids) - rids.count(-1)


def add_work(a: StepWork, b: StepWork) -> StepWork:
    """Two steps' work summed field by field."""
    return StepWork((a.tokens + b.tokens, a.rows + b.rows, AttnWork(map(add, a.decode, b.decode)),
                     AttnWork(map(add, a.prefill, b.prefill))))


def decode_work(num_seqs: int, context_sum: int) -> StepWork:
    """What :func:`_work` returns for ``num_seqs`` one-token decode slots with contexts summing
    to ``context_sum`` (the same integers, so prices built on it are bit-identical)."""
    n, s = num_seqs, context_sum
    return StepWork((n, n, AttnWork((s + n, s + n, n)), NO_ATTN))


def _work(q: list[int], ctx: list[int], num_decode: int) -> StepWork:
    """The work of slots with per-slot query lengths ``q`` over contexts ``ctx``, the first
    ``num_decode`` of them decode slots."""
    n = len(q)
    if num_decode == n:
        dec, pre = _attn_sums(q, ctx), NO_ATTN
    elif num_decode == 0:
        dec, pre = NO_ATTN, _attn_sums(q, ctx)
    else:
        dec = _attn_sums(q[:num_decode], ctx[:num_decode])
        pre = _attn_sums(q[num_decode:], ctx[num_decode:])
    rows = n - q.count(0)
    if dec[0] > dec[1]:  # pairs beyond KV read: a decode slot verifies drafts, each needs its logits
        rows += dec[2] - num_decode + q[:num_decode].count(0)
    return StepWork((dec[2] + pre[2], rows, dec, pre))


def _zero_padding_slots(new: list[int], rids: list[int]) -> list[int]:
    """``new`` with padding-only slots (request id -1) zeroed.

    ``list.index`` scans in C, faster than a comprehension when few slots are
    padding (the usual case) and no slower when most are.
    """
    kept = new.copy()
    i = rids.index(-1)
    try:
        while True:
            kept[i] = 0
            i = rids.index(-1, i + 1)
    except ValueError:
        return kept


def _attn_sums(q: list[int], ctx: list[int]) -> AttnWork:
    """One attention kernel's work (causal score pairs, KV tokens read, query tokens) summed
    over its slots.

    A slot with ``q`` queries over ``c`` cached tokens scores ``q*c`` pairs
    against the cache and ``q*(q+1)/2`` causally among its own tokens; it reads
    ``c + q`` tokens of KV. Slots with no query tokens run nothing.
    """
    sq = sum(q)
    if not sq:
        return NO_ATTN
    zeros = q.count(0)
    sc = sum(compress(ctx, q)) if zeros else sum(ctx)
    if sq == len(q) - zeros:  # every running slot has one query token (decode)
        return AttnWork((sc + sq, sc + sq, sq))
    pairs = sum(map(mul, q, ctx)) + (sum(map(mul, q, q)) + sq) // 2
    return AttnWork((pairs, sc + sq, sq))


def check_tensor_parallel(tp, model: ModelSpec, where: str) -> int:
    """A valid tensor-parallel degree for ``model``: it must split heads evenly."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise SimbatchError(where, f"must be a positive integer, got {tp!r}")
    kv = model.num_kv_heads
    if model.num_heads % tp or (kv % tp and tp % kv):
        raise SimbatchError(where, f"{tp} does not split {model.name}'s {model.num_heads} heads "
                                   f"/ {kv} KV heads evenly")
    return tp


def check_expert_parallel(model: ModelSpec, tp: int, where: str) -> int:
    """GPUs the routed experts are spread over: ``tp`` under expert parallelism (vLLM's
    ``--enable-expert-parallel`` without data parallelism: the EP group is the TP group),
    ``tp x attention_data_parallel`` under data-parallel attention (vLLM's ``ep_size = dp x
    tp``), else 1 (every GPU holds a slice of every expert). The experts must split evenly."""
    if not model.expert_parallel:
        return 1
    if not model.is_moe:
        raise SimbatchError(where, f"applies to a mixture of experts; {model.name} is dense")
    ep = tp * model.attention_data_parallel
    if model.num_experts % ep:
        raise SimbatchError(where, f"{ep} GPUs (tensor_parallel {tp} x {model.attention_data_parallel} data-parallel "
                                   f"ranks) do not split {model.name}'s {model.num_experts} experts evenly"
                            if model.attention_data_parallel > 1 else
                            f"tensor_parallel {tp} does not split {model.name}'s {model.num_experts} "
                            f"experts evenly over its GPUs")
    if (model.num_experts + model.redundant_experts) % ep:
        raise SimbatchError("cluster.redundant_experts", f"{model.num_experts} experts + {model.redundant_experts} "
                                                         f"redundant do not split evenly over {ep} GPUs")
    return ep


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
