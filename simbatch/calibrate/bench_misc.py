"""Everything in a step besides the GEMMs and attention, and the all-reduce.

* ``misc_layer`` (per layer, per token count): input and post-attention
  RMSNorm, RoPE on Q and K (gathering cos/sin at the tokens' positions), the
  SiLU-mul activation and the two residual adds.
* ``misc_step`` (per step, per token count): embedding lookup, final RMSNorm
  and greedy sampling (argmax over the vocabulary) of every row. One logits row
  per token is exact for decode and an upper bound for prefill, where only the
  last token of each sequence is sampled.
* ``step_overhead`` (per step, ``num_tokens`` 0, ``batch_size`` = requests in
  the plan): the Python side of one engine step with the model call left out:
  a FCFS scheduling loop building a :class:`~simbatch.plan.StepPlan` of N
  decode requests, the tensors a model runner builds from it (input ids,
  positions, slot mapping, context lengths, block tables; 512-token contexts in
  16-token blocks) copied to the device, reading the sampled ids back (the
  synchronisation every step pays) and appending them to the requests.
* ``allreduce`` (per call, ``num_tokens`` rows of ``hidden_size``): only with
  more than one GPU; one process per GPU over NCCL, timed on rank 0.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable

import torch
import torch.nn.functional as F

from simbatch.calibrate.layers import LayerWeights, apply_rope, random_tensor, rms_norm, rope_tables, silu_mul
from simbatch.calibrate.timing import Timer
from simbatch.plan import StepPlan
from simbatch.profiles import measurement_row

BLOCK_SIZE = 16
OVERHEAD_CONTEXT = 512
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


def bench_step_overhead(device: torch.device, requests: list[int], timer: Timer,
                        progress: Callable[[str], None] = lambda _: None) -> list[dict]:
    """``step_overhead`` rows: one engine step's Python and tensor bookkeeping for N requests."""
    rows = []
    for n in requests:
        state = [_Request(i, OVERHEAD_CONTEXT) for i in range(n)]
        stats = timer.measure(lambda state=state: _engine_step(state, device))
        rows.append(measurement_row("step_overhead", 0, stats, batch_size=n))
        progress(f"step_overhead {n} requests")
    return rows


class _Request:
    """What an engine keeps per running request."""

    __slots__ = ("block_ids", "id", "num_computed_tokens", "token_ids")

    def __init__(self, rid: int, context: int):
        self.id = rid
        self.token_ids = [1] * context
        self.num_computed_tokens = context
        self.block_ids = list(range(rid * 1000, rid * 1000 + context // BLOCK_SIZE + 1))


def _engine_step(running: list[_Request], device: torch.device, token_budget: int = 8192) -> None:
    """Schedule (FCFS, one decode token each), build and ship the inputs, apply the results."""
    ids, new, ctx = [], [], []
    for r in running:
        if token_budget < 1:
            break
        ids.append(r.id), new.append(1), ctx.append(r.num_computed_tokens)
        token_budget -= 1
    plan = StepPlan(ids, new, ctx, num_decode_slots=len(ids))
    scheduled = [running[i] for i in plan.request_ids]
    longest = max(len(r.block_ids) for r in scheduled)
    inputs = {
        "input_ids": [r.token_ids[-1] for r in scheduled],
        "positions": plan.num_context_tokens,
        "slot_mapping": [r.block_ids[c // BLOCK_SIZE] * BLOCK_SIZE + c % BLOCK_SIZE
                         for r, c in zip(scheduled, plan.num_context_tokens)],
        "context_lens": [c + 1 for c in plan.num_context_tokens],
        "block_tables": [r.block_ids + [0] * (longest - len(r.block_ids)) for r in scheduled],
    }
    tensors = {k: torch.tensor(v, dtype=torch.int64).to(device, non_blocking=True) for k, v in inputs.items()}
    sampled = tensors["input_ids"].tolist()  # no model: the "sampled" ids are the inputs; .tolist() syncs
    for r, token in zip(scheduled, sampled):
        r.token_ids.append(token)
        r.num_computed_tokens += 1
        if r.num_computed_tokens % BLOCK_SIZE == 0:
            r.block_ids.append(r.block_ids[-1] + 1)


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
