"""Attention kernels: prefill (a prompt or a chunk over a KV cache) and decode.

Both go through ``torch.nn.functional.scaled_dot_product_attention`` in the
(batch, heads, tokens, head_dim) layout; only the kernel call is timed (the
projections and RoPE are measured as other operators).

* Prefill of ``q`` new tokens over ``ctx`` cached ones: each new token attends
  to the whole cache and causally to the new tokens before it. With no cache
  that is SDPA's ``is_causal``; with one, the mask is "causal, aligned to the
  bottom right". On a GPU torch's ``causal_lower_right`` bias lets the fused
  (flash / memory-efficient) kernels apply it without a mask tensor; on CPU an
  explicit boolean mask is faster (the bias path materialises it anyway).
* Decode of ``batch`` sequences, one query each, over contexts of different
  lengths: K and V are padded to the longest and a key-padding mask hides the
  padding, so the kernel does the padded work, as a padded engine would. The
  query heads sharing a KV head are folded into the query-length axis (the
  grouped-query "packing" trick), so the kernel reads each KV head once and no
  fused kernel is ruled out by grouped-query attention.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from simbatch.backends.torch_layers import LayerWeights, chunk_mask, random_tensor
from simbatch.calibrate.points import decode_contexts
from simbatch.calibrate.timing import Timer
from simbatch.catalog.profiles import measurement_row


def bench_prefill(w: LayerWeights, points: list[tuple[int, int]], timer: Timer, seed: int,
                  progress: Callable[[str], None] = lambda _: None) -> list[dict]:
    """One ``attn_prefill`` row per (query tokens, context tokens)."""
    gen = torch.Generator(device=w.device).manual_seed(seed)
    spec = w.spec
    rows = []
    for q_len, ctx in points:
        kv_len = ctx + q_len
        q = random_tensor((1, spec.num_heads, q_len, spec.head_dim), gen, w.device, w.dtype)
        k = random_tensor((1, spec.num_kv_heads, kv_len, spec.head_dim), gen, w.device, w.dtype)
        v = random_tensor((1, spec.num_kv_heads, kv_len, spec.head_dim), gen, w.device, w.dtype)
        attend = prefill_call(q, k, v, ctx)
        rows.append(measurement_row("attn_prefill", q_len, timer.measure(attend), context_tokens=ctx))
        del q, k, v, attend
        progress(f"attn_prefill {q_len} over {ctx}")
    return rows


def prefill_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: int) -> Callable[[], torch.Tensor]:
    """A no-argument SDPA call for ``q`` new tokens after ``ctx`` cached ones."""
    gqa = q.shape[1] != k.shape[1]
    if ctx == 0:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    q_len, kv_len = q.shape[2], k.shape[2]
    if q.device.type == "cuda":
        bias = causal_lower_right(q_len, kv_len)
        try:
            F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)
            return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)
        except RuntimeError:
            pass  # a torch whose fused kernels refuse the bias here: the explicit mask below works anywhere
    mask = chunk_mask(q_len, ctx, q.device)
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def bench_decode(w: LayerWeights, points: list[tuple[int, int, float]], timer: Timer, seed: int,
                 progress: Callable[[str], None] = lambda _: None) -> list[dict]:
    """One ``attn_decode`` row per (batch size, mean context, context spread)."""
    gen = torch.Generator(device=w.device).manual_seed(seed)
    rows = []
    for batch, mean_ctx, spread in points:
        contexts = decode_contexts(batch, mean_ctx, spread)
        attend = decode_call(w, contexts, gen)
        rows.append(measurement_row(
            "attn_decode", batch, timer.measure(attend), batch_size=batch,
            context_tokens=round(sum(contexts) / batch),
            context_spread=round(max(contexts) / min(contexts), 3)))
        del attend
        progress(f"attn_decode {batch} x {mean_ctx} (spread {spread:g})")
    return rows


def decode_call(w: LayerWeights, contexts: list[int], gen: torch.Generator) -> Callable[[], torch.Tensor]:
    """A no-argument SDPA call decoding one token for each of ``len(contexts)`` sequences."""
    spec = w.spec
    batch, longest = len(contexts), max(contexts)
    group = spec.num_heads // spec.num_kv_heads
    # (batch, kv heads, group, head_dim): a KV head's query heads as its "query tokens"
    q = random_tensor((batch, spec.num_kv_heads, group, spec.head_dim), gen, w.device, w.dtype)
    k = random_tensor((batch, spec.num_kv_heads, longest, spec.head_dim), gen, w.device, w.dtype)
    v = random_tensor((batch, spec.num_kv_heads, longest, spec.head_dim), gen, w.device, w.dtype)
    if min(contexts) == longest:
        return lambda: F.scaled_dot_product_attention(q, k, v)
    lengths = torch.tensor(contexts, device=w.device)
    mask = (torch.arange(longest, device=w.device)[None, :] < lengths[:, None])[:, None, None, :]
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
