"""The KV budget: how a serving engine sizes its KV pool, term by term.

Every engine sizes the pool the same way in outline, per GPU::

    KV bytes = total x gpu_memory_utilization
               - weights (as loaded: this GPU's shard, tied embeddings once, quantisation scales)
               - activations (the start-up profiling pass's peak)
               - CUDA graphs (where the engine deducts them before sizing the pool)
               - other (memory outside PyTorch the engine counts, a reserved share)
    blocks   = floor(KV bytes / bytes of one block)

``total`` is the memory the driver reports (``torch.cuda.mem_get_info()``'s
total, a little under the card's nominal size; the GPU presets carry it with
its source). Which terms an engine counts, and how, is its *memory rule*: the
memory fields of :class:`simbatch.catalog.servers.EngineParams`, set by the engine
presets with the source lines they come from (see :mod:`simbatch.catalog.servers`).
``kv_cache.num_gpu_blocks`` (vLLM's ``num_gpu_blocks_override``) replaces the
rule by the number a server printed at start-up.

:class:`KVBudget` is the breakdown: ``simbatch run`` prints it and
``summary.json`` carries it (``kv_budget``), so a user sees where the memory
went before reading a knee off the simulation.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30


@dataclass(frozen=True)
class KVBudget:
    """One GPU's memory as the engine splits it (bytes), and the KV pool that results."""

    total_bytes: float  # what the driver reports
    utilization: float  # gpu_memory_utilization
    weight_bytes: float
    activation_bytes: float
    graph_bytes: float
    other_bytes: float
    bytes_per_block: float  # every layer's K and V of one block on this GPU
    block_size: int  # tokens per block
    blocks: int
    override: bool = False  # blocks came from kv_cache.num_gpu_blocks, not from the rule

    @property
    def usable_bytes(self) -> float:
        """``total x gpu_memory_utilization``: what the engine lets itself use."""
        return self.total_bytes * self.utilization

    @property
    def left_bytes(self) -> float:
        """What the rule leaves for the KV cache before rounding to blocks (may be negative)."""
        return self.usable_bytes - self.weight_bytes - self.activation_bytes - self.graph_bytes - self.other_bytes

    @property
    def kv_bytes(self) -> float:
        """Bytes the pool's blocks take."""
        return self.blocks * self.bytes_per_block

    @property
    def tokens(self) -> int:
        """Tokens the pool holds."""
        return self.blocks * self.block_size

    def describe(self) -> dict:
        """The breakdown for ``summary.json``: GiB per term, blocks and tokens."""
        gib = {f"{k}_gib": round(v / GiB, 4) for k, v in (
            ("total", self.total_bytes), ("usable", self.usable_bytes), ("weights", self.weight_bytes),
            ("activations", self.activation_bytes), ("graphs", self.graph_bytes),
            ("other", self.other_bytes), ("kv", self.kv_bytes))}
        return {"gpu_memory_utilization": self.utilization, **gib, "blocks": self.blocks,
                "block_size": self.block_size, "tokens": self.tokens,
                "source": "kv_cache.num_gpu_blocks" if self.override else "engine memory rule"}

    def line(self) -> str:
        """One line a person reads: where one GPU's memory went, and the pool in tokens."""
        g = lambda b: f"{b / GiB:.2f}"  # noqa: E731
        pool = f"KV {g(self.kv_bytes)} GiB = {self.blocks:,} blocks x {self.block_size} = {self.tokens:,} tokens"
        if self.override:
            return f"KV budget per GPU: {pool} (kv_cache.num_gpu_blocks)"
        return (f"KV budget per GPU: {g(self.total_bytes)} GiB x {self.utilization:g} = {g(self.usable_bytes)}"
                f" - weights {g(self.weight_bytes)} - activations {g(self.activation_bytes)}"
                f" - graphs {g(self.graph_bytes)} - other {g(self.other_bytes)} -> {pool}")


def size_budget(*, total_bytes: float, utilization: float, weight_bytes: float, activation_bytes: float,
                graph_bytes: float, other_bytes: float, bytes_per_block: float, block_size: int,
                num_gpu_blocks: int | None = None) -> KVBudget:
    """The budget of one GPU: the rule's blocks (floor of what is left over one block's
    bytes, as vLLM v0's ``profile_num_available_blocks`` and V1's ``get_kv_cache_config``
    both round), or ``num_gpu_blocks`` where the user gave the server's number."""
    terms = dict(total_bytes=total_bytes, utilization=utilization, weight_bytes=weight_bytes,
                 activation_bytes=activation_bytes, graph_bytes=graph_bytes, other_bytes=other_bytes,
                 bytes_per_block=bytes_per_block, block_size=block_size)
    if num_gpu_blocks is not None:
        return KVBudget(**terms, blocks=int(num_gpu_blocks), override=True)
    left = total_bytes * utilization - weight_bytes - activation_bytes - graph_bytes - other_bytes
    return KVBudget(**terms, blocks=max(0, int(left // bytes_per_block)))
