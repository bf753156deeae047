"""Turn a step plan into the tensors one forward pass needs (a model runner's "prepare inputs").

Rows are the plan's slots laid end to end: slot ``i`` computes ``new + pad``
rows, its kept tokens first, then its padded ones (right padding: the kept
tokens never see the padding under a causal mask). Decode slots come first and
have one row each.

Everything the layers index with is built here once per step, so no layer
loops over requests on the decode path:

* ``slot_mapping``: where each row's K and V are written (padding: scratch);
* decode: ``decode_index`` ``(D, L)`` pool slots of every decode row's context
  padded to the longest, and ``decode_mask`` hiding the padding (a padded
  batch's rows span the padded length in their own blocks; other plans' shorter
  rows read scratch there);
* prefill: groups of adjacent slots with no cached context and equal length
  (one batched causal call: a static batch's padded prefill is one group), and
  single slots over a cached context with their own gather index and mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from simbatch.backends.torch_kv import PagedKVPool
from simbatch.backends.torch_layers import chunk_mask
from simbatch.core.plan import StepPlan

PAD_TOKEN = 0
# Synthetic token ids: a fixed function of (request, position), so a request
# recomputed after preemption, or run alone, sees exactly the same inputs.
# Sampled tokens are not fed back: timing does not depend on token values, and
# a greedy argmax over random weights would let float reordering change the
# inputs of later steps (the batched-vs-alone tests compare hidden states).
_MUL_REQ, _MUL_POS = 7919, 104_729


def token_id(rid: int, position: int, vocab: int) -> int:
    """The input token of request ``rid`` at ``position``."""
    return (rid * _MUL_REQ + position * _MUL_POS + 1) % vocab


@dataclass
class PrefillGroup:
    """Prefill rows ``start .. start + num_slots * q_len`` attended as one call."""

    start: int
    num_slots: int
    q_len: int
    context: int = 0
    gather: torch.Tensor | None = None  # (context + q_len,) pool slots, for a chunk over a cache
    mask: object = None  # (q_len, context + q_len) booleans (CPU) or a causal bias (GPU), for a chunk over a cache


@dataclass
class StepInputs:
    """Index tensors of one step (see the module docstring)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    num_decode: int
    decode_index: torch.Tensor | None
    decode_mask: torch.Tensor | None
    prefill: list[PrefillGroup]
    logit_rows: torch.Tensor  # each slot's last kept row (last row for padding-only slots)
    rows: dict[int, tuple[int, int]] = field(default_factory=dict)  # request -> (first row, kept rows)

    @property
    def num_rows(self) -> int:
        """Rows (tokens) the forward pass computes, padding included."""
        return int(self.input_ids.shape[0])


