"""One Llama-style layer (plus embedding and LM head) as plain torch tensors.

Weights are random (seeded): timings depend on shapes, not values. Matrices
use ``nn.Linear``'s (out, in) layout and are applied with
``torch.nn.functional.linear``, as Hugging Face and vLLM models do; QKV and
gate/up are fused into one matrix each, as vLLM fuses them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from simbatch.catalog.models import ModelSpec

ROPE_THETA = 10_000.0
NORM_EPS = 1e-5


@dataclass(frozen=True, slots=True)
class LayerWeights:
    """The tensors the micro-benchmarks run on, for one model shape on one device."""

    spec: ModelSpec
    device: torch.device
    dtype: torch.dtype
    qkv: torch.Tensor        # (q + 2 kv, hidden)
    o: torch.Tensor          # (hidden, q)
    gate_up: torch.Tensor    # (2 * intermediate, hidden), or (intermediate, hidden) ungated
    down: torch.Tensor       # (hidden, intermediate)
    lm_head: torch.Tensor    # (vocab, hidden)
    embedding: torch.Tensor  # (vocab, hidden)
    norm: torch.Tensor       # (hidden,) one RMSNorm weight, shared by the three norms

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of the benchmark dtype."""
        return self.qkv.element_size()


def build_layer(spec: ModelSpec, device: torch.device, dtype: torch.dtype, seed: int = 0) -> LayerWeights:
    """Random weights (normal, std 0.02, from ``seed``) of ``spec``'s layer shapes."""
    gen = torch.Generator(device=device).manual_seed(seed)
    h, i = spec.hidden_size, spec.intermediate_size

    def weight(*shape: int) -> torch.Tensor:
        return random_tensor(shape, gen, device, dtype, scale=0.02)

    return LayerWeights(
        spec=spec, device=device, dtype=dtype,
        qkv=weight(spec.q_size + 2 * spec.kv_size, h),
        o=weight(h, spec.q_size),
        gate_up=weight((2 if spec.gated_mlp else 1) * i, h),
        down=weight(h, i),
        lm_head=weight(spec.vocab_size, h),
        embedding=weight(spec.vocab_size, h),
        norm=torch.ones(h, device=device, dtype=dtype),
    )


def random_tensor(shape, gen: torch.Generator, device: torch.device, dtype: torch.dtype,
                  scale: float = 1.0) -> torch.Tensor:
    """A normal random tensor drawn from ``gen``, scaled, in ``dtype``."""
    # Drawn straight in ``dtype`` and scaled in place: a float32 draw plus a cast
    # would briefly need three times the memory of a multi-GB decode KV cache.
    x = torch.randn(*shape, generator=gen, device=device, dtype=dtype)
    return x.mul_(scale) if scale != 1.0 else x


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Llama's RMSNorm, computed in float32 as Hugging Face's implementation does."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + NORM_EPS)
    return weight * x32.to(x.dtype)


def rope_tables(positions: torch.Tensor, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables, (tokens, head_dim / 2), for rotary embeddings at ``positions``."""
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (tokens, heads, head_dim) ``x`` by the tables (the "rotate half" layout)."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's activation: silu(gate) * up, from the fused (tokens, 2 * intermediate) output."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def chunk_mask(q_len: int, ctx: int, device: torch.device) -> torch.Tensor:
    """(q_len, ctx + q_len) booleans: new token i sees the cache and new tokens 0..i."""
    return torch.ones(q_len, ctx + q_len, dtype=torch.bool, device=device).tril(diagonal=ctx)
