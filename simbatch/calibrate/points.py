"""Which shapes to measure: token counts, (query, context) pairs, (batch, context) pairs.

Points are denser where the curves bend. Linear layers turn from memory-bound
to compute-bound somewhere below a few hundred tokens on a GPU, so the grid
steps by powers of two to 64, then every 64 to 512, then every 256 to 2048 and
coarser beyond, where time is linear in tokens. Quick mode keeps about a third.

Each point's working set (inputs, outputs, KV, attention scores) is checked
against the device's free memory: points that would not fit are dropped, and
the runner says so in the profile's notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simbatch.catalog.models import ModelSpec

# Share of free memory one point's tensors may use (weights come on top and are
# allocated before the check; the allocator and the OS need slack).
MEMORY_SHARE = 0.5

FULL_TOKENS = ([1, 2, 4, 8, 16, 32, 64] + list(range(128, 513, 64)) + list(range(768, 2049, 256))
               + list(range(2560, 4097, 512)) + [5120, 6144, 7168, 8192])
QUICK_TOKENS = [1, 4, 16, 64, 128, 256, 512, 1024, 2048, 8192]

# Prefill: whole prompts (context 0), and chunks of these sizes over caches.
FULL_PREFILL = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
FULL_CHUNKS = [32, 128, 512, 1024, 2048]
QUICK_PREFILL = [16, 128, 512, 2048, 8192]
QUICK_CHUNKS = [128, 512]
CONTEXTS = [256, 512, 1024, 2048, 4096, 8192]

FULL_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
QUICK_BATCHES = [1, 8, 64, 256]
DECODE_CONTEXTS = [128, 256, 512, 1024, 2048, 4096, 8192]
QUICK_DECODE_CONTEXTS = [256, 1024, 4096]
SPREADS = [2.0, 8.0]  # max/min context in a mixed decode batch
# Decode batches cover at most this many KV tokens: beyond it a CPU point takes
# seconds and adds nothing (decode attention is linear in KV tokens by then).
MAX_DECODE_KV_TOKENS = {"cpu": 2**18, "cuda": 2**21}


@dataclass(slots=True)
class Grid:
    """The shapes one calibration measures, after the memory check."""

    tokens: list[int]                              # linear layers, lm_head, misc ops
    prefill: list[tuple[int, int]]                 # (query tokens, context tokens)
    decode: list[tuple[int, int, float]]           # (batch size, mean context, spread)
    dropped: list[str] = field(default_factory=list)  # what the memory check left out


def make_grid(spec: ModelSpec, quick: bool, dtype_bytes: int, free_bytes: int, device_type: str = "cpu") -> Grid:
    """The points for ``spec`` in full or quick mode, within ``free_bytes`` of memory."""
    budget = free_bytes * MEMORY_SHARE
    max_ctx = spec.max_context
    grid = Grid([], [], [])
    for n in QUICK_TOKENS if quick else FULL_TOKENS:
        _keep(grid.tokens, n, linear_bytes(spec, n, dtype_bytes), budget, grid.dropped, f"{n} tokens")
    for q, ctx in prefill_points(max_ctx, quick):
        _keep(grid.prefill, (q, ctx), prefill_bytes(spec, q, ctx, dtype_bytes), budget, grid.dropped,
              f"prefill {q}+{ctx}")
    kv_cap = MAX_DECODE_KV_TOKENS.get(device_type, MAX_DECODE_KV_TOKENS["cpu"])
    for b, ctx, spread in decode_points(max_ctx, quick):
        if b * padded_context(ctx, spread) > kv_cap:
            continue  # by design, not for memory: not reported as dropped
        _keep(grid.decode, (b, ctx, spread), decode_bytes(spec, b, padded_context(ctx, spread), dtype_bytes),
              budget, grid.dropped, f"decode {b}x{ctx}")
    return grid


def prefill_points(max_ctx: int, quick: bool) -> list[tuple[int, int]]:
    """(query, context) pairs: whole prompts, then chunks over caches up to ``max_ctx`` in all."""
    whole = [(q, 0) for q in (QUICK_PREFILL if quick else FULL_PREFILL) if q <= max_ctx]
    chunks = []
    for q in QUICK_CHUNKS if quick else FULL_CHUNKS:
        contexts = [c for c in CONTEXTS if q + c <= max_ctx]
        if quick:
            contexts = contexts[::2]
        # the longest cache the model allows, so the fit never extrapolates in context
        if max_ctx - q > 0 and max_ctx - q not in contexts:
            contexts.append(max_ctx - q)
        chunks += [(q, c) for c in contexts]
    return whole + chunks


def decode_points(max_ctx: int, quick: bool) -> list[tuple[int, int, float]]:
    """(batch, mean context, spread) triples: equal contexts everywhere, mixed ones on a subset."""
    contexts = [c for c in (QUICK_DECODE_CONTEXTS if quick else DECODE_CONTEXTS) if c <= max_ctx]
    batches = QUICK_BATCHES if quick else FULL_BATCHES
    points = [(b, c, 1.0) for b in batches for c in contexts]
    mixed_batches = [32] if quick else [8, 32, 128]
    mixed_contexts = [1024] if quick else [256, 1024, max_ctx // 2]
    spreads = SPREADS[-1:] if quick else SPREADS
    for b in mixed_batches:
        for c in sorted(set(mixed_contexts)):
            points += [(b, c, s) for s in spreads if padded_context(c, s) <= max_ctx]
    return points


def decode_contexts(batch: int, mean: int, spread: float) -> list[int]:
    """``batch`` context lengths evenly spread from lo to ``spread`` * lo, averaging ``mean``."""
    if batch == 1 or spread == 1.0:
        return [mean] * batch
    lo = 2 * mean / (1 + spread)
    step = (spread - 1) * lo / (batch - 1)
    return [max(1, round(lo + k * step)) for k in range(batch)]


def padded_context(mean: int, spread: float) -> int:
    """The longest context in a batch of ``spread``: what a padded kernel computes over."""
    return round(2 * mean * spread / (1 + spread))


def linear_bytes(spec: ModelSpec, n: int, dtype_bytes: int) -> int:
    """Input plus the widest output of the linear layers at ``n`` rows (LM head logits, usually)."""
    widest = max(spec.q_size + 2 * spec.kv_size, 2 * spec.intermediate_size, spec.vocab_size)
    return n * (spec.hidden_size + widest) * dtype_bytes


def prefill_bytes(spec: ModelSpec, q: int, ctx: int, dtype_bytes: int) -> int:
    """Q, K, V, output, mask, and the float32 scores a non-fused kernel would hold."""
    kv = q + ctx
    tensors = (2 * q * spec.q_size + 2 * kv * spec.kv_size) * dtype_bytes
    return tensors + q * kv * (1 + 4 * spec.num_heads)


def decode_bytes(spec: ModelSpec, batch: int, padded_ctx: int, dtype_bytes: int) -> int:
    """The padded K and V caches of a decode batch, plus mask and scores."""
    return batch * padded_ctx * (2 * spec.kv_size * dtype_bytes + 1 + 4 * spec.num_heads)


def _keep(points: list, point, need: float, budget: float, dropped: list[str], label: str) -> None:
    if need <= budget:
        points.append(point)
    else:
        dropped.append(f"{label} ({need / 2**30:.1f} GiB > {budget / 2**30:.1f} GiB free share)")
