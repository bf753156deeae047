"""Everything in a step besides the GEMMs and attention, and the all-reduce.

The engine's step overhead is measured on the real engine and backend
(:mod:`simbatch.calibrate.bench_backend`), not here.

* ``misc_layer`` (per layer, per token count): input and post-attention
  RMSNorm, RoPE on Q and K (gathering cos/sin at the tokens' positions), the
  SiLU-mul activation and the two residual adds.
* ``misc_step`` (per step, per token count): embedding lookup, final RMSNorm
  and greedy sampling (argmax over the vocabulary) of every row. One logits row
  per token is exact for decode and an upper bound for prefill, where only the
  last token of each sequence is sampled.
* ``allreduce`` (per call, ``num_tokens`` rows of ``hidden_size``): only with
  more than one GPU; one process per GPU over NCCL, timed on rank 0.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable

import torch
import torch.nn.functional as F

from simbatch.backends.torch_layers import (
    LayerWeights,
    apply_rope,
    random_tensor,
    rms_norm,
    rope_tables,
    silu_mul,
)
from simbatch.calibrate.timing import Timer
from simbatch.catalog.profiles import measurement_row

ALLREDUCE_TP = (2, 4, 8)


def bench_misc(w: LayerWeights, tokens: list[int], timer: Timer, seed: int,
               progress: Callable[[str], None] = lambda _: None) -> list[dict]:
    """``misc_layer`` and ``misc_step`` rows, one each per token count."""
    gen = torch.Generator(device=w.device).manual_seed(seed)
    rows = []
    for n in tokens:
        rows.append(measurement_row("misc_layer", n, timer.measure(_misc_layer_call(w, n, gen))))
        rows.append(measurement_row("misc_step", n, timer.measure(_misc_step_call(w, n, gen))))
        progress(f"misc {n} tokens")
    return rows


def _misc_layer_call(w: LayerWeights, n: int, gen: torch.Generator) -> Callable[[], torch.Tensor]:
    spec, dev, dt = w.spec, w.device, w.dtype
    x, attn_out, mlp_out = (random_tensor((n, spec.hidden_size), gen, dev, dt) for _ in range(3))
    q = random_tensor((n, spec.num_heads, spec.head_dim), gen, dev, dt)
    k = random_tensor((n, spec.num_kv_heads, spec.head_dim), gen, dev, dt)
    up = random_tensor((n, w.gate_up.shape[0]), gen, dev, dt)
    positions = torch.arange(n, device=dev) % spec.max_context
    cos_all, sin_all = rope_tables(torch.arange(spec.max_context, device=dev), spec.head_dim, dt)
    activation = silu_mul if spec.gated_mlp else F.relu

    def run():
        rms_norm(x, w.norm)                                       # input norm
        cos, sin = cos_all[positions], sin_all[positions]         # the engine's cos/sin cache lookup
        apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        residual = x + attn_out
        rms_norm(residual, w.norm)                                # post-attention norm
        activation(up)
        return residual + mlp_out

    return run


def _misc_step_call(w: LayerWeights, n: int, gen: torch.Generator) -> Callable[[], torch.Tensor]:
    spec = w.spec
    ids = torch.randint(0, spec.vocab_size, (n,), generator=gen, device=w.device)
    hidden = random_tensor((n, spec.hidden_size), gen, w.device, w.dtype)
    logits = random_tensor((n, spec.vocab_size), gen, w.device, w.dtype)

    def run():
        F.embedding(ids, w.embedding)
        rms_norm(hidden, w.norm)
        return logits.argmax(dim=-1)

    return run


def bench_allreduce(device: torch.device, dtype: torch.dtype, hidden: int, tokens: list[int],
                    timer: Timer) -> tuple[list[dict], str]:
    """``allreduce`` rows for each TP size the GPUs allow, and a note saying what was done."""
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    sizes = [tp for tp in ALLREDUCE_TP if tp <= gpus]
    if not sizes:
        return [], f"allreduce not measured: {gpus or 'no'} GPU(s) here, it needs at least 2"
    rows = []
    for tp in sizes:
        rows += allreduce_rows(tp, "cuda", dtype, hidden, tokens, timer)
    return rows, f"allreduce measured over NCCL for TP {', '.join(map(str, sizes))} (times of rank 0)"


def allreduce_rows(tp: int, device_type: str, dtype: torch.dtype, hidden: int, tokens: list[int],
                   timer: Timer) -> list[dict]:
    """Rank 0's ``allreduce`` rows from ``tp`` processes (NCCL over GPUs, or gloo on CPU for tests)."""
    import torch.multiprocessing as mp

    queue = mp.get_context("spawn").SimpleQueue()
    args = (tp, _free_port(), device_type, dtype, hidden, tokens, timer, queue)
    mp.spawn(_allreduce_worker, args=args, nprocs=tp, join=True)
    return queue.get()


def _allreduce_worker(rank: int, tp: int, port: int, device_type: str, dtype, hidden: int, tokens: list[int],
                      timer: Timer, queue) -> None:
    import torch.distributed as dist

    if device_type == "cuda":
        torch.cuda.set_device(rank)
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo",
                            init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=tp)
    try:
        # fixed counts: every rank must make the same number of all_reduce calls
        local = Timer(device, timer.warmup, timer.max_repeats, timer.max_repeats, math.inf)
        rows = []
        for n in tokens:
            x = torch.ones(n, hidden, device=device, dtype=dtype)
            dist.barrier()
            rows.append(measurement_row("allreduce", n, local.measure(lambda x=x: dist.all_reduce(x)),
                                        tensor_parallel=tp))
        if rank == 0:
            queue.put(rows)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
