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

import numpy as np

from simbatch.catalog.hardware import GPUSpec, get_gpu
from simbatch.catalog.models import ModelSpec, get_model
from simbatch.catalog.parallelism import SLICED, ExpertLayout
from simbatch.costmodel.base import AttnWork, StepCost, StepWork
from simbatch.costmodel.model_terms import (
    MARLIN_TILE_TOKENS,
    MOE_BLOCK_ROWS,
    activation_elements,
    check_expert_parallel,
    check_tensor_parallel,
    dequantises,
    linear_rate,
    quantized_kept_seconds,
)
from simbatch.costmodel.roofline_params import check_params
from simbatch.costmodel.routing import ExpertLoad
from simbatch.costmodel.work import PricedByWork, attn_sums, decode_work


class RooflineCostModel(PricedByWork):
    """Prices a :class:`StepPlan` with a per-kernel roofline (see the module docstring)."""

    name = "roofline"

    def __init__(self, model: ModelSpec | str | dict, gpu: GPUSpec | str | dict,
                 tensor_parallel: int = 1, *, layout: ExpertLayout = SLICED, **params: float):
        self.model = get_model(model, "model")
        self.gpu = get_gpu(gpu, "gpu")
        self.tensor_parallel = check_tensor_parallel(tensor_parallel, self.model, "tensor_parallel")
        self.layout = layout  # how the deployment lays the experts over the GPUs (catalog.parallelism)
        self.expert_parallel = check_expert_parallel(self.model, layout, self.tensor_parallel,
                                                     "cluster.expert_parallel")
        self.params = check_params(params, "cost_model")
        self._precompute()
        self._terms: dict[tuple[int, int], tuple] = {}  # _count_terms by (tokens, rows)

    def describe(self) -> dict:
        """Kind, source, what is priced, and every parameter (defaults included)."""
        m, moe = self.model, {}
        if self.layout.expert_parallel:
            moe = {"expert_parallel": self.expert_parallel, **self.layout.describe()}
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
        # Activations each GEMM reads and writes, per token (see activation_elements).
        self._lin_act_tok = float(dt * activation_elements(m, tp))
        rate = linear_rate(m, g)
        self._lin_inv_flops = 1.0 / (rate * p["compute_eff"])
        self._inv_bw = 1.0 / (g.hbm_bandwidth * p["bw_eff"])
        self._tile = int(p["gemm_tile_tokens"])
        if dequantises(m, g):  # weight-only kernels (Marlin) tile tokens by 16, built for small batches
            self._tile = min(self._tile, MARLIN_TILE_TOKENS)
        self._ramp = p["gemm_ramp_tokens"]
        self._floor = p["launch_floor_s"]
        # overhead()'s coefficients, read once (params do not change after construction)
        self._over_step, self._over_seq, self._over_tok = (p["step_overhead_s"], p["per_seq_overhead_s"],
                                                           p["per_token_overhead_s"])
        # What a faster (FP8 / INT8) tensor-core rate does not speed up (0 at the 16-bit rate).
        self._lin_fixed_tok = quantized_kept_seconds(m, g, tp, p, self.layout)
        self._moe = m.is_moe
        # Data-parallel attention: this replica is one of `dp` ranks whose GPUs share the routed
        # experts; priced with the other ranks as loaded as this one (docs/cost_models.md).
        self._dp = self.layout.attention_data_parallel
        if self._moe:  # routed experts: priced per step from the experts its tokens touch
            # Tensor parallelism slices every expert over the GPUs; expert parallelism keeps
            # each whole on one GPU (E / ep of them a GPU).
            part = 1 if self.layout.expert_parallel else tp
            expert = m.expert_params(part)
            self._expert_flops_row = 2.0 * m.num_moe_layers * expert  # one token through one expert
            self._expert_bytes = float(m.num_moe_layers * expert * m.weight_bytes_per_param)
            width = m.moe_intermediate_size // part
            self._expert_act_row = float(m.num_moe_layers * dt * (h + (2 if m.gated_mlp else 1) * width + width + h))
            self._load = ExpertLoad(m.num_experts, m.experts_per_token, self.expert_parallel, m.routing_skew,
                                    self.layout.eplb, self.layout.redundant_experts)
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
        self._a2a = self._moe and self.layout.expert_dispatch == "all2all" and ep > 1
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
        """The step's cost from its summed work (:func:`plan_work`); ``live``: non-padding slots.

        Every step is priced here, the engine fast path's too (``decode_cost``, ``mixed_cost``,
        ``price_streams`` of :class:`PricedByWork` build its work and call this): the linear
        layers, LM head and all-reduce depend only on the (tokens, rows) counts and come from
        :meth:`_count_terms`, computed once per count."""
        tokens, rows, dec, pre = work
        terms = self._terms.get((tokens, rows)) or self._count_terms(tokens, rows)
        lin, lm, ar = terms[0], terms[1], terms[8]
        ap = self.attn_seconds(pre) if pre[2] else 0.0  # attn_seconds is 0.0 without queries
        ad = self.attn_seconds(dec, True) if dec[2] else 0.0
        over = self.overhead(work, live)
        bd = {"linear": lin, "lm_head": lm, "attn_prefill": ap, "attn_decode": ad, "allreduce": ar,
              "overhead": over}
        flops, nbytes = self.counts(kept, terms if kept is work else None)
        if self._moe:
            bd["experts"] = max(self._expert_bounds(tokens))
            if self._a2a:
                bd["all_to_all"] = self._all_to_all_seconds(tokens)
            if self._floor:
                bd["launch_wait"] = self.launch_wait(sum(v for k, v in bd.items() if k != "overhead"))
            return StepCost(sum(bd.values()), bd, flops, nbytes)
        # A dense model's sums written out in the breakdown's order, which is the order
        # sum(bd.values()) adds them in (so the floats are the same), without the generator.
        total = lin + lm + ap + ad + ar + over
        if self._floor:
            bd["launch_wait"] = wait = self.launch_wait(lin + lm + ap + ad + ar)
            total += wait
        return StepCost(total, bd, flops, nbytes)

    def overhead(self, work: StepWork, live: int) -> float:
        return self._over_step + self._over_seq * live + self._over_tok * work[0]

    def mixed_cost(self, num_decodes: int, context_sum: int, chunk_new: list[int],
                   chunk_ctx: list[int], streams: int = 1) -> StepCost:
        """:class:`PricedByWork`'s, with a dense model's two-stream step by :meth:`_two_stream_cost`."""
        n = num_decodes
        if streams > 1 and n and chunk_new and sum(chunk_new) and not self._moe:
            return self._two_stream_cost(n, context_sum, chunk_new, chunk_ctx)
        return super().mixed_cost(n, context_sum, chunk_new, chunk_ctx, streams)

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
        and LM head) comes from :meth:`_count_terms`, computed once per count.
        ``tests/test_fast_prices.py`` compares the two paths on random steps.
        """
        aif, aib, kvt = self._attn_inv_flops, self._attn_inv_bw, self._attn_kv_tok
        # The decode micro-batch: decode_work(n, s) = (n tokens, n rows, (s + n, s + n, n), no prefill).
        pairs = s + n
        lin_d, lm_d, part_c, part_m, part_own, part_flops, lin_bytes, lm_bytes, ar_d = (
            self._count_terms(n, n))
        at_c, at_m = pairs * self._attn_flops_pair_dec * aif, (pairs * kvt + n * self._attn_q_tok_dec) * aib
        attn_d = max(at_c, at_m)
        compute, memory = part_c + at_c, part_m + at_m  # bounds(): (linear + LM head) + attention
        own_d = part_own + attn_d  # price()'s kernels: linear, lm_head, (attn_prefill 0.0), attn_decode
        flops = part_flops + pairs * self._attn_flops_pair_dec  # counts()
        nbytes = pairs * kvt + n * self._attn_q_tok_dec
        nbytes += lin_bytes
        nbytes += lm_bytes
        # The chunk micro-batch: p tokens over r rows, prefill attention only (attn_sums; one
        # chunk of k tokens over c cached ones: k c + k (k + 1) / 2 pairs, c + k KV tokens).
        if len(chunk_new) == 1:
            k, c = chunk_new[0], chunk_ctx[0]
            pre_pairs, pre_kv, p, r = k * c + (k * k + k) // 2, c + k, k, 1
        else:
            pre_pairs, pre_kv, p = attn_sums(chunk_new, chunk_ctx)
            r = len(chunk_new) - chunk_new.count(0)
        lin_p, lm_p, part_c, part_m, part_own, part_flops, lin_bytes, lm_bytes, ar_p = (
            self._count_terms(p, r))
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
        over = self.overhead((n + p,), n + len(chunk_new))  # the whole step's
        overlap = max(compute, memory, max(own_d, own_p)) - (own_d + own_p)
        bd = {"linear": linear, "lm_head": lm_head, "attn_prefill": attn_p, "attn_decode": attn_d,
              "allreduce": ar, "overhead": over, "stream_overlap": overlap}
        seconds = linear + lm_head + attn_p + attn_d + ar + over + overlap
        if self._floor:
            bd["launch_wait"] = wait = self.launch_wait(linear + lm_head + attn_p + attn_d + ar + overlap)
            seconds += wait
        return StepCost(seconds, bd, flops, nbytes + nbytes_p)

    def _count_terms(self, tokens: int, rows: int) -> tuple:
        """The terms of a step (or micro-batch) of ``tokens`` tokens and ``rows`` logit rows that
        do not depend on its attention, as :meth:`price`, :meth:`bounds` and :meth:`counts`
        compute them: (linear s, LM head s, their compute-side sum, their memory-side sum,
        linear + LM head s, linear + LM head FLOPs, linear bytes, LM head bytes, all-reduce s),
        0.0 for a part with no tokens or no rows. Kept per count in :attr:`_terms` (token counts
        stay within a step's budget): 0.1-0.25 s a run on the Azure trace."""
        terms = self._terms.get((tokens, rows))
        if terms is not None:
            return terms
        lin = lin_c = lin_m = lin_bytes = ar = lm = lm_c = lm_m = lm_bytes = 0.0
        if tokens:
            lin_c = (self._gemm_tokens(tokens) * self._lin_flops_tok * self._lin_inv_flops
                     + tokens * self._lin_fixed_tok)
            lin_bytes = self._lin_weight_bytes + tokens * self._lin_act_tok
            lin_m = lin_bytes * self._inv_bw
            lin, ar = max(lin_c, lin_m), tokens * self._ar_tok + self._ar_fixed
        if rows:
            lm_c = rows * self._lm_flops_row * self._lm_inv_flops
            lm_bytes = self._lm_weight_bytes + rows * self._lm_act_row
            lm_m = lm_bytes * self._inv_bw
            lm = max(lm_c, lm_m)
        flops = tokens * self._lin_flops_tok + rows * self._lm_flops_row
        terms = (lin, lm, lin_c + lm_c, lin_m + lm_m, lin + lm, flops, lin_bytes, lm_bytes, ar)
        if len(self._terms) < TERMS_KEPT:
            self._terms[tokens, rows] = terms
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
        c, m = self._count_terms(tokens, rows)[2:4]  # the linear layers and the LM head
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

    def counts(self, work: StepWork, terms: tuple | None = None) -> tuple[float, float]:
        """FLOPs and HBM bytes (per GPU) of ``work`` (MFU and MBU count the kept work); the
        linear layers' and LM head's come from :meth:`_count_terms` (``terms``: its entry for
        ``work``'s counts, when the caller has it)."""
        tokens, rows, (dp, dkv, dq), (pp, pkv, pq) = work
        if terms is None:
            terms = self._terms.get((tokens, rows)) or self._count_terms(tokens, rows)
        if self._mla:  # decode and prefill attention count differently
            attn_flops = dp * self._attn_flops_pair_dec + pp * self._attn_flops_pair
            q_bytes = dq * self._attn_q_tok_dec + pq * self._attn_q_tok
        else:
            attn_flops, q_bytes = (dp + pp) * self._attn_flops_pair, (dq + pq) * self._attn_q_tok
        flops = terms[5] + attn_flops  # linear + LM head FLOPs, then attention
        nbytes = (dkv + pkv) * self._attn_kv_tok + q_bytes
        nbytes += terms[6]  # the linear layers' bytes (0.0 without tokens)
        if tokens and self._moe:  # per GPU: the routed work shared by the expert-parallel GPUs
            flops += (tokens * self._dp * self.model.experts_per_token * self._expert_flops_row
                      / self.expert_parallel)
            nbytes += self._expert_mean_bytes(tokens)
        nbytes += terms[7]  # the LM head's (0.0 without rows)
        return float(flops), float(nbytes)


# How many (tokens, rows) entries RooflineCostModel._count_terms keeps: a step holds at most
# its token budget and its seats, so a few thousand cover the steps of most scenarios.
TERMS_KEPT = 65536