def prepare(plan: StepPlan, pool: PagedKVPool, vocab: int, max_position: int,
            device: torch.device, row_owners: dict[int, int] | None = None) -> StepInputs:
    """The step's index tensors, with blocks allocated for every kept token.

    A padded plan's decode rows (static, dynamic: ``num_pad_tokens`` set) attend over
    the planned, padded context, so each row's blocks are extended to span it, as a
    padded engine's rectangular KV cache does (Hugging Face ``generate`` pads every row
    of the batch to one length and attends over all of it, masked: transformers'
    ``cache_utils.DynamicLayer.update`` grows one ``[batch, heads, seq, dim]`` tensor
    per layer for all rows; docs/validation.md): the padding positions are the row's
    own memory, not one cache-hot scratch block, and the step reads what the plan prices. Only the blocks are allocated (the policy reserved them:
    longest prompt + longest output per row); the row's length, what it has written,
    stays its own, and the mask hides the rest.

    ``row_owners`` (slot -> request id): for a padding-only decode slot, the finished
    request that held the row. Its gather then reads that request's cache (spanned the
    same way), as a real static-batching engine's finished row reads its own KV; the
    row still writes to scratch and sees only its pad.
    """
    ids, positions, slots, logit_rows, rows = [], [], [], [], {}
    pads = plan.num_pad_tokens or [0] * plan.num_slots
    decode_ctx, decode_len, decode_tables = [], [], []
    groups: list[PrefillGroup] = []
    scratch = pool.scratch_slot()
    padded = plan.num_pad_tokens is not None
    start = 0
    for i, (rid, new, ctx, pad) in enumerate(zip(plan.request_ids, plan.num_new_tokens,
                                                  plan.num_context_tokens, pads)):
        cached = pool.length(rid) if rid >= 0 else 0
        decode = i < plan.num_decode_slots
        span = max(ctx, cached) + 1 if padded and decode else 0  # the padded context + this token
        if rid >= 0:
            table = pool.ensure(rid, max(cached + new, span))
        else:
            owner = (row_owners or {}).get(i)
            table = pool.ensure(owner, span) if decode and owner in pool.tables else []
        for p in range(cached, cached + new):
            ids.append(token_id(rid, p, vocab))
            positions.append(p)
            slots.append(pool.slot(table, p))
        # Padded rows: pad token, positions after the kept ones (clamped to the RoPE table).
        ids.extend([PAD_TOKEN] * pad)
        positions.extend(min(cached + new + k, max_position) for k in range(pad))
        slots.extend([scratch] * pad)
        if rid >= 0:
            rows[rid] = (start, new)
        q = new + pad
        logit_rows.append(start + (new if new else q) - 1)
        if decode:
            decode_ctx.append(max(ctx, cached))
            decode_len.append(cached)
            decode_tables.append(table)
        else:
            _add_prefill(groups, pool, table, start, q, cached, device)
        start += q
    to = _to_device(device)
    inputs = StepInputs(
        input_ids=to(ids), positions=to(positions), slot_mapping=to(slots),
        num_decode=plan.num_decode_slots, decode_index=None, decode_mask=None,
        prefill=groups, logit_rows=to(logit_rows), rows=rows)
    if decode_ctx:
        inputs.decode_index, inputs.decode_mask = _decode_gather(pool, decode_tables, decode_ctx,
                                                                 decode_len, device)
    return inputs


def _add_prefill(groups: list[PrefillGroup], pool: PagedKVPool, table: list[int], start: int, q: int,
                 cached: int, device: torch.device) -> None:
    """Append a prefill slot: joined to the previous group when both are context-free and equal."""
    if cached == 0:
        last = groups[-1] if groups else None
        if last is not None and last.context == 0 and last.q_len == q and \
                last.start + last.num_slots * last.q_len == start:
            last.num_slots += 1
        else:
            groups.append(PrefillGroup(start, 1, q))
        return
    gather = torch.tensor([pool.slot(table, p) for p in range(cached + q)], dtype=torch.long, device=device)
    groups.append(PrefillGroup(start, 1, q, cached, gather, _chunk_mask(q, cached, device)))


def _decode_gather(pool: PagedKVPool, tables: list[list[int]], contexts: list[int], lengths: list[int],
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(D, L)`` pool slots of each decode row's context plus its new token, and the mask.

    ``L`` is the longest *planned* context + 1: a padded batch (static, dynamic)
    attends over its padded length for real. Row ``b`` may see its cached
    tokens and the token it writes this step (positions ``0 .. lengths[b]``);
    everything else is masked. Past the end of its table a row reads scratch: in
    a padded batch no row's table ends before ``L`` (:func:`prepare` spans them),
    elsewhere a shorter row's padding costs one cache-hot block.
    """
    bs = pool.block_size
    longest = max(contexts) + 1
    width = -(-longest // bs)
    scratch = pool.scratch_block
    table = torch.tensor([t + [scratch] * (width - len(t)) for t in tables], dtype=torch.long)
    j = torch.arange(longest)
    index = table[:, j // bs] * bs + j % bs
    length = torch.tensor(lengths, dtype=torch.long)
    visible = j[None, :] <= length[:, None]
    mask = None if bool(visible.all()) else visible[:, None, None, :].to(device)
    return index.to(device), mask


def _chunk_mask(q: int, cached: int, device: torch.device):
    """New token i sees the cache and new tokens 0..i: on a GPU torch's bottom-right causal bias
    (fused kernels apply it without a mask tensor), on CPU an explicit boolean mask (faster
    there), as the calibration's ``attn_prefill`` measured it."""
    if device.type == "cuda":
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(q, cached + q)
    return chunk_mask(q, cached, device)


def _to_device(device: torch.device):
    def to(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long).to(device, non_blocking=True)

    return to
