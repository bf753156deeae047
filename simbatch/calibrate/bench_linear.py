"""Linear layers: QKV, output projection, MLP up (gate and up fused) and down, LM head.

Each is ``F.linear`` of a fresh-per-point random input against the layer's
weight, timed with its output allocation, as a model's forward pass pays it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from simbatch.backends.torch_layers import LayerWeights, random_tensor
from simbatch.calibrate.timing import Timer
from simbatch.catalog.profiles import measurement_row


def linear_ops(w: LayerWeights) -> dict[str, tuple[torch.Tensor, int]]:
    """Operator name -> (weight, input width)."""
    spec = w.spec
    return {
        "qkv_proj": (w.qkv, spec.hidden_size),
        "o_proj": (w.o, spec.q_size),
        "mlp_up": (w.gate_up, spec.hidden_size),
        "mlp_down": (w.down, spec.intermediate_size),
        "lm_head": (w.lm_head, spec.hidden_size),
    }


def bench_linear(w: LayerWeights, tokens: list[int], timer: Timer, seed: int,
                 progress: Callable[[str], None] = lambda _: None) -> list[dict]:
    """One row per (linear operator, token count)."""
    gen = torch.Generator(device=w.device).manual_seed(seed)
    rows = []
    for n in tokens:
        for op, (weight, width) in linear_ops(w).items():
            x = random_tensor((n, width), gen, w.device, w.dtype)
            stats = timer.measure(lambda x=x, weight=weight: F.linear(x, weight))
            rows.append(measurement_row(op, n, stats))
            del x
        progress(f"linear {n} tokens")
    return rows
