"""A real, paged KV cache: per-layer K and V pools, and a block table per request.

Each layer's keys live in one preallocated tensor of ``(num_blocks + 1) *
block_size`` token slots (vLLM's layout, flattened to ``(slots, kv_heads,
head_dim)``), values likewise. A request owns a list of block ids; token ``p``
of the request sits in slot ``blocks[p // block_size] * block_size + p %
block_size``. The extra last block is *scratch*: padded tokens write there and
masked gather positions read from there, so one index tensor per step serves
every layer without special cases.

Blocks are handed out as tokens are written and returned when the engine's
policy frees the request (it finished, or was preempted for recompute); a
request that reappears with context 0 is also dropped first (recompute).
"""

from __future__ import annotations

import torch

from simbatch.catalog.models import ModelSpec


class PagedKVPool:
    """K/V tensors for every layer plus the block bookkeeping of the requests that use them."""

    def __init__(self, spec: ModelSpec, num_blocks: int, block_size: int, device: torch.device,
                 dtype: torch.dtype):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("PagedKVPool needs at least one block of at least one token")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.scratch_block = num_blocks  # the extra block (see the module docstring)
        slots = (num_blocks + 1) * block_size
        shape = (slots, spec.num_kv_heads, spec.head_dim)
        # Zeros, not empty: masked positions are still read (padded decode gathers), and
        # 0 x NaN from uninitialised memory would poison the real rows' attention output.
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(spec.num_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(spec.num_layers)]
        # Popped from the end: block 0 first, so a run's layout is deterministic.
        self.free_blocks = list(range(num_blocks - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        """Blocks not held by any request."""
        return len(self.free_blocks)

    def length(self, rid: int) -> int:
        """Tokens of request ``rid`` in the cache (0 when it holds none)."""
        return self.lengths.get(rid, 0)

    def ensure(self, rid: int, num_tokens: int) -> list[int]:
        """Give ``rid`` enough blocks for ``num_tokens`` tokens; return its block table."""
        table = self.tables.setdefault(rid, [])
        need = -(-num_tokens // self.block_size) - len(table)
        if need > len(self.free_blocks):
            raise RuntimeError(f"torch KV pool exhausted: request {rid} needs {need} more block(s), "
                               f"{len(self.free_blocks)} free of {self.num_blocks}")
        for _ in range(need):
            table.append(self.free_blocks.pop())
        return table

    def advance(self, rid: int, num_new: int) -> None:
        """Record that ``num_new`` tokens of ``rid`` were written this step."""
        self.lengths[rid] = self.lengths.get(rid, 0) + num_new

    def release(self, rid: int) -> None:
        """Return every block of ``rid`` (finished, or preempted for recompute)."""
        table = self.tables.pop(rid, None)
        self.lengths.pop(rid, None)
        if table:
            self.free_blocks.extend(reversed(table))

    def pretend(self, rid: int, tokens: int) -> None:
        """Give ``rid`` exactly ``tokens`` cached tokens by bookkeeping alone (blocks allocated,
        length set, values left as they are): a step's timing does not depend on the values,
        so calibration and replays need no prefill first."""
        self.release(rid)
        if tokens:
            self.ensure(rid, tokens)
            self.advance(rid, tokens)

    def slot(self, table: list[int], position: int) -> int:
        """The flat slot of token ``position`` of a request with block table ``table``."""
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def scratch_slot(self) -> int:
        """A slot padded tokens may write to and masked positions may read from."""
        return self.scratch_block * self.block_size

    def read(self, rid: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values) of ``rid`` in ``layer``, ``(length, kv_heads, head_dim)`` each (for tests)."""
        n = self.length(rid)
        table = self.tables.get(rid, [])
        idx = torch.tensor([self.slot(table, p) for p in range(n)], dtype=torch.long,
                           device=self.keys[layer].device)
        return self.keys[layer][idx], self.values[layer][idx]
