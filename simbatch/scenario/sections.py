"""The scenario's small sections: ``kv_cache:`` (how the KV pool is sized or set) and ``slo:``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simbatch.core.params import require
from simbatch.scenario.dotted import set_dotted  # noqa: F401  (re-exported: --set, sweep grids)

if TYPE_CHECKING:
    pass


MAX_GPU_BLOCKS = 10**9  # kv_cache.num_gpu_blocks: 16 billion tokens at 16 a block, past any GPU


@dataclass(frozen=True)
class KVCacheParams:
    """KV-cache sizing and reservation mode (see :mod:`simbatch.core.kvcache`)."""

    block_size: int = 16
    mode: str = "paged"
    gpu_memory_utilization: float = 0.9
    reserve: str = "oracle"  # what mode max_length reserves: oracle | pow2 | max (simbatch.core.kvcache)
    prefix_caching: bool = False  # share cached prompt prefixes (simbatch.core.prefix_cache)
    hash_block_size: int = 512  # tokens per trace hash_id (Mooncake: 512)
    # The server's own block count (vLLM's num_gpu_blocks_override, or the "# GPU blocks" /
    # "GPU KV cache size" line of its start-up log): replaces the engine's memory rule.
    num_gpu_blocks: int | None = None

    def __post_init__(self):
        require(self.block_size >= 1, "block_size", "must be >= 1")
        require(self.num_gpu_blocks is None or 1 <= self.num_gpu_blocks <= MAX_GPU_BLOCKS, "num_gpu_blocks",
                f"must be a whole number of blocks from 1 to {MAX_GPU_BLOCKS:,}")
        require(self.hash_block_size >= 1, "hash_block_size", "must be >= 1")
        require(self.mode in ("paged", "max_length"), "mode",
                f"unknown mode {self.mode!r}; allowed: paged, max_length")
        require(self.reserve in ("oracle", "pow2", "max"), "reserve",
                f"unknown reserve {self.reserve!r}; allowed: oracle, pow2, max")
        require(self.reserve == "oracle" or self.mode == "max_length", "reserve",
                f"{self.reserve!r} applies to mode max_length (paged caches reserve nothing ahead)")
        require(0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization", "must be in (0, 1]")


@dataclass(frozen=True)
class SLOParams:
    """Latency targets in milliseconds; a request attains the SLO when it meets every one given."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def __post_init__(self):
        for name in ("ttft_ms", "tpot_ms", "e2el_ms"):
            v = getattr(self, name)
            require(v is None or v > 0, name, "must be > 0")

    def as_dict(self) -> dict[str, float]:
        """Only the targets that are set."""
        return {k: v for k, v in self.__dict__.items() if v is not None}
