"""KV-cache memory: capacity in blocks and the block accounting policies use.

Capacity is sized by :mod:`simbatch.catalog.kv_budget`: what is left of
``gpu_memory_utilization`` x the GPU's memory after the weights and what the
serving engine holds back (its profiling pass, CUDA graphs, memory outside
PyTorch; the rule of :mod:`simbatch.catalog.servers`), divided by the bytes of one
block (``block_size`` tokens x KV bytes per token).

Two reservation modes:
- ``paged``: blocks are taken as tokens are computed (vLLM);
- ``max_length``: a request's whole length is reserved when it is admitted
  (Orca / FasterTransformer), so a running request never needs another block.
  ``reserve`` says how long that is, as the vLLM paper's Orca baselines do
  (Kwon et al., SOSP'23, section 6.1): ``oracle``, prompt + true output;
  ``pow2``, prompt + the true output rounded up to a power of two (over-
  reserving by at most 2x); ``max``, the model's maximum length
  (``max_context``, 2,048 for OPT) whatever the request.

The admission hooks (:meth:`KVCache.match`, :meth:`KVCache.admission_blocks`,
:meth:`KVCache.claim`, :meth:`KVCache.commit`) do nothing here; the prefix
cache (:class:`simbatch.core.prefix_cache.PrefixKVCache`) overrides them.
"""

from __future__ import annotations

import numpy as np

from simbatch.core.sequence import Sequence
from simbatch.errors import SimbatchError

KV_MODES = ("paged", "max_length")
RESERVES = ("oracle", "pow2", "max")


def reserved_tokens(prompt, output, reserve: str, max_tokens: int) -> np.ndarray:
    """Tokens a ``max_length`` cache reserves for requests of ``prompt`` + ``output`` tokens
    (ints or arrays) under ``reserve`` (module docstring); never less than the request."""
    prompt, output = np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64)
    if reserve == "oracle":
        return prompt + output
    if reserve == "pow2":
        # 2 ** ceil(log2(output)) in integers: frexp's exponent is the bit length of output - 1.
        return prompt + (np.int64(1) << np.frexp(np.maximum(output, 1) - 1)[1].astype(np.int64))
    if reserve == "max":
        return np.maximum(prompt + output, max_tokens)
    raise SimbatchError("kv_cache.reserve", f"unknown reserve {reserve!r}; allowed: {', '.join(RESERVES)}")


class KVCache:
    """Block accounting for one replica (counts only: which block holds what is not needed yet)."""

    prefix_caching = False  # True in simbatch.core.prefix_cache.PrefixKVCache
    # Told the id of every request whose blocks are freed (it finished, or was preempted for
    # recompute), so a real backend frees its own cache too; None in simulations.
    on_free = None

    def __init__(self, num_blocks: int, block_size: int = 16, mode: str = "paged",
                 reserve: str = "oracle", max_tokens: int = 0):
        if mode not in KV_MODES:
            raise SimbatchError("kv_cache.mode", f"unknown mode {mode!r}; allowed: {', '.join(KV_MODES)}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.mode = mode
        self.reserve = reserve  # how much a max_length cache reserves (module docstring)
        self.max_tokens = max_tokens  # the model's maximum length, for reserve "max"
        self.num_used = 0

    @property
    def num_free(self) -> int:
        """Blocks not held by any request."""
        return self.num_blocks - self.num_used

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def blocks_needed(self, seq: Sequence, num_new: int) -> int:
        """Extra blocks ``seq`` needs to compute ``num_new`` more tokens (0 when already reserved)."""
        if self.mode == "max_length":
            target = self.blocks_for(self.reservation(seq))
        else:
            target = self.blocks_for(seq.num_computed + num_new)
        return max(0, target - seq.num_blocks)

    def reservation(self, seq: Sequence) -> int:
        """Tokens a ``max_length`` cache reserves for ``seq`` at admission."""
        return int(reserved_tokens(seq.prompt_tokens, seq.output_tokens, self.reserve, self.max_tokens))

    def can_allocate(self, num_blocks: int, reserve: int = 0) -> bool:
        """Whether ``num_blocks`` are free while keeping ``reserve`` blocks spare."""
        return num_blocks + reserve <= self.num_blocks - self.num_used

    def allocate(self, seq: Sequence, num_blocks: int) -> None:
        """Give ``seq`` ``num_blocks`` more blocks (caller checked :meth:`can_allocate`). ``seq``
        is anything holding a ``num_blocks`` count: a request, or the engine's decode group,
        which holds the blocks its steady steps take until it settles them onto its members."""
        if num_blocks > self.num_blocks - self.num_used:
            raise RuntimeError(f"KV over-allocation: {num_blocks} > {self.num_free} free")
        self.num_used += num_blocks
        seq.num_blocks += num_blocks

    def free(self, seq: Sequence) -> None:
        """Return every block ``seq`` holds."""
        self.num_used -= seq.num_blocks
        seq.num_blocks = 0
        if self.on_free is not None:
            self.on_free(seq.id)

    # Admission hooks: a waiting request (no blocks, nothing computed) is matched
    # against cached prefixes, checked, claimed, and its full blocks committed.

    def match(self, seq: Sequence) -> tuple[int, int]:
        """For a waiting ``seq``: (tokens of its longest cached prefix it may reuse, blocks of
        that prefix other requests hold now). No prefix cache: (0, 0)."""
        return 0, 0

    def admission_blocks(self, seq: Sequence, num_new: int, match: tuple[int, int]) -> int:
        """Free blocks that admitting waiting ``seq`` for ``num_new`` tokens after its cached
        prefix would consume (reusing an unreferenced cached block consumes it too)."""
        hit, held = match
        if self.mode == "max_length":
            return max(0, self.blocks_for(self.reservation(seq)) - held)
        return max(0, self.blocks_for(hit + num_new) - held)

    def claim(self, seq: Sequence, match: tuple[int, int]) -> None:
        """Admit ``seq`` onto its cached prefix (``match`` from :meth:`match`)."""

    def commit(self, seq: Sequence, num_tokens: int) -> None:
        """``seq``'s first ``num_tokens`` tokens are scheduled: share its full blocks among them."""
