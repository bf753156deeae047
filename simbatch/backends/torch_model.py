"""A Llama-architecture decoder in plain torch: the model the torch backend runs.

RMSNorm, rotary embeddings, grouped-query attention over a paged KV cache,
a gated SiLU MLP and an LM head, with random weights drawn from a seed (no
downloads: timings depend on shapes, not values). The shapes come from a
:class:`~simbatch.catalog.models.ModelSpec` preset (``tiny`` and ``small`` for CPUs,
``llama-2-7b`` and friends for GPUs). Building blocks (fused QKV and gate/up
matrices, RMSNorm, RoPE, SwiGLU) are the calibration's
(:mod:`simbatch.backends.torch_layers`), so the operators the profile timed are the
operators this model runs.

One forward pass computes every row of a step at once: the linear layers see
all tokens of all requests together; attention is one batched call for all
decode rows (contexts padded to the longest, masked), one call per group of
equal context-free prefill slots, and one call per prefill chunk over a cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from simbatch.backends.torch_inputs import PrefillGroup, StepInputs
from simbatch.backends.torch_kv import PagedKVPool
from simbatch.backends.torch_layers import (
    apply_rope,
    random_tensor,
    rms_norm,
    rope_tables,
    silu_mul,
)
from simbatch.catalog.models import ModelSpec

WEIGHT_STD = 0.02


@dataclass(frozen=True, slots=True)
class DecoderLayer:
    """One layer's weights (``nn.Linear``'s (out, in) layout)."""

    qkv: torch.Tensor       # (q + 2 kv, hidden)
    o: torch.Tensor         # (hidden, q)
    gate_up: torch.Tensor   # (2 intermediate, hidden), or (intermediate, hidden) ungated
    down: torch.Tensor      # (hidden, intermediate)
    input_norm: torch.Tensor
    post_norm: torch.Tensor


class LlamaModel:
    """Random-weight Llama decoder of ``spec``'s shapes on ``device`` in ``dtype``."""

    def __init__(self, spec: ModelSpec, device: torch.device, dtype: torch.dtype, seed: int = 0):
        self.spec, self.device, self.dtype = spec, device, dtype
        gen = torch.Generator(device=device).manual_seed(seed)
        h, i = spec.hidden_size, spec.intermediate_size

        def weight(*shape: int) -> torch.Tensor:
            return random_tensor(shape, gen, device, dtype, scale=WEIGHT_STD)

        def ones() -> torch.Tensor:
            return torch.ones(h, device=device, dtype=dtype)

        self.layers = [
            DecoderLayer(qkv=weight(spec.q_size + 2 * spec.kv_size, h), o=weight(h, spec.q_size),
                         gate_up=weight((2 if spec.gated_mlp else 1) * i, h), down=weight(h, i),
                         input_norm=ones(), post_norm=ones())
            for _ in range(spec.num_layers)
        ]
        self.embedding = weight(spec.vocab_size, h)
        self.lm_head = weight(spec.vocab_size, h)
        self.final_norm = ones()
        self.activation = silu_mul if spec.gated_mlp else F.relu
        self.cos, self.sin = rope_tables(torch.arange(spec.max_context, device=device), spec.head_dim, dtype)
        self.gqa = spec.num_heads != spec.num_kv_heads

    @property
    def max_position(self) -> int:
        """Largest position the RoPE tables cover."""
        return self.spec.max_context - 1

    @torch.no_grad()
    def forward(self, inputs: StepInputs, pool: PagedKVPool) -> tuple[torch.Tensor, torch.Tensor]:
        """(last layer's hidden states of every row, greedy token of every slot's last kept row)."""
        x = F.embedding(inputs.input_ids, self.embedding)
        cos, sin = self.cos[inputs.positions], self.sin[inputs.positions]
        for index, layer in enumerate(self.layers):
            x = self._layer(index, layer, x, cos, sin, inputs, pool)
        last = rms_norm(x[inputs.logit_rows], self.final_norm)
        return x, F.linear(last, self.lm_head).argmax(dim=-1)

    def _layer(self, index: int, w: DecoderLayer, x: torch.Tensor, cos, sin, inputs: StepInputs,
               pool: PagedKVPool) -> torch.Tensor:
        spec, n = self.spec, x.shape[0]
        qkv = F.linear(rms_norm(x, w.input_norm), w.qkv)
        q, k, v = qkv.split((spec.q_size, spec.kv_size, spec.kv_size), dim=-1)
        q = apply_rope(q.view(n, spec.num_heads, spec.head_dim), cos, sin)
        k = apply_rope(k.view(n, spec.num_kv_heads, spec.head_dim), cos, sin)
        v = v.view(n, spec.num_kv_heads, spec.head_dim)
        keys, values = pool.keys[index], pool.values[index]
        keys.index_copy_(0, inputs.slot_mapping, k)  # padded rows land in the scratch block
        values.index_copy_(0, inputs.slot_mapping, v)
        attn = self._attention(q, k, v, keys, values, inputs)
        x = x + F.linear(attn.reshape(n, spec.q_size), w.o)
        mlp = F.linear(self.activation(F.linear(rms_norm(x, w.post_norm), w.gate_up)), w.down)
        return x + mlp

    def _attention(self, q, k, v, keys, values, inputs: StepInputs) -> torch.Tensor:
        """Attention output ``(rows, heads, head_dim)``: decode rows first, then prefill groups."""
        d = inputs.num_decode
        parts = []
        if d:
            parts.append(self._decode(q[:d], keys, values, inputs))
        for g in inputs.prefill:
            parts.append(self._prefill(q, k, v, keys, values, g))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _decode(self, q, keys, values, inputs: StepInputs) -> torch.Tensor:
        """All decode rows in one call over their gathered, padded contexts.

        The query heads sharing a KV head are folded into the query axis (the
        calibration's grouped-query packing), so each KV head is read once.
        """
        spec, d = self.spec, q.shape[0]
        group = spec.num_heads // spec.num_kv_heads
        qd = q.view(d, spec.num_kv_heads, group, spec.head_dim)
        kd = keys[inputs.decode_index].transpose(1, 2)   # (D, kv heads, L, head_dim)
        vd = values[inputs.decode_index].transpose(1, 2)
        out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=inputs.decode_mask)
        return out.reshape(d, spec.num_heads, spec.head_dim)

    def _prefill(self, q, k, v, keys, values, g: PrefillGroup) -> torch.Tensor:
        """A group of context-free prompts (one causal call), or one chunk over its cache."""
        spec = self.spec
        rows = slice(g.start, g.start + g.num_slots * g.q_len)
        qg = q[rows].view(g.num_slots, g.q_len, spec.num_heads, spec.head_dim).transpose(1, 2)
        if g.gather is None:
            shape = (g.num_slots, g.q_len, spec.num_kv_heads, spec.head_dim)
            kg, vg = k[rows].view(shape).transpose(1, 2), v[rows].view(shape).transpose(1, 2)
            out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=self.gqa)
        else:
            kg = keys[g.gather].transpose(0, 1).unsqueeze(0)   # (1, kv heads, ctx + q, head_dim)
            vg = values[g.gather].transpose(0, 1).unsqueeze(0)
            out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=g.mask, enable_gqa=self.gqa)
        return out.transpose(1, 2).reshape(-1, spec.num_heads, spec.head_dim)
