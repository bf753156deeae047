"""Prefix caching: KV blocks shared by requests whose prompts start alike (vLLM's automatic
prefix caching, SGLang's RadixAttention), with reference counts and LRU eviction.

**Block identity.** The cache works in the KV cache's own blocks (``kv_cache.block_size``,
16 tokens). A block can be shared only when it is full and its content is known:

- traces with ``hash_ids`` (Mooncake: one id per ``hash_block_size`` = 512 prompt tokens;
  equal ids mean equal content *and* equal prefix): the ids are first chained (each
  becomes a hash of itself and the previous chained id, as vLLM's block hashes include
  their parent's), so equal chained ids always mean an equal prefix, whatever the trace.
  The 16-token block ``k`` is named by the chained id of the hash block holding its last
  token and by ``k``. Only prompt tokens covered by ``hash_ids`` are shareable;
- traces with ``session_id`` and no hashes: a session is one growing token stream, so a
  later turn's prompt starts with the previous turn's prompt and output (the usual
  chat-template assumption; a turn whose prompt is shorter than that reuses only its own
  length). Block ``k`` of a session is named ``(session, k)``, output blocks included
  (they are shared when the turn finishes or is preempted);
- otherwise nothing is shared.

**Life of a block** (vLLM v1's ``KVCacheManager``). A request admitted from the queue
reuses its longest cached prefix, capped so that at least one token is computed; those
tokens skip prefill. Its full blocks are *committed* (become shared entries) when the
step that computes them is scheduled (vLLM's ``cache_blocks`` at allocation), so a
request admitted later, even in the same step, hits them. Committing a block that is
already cached drops the duplicate and shares the cached copy (SGLang's radix insert
frees duplicate KV). A freed request's shared blocks lose a reference; at zero they stay
resident, unreferenced, and are evicted least-recently-released first when a block is
needed and none is free. Blocks are released tail first (vLLM frees in reverse order),
so a prefix's tail goes before its head. Unreferenced cached blocks count as free for
admission; a referenced block is never evicted.

Because every request holds an unbroken chain of its leading blocks and tails are
evicted first, the cached blocks of any chain form a prefix of it; lookups are
therefore binary searches.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from simbatch.core.kvcache import KVCache
from simbatch.core.sequence import Sequence

PREFIX_CACHE_STATS = ("token_hit_rate", "request_hit_rate", "tokens_saved")  # summary.json's prefix_cache
KEY_SPAN = 1 << 24  # block positions per prefix id in a key (16M blocks: far beyond any context)


def chain_ids(hash_ids) -> tuple[int, ...]:
    """Chained ids: each is a hash of the previous chained id and this block's id (deterministic:
    Python hashes ints and tuples of ints without a per-process seed)."""
    out, acc = [], 0
    for h in hash_ids:
        acc = hash((acc, int(h)))
        out.append(acc)
    return tuple(out)


def prefix_labels(workload, replicas, log) -> list | None:
    """Per request, what :class:`PrefixKVCache` names its blocks by (``Sequence.prefix``);
    None when no replica caches prefixes (nothing is computed then)."""
    if not any(isinstance(r.policy.kv, PrefixKVCache) for r in replicas):
        return None
    if workload.hash_ids is not None:
        return [chain_ids(h) if h else None for h in workload.hash_ids]
    if workload.session_id is not None:
        numbers: dict[str, int] = {}
        return [None if s is None else numbers.setdefault(s, len(numbers)) for s in workload.session_id]
    log.note("kv_cache.prefix_caching: the workload has neither hash_ids nor session_id, "
             "so no prefix can be shared")
    return None


class PrefixCacheStats:
    """Per request: prefix tokens reused at its first admission (-1: never admitted) and over
    all its admissions (readmissions after preemption included). Filled by the caches of
    every replica; read by :func:`prefix_cache_summary`."""

    def __init__(self, num_requests: int):
        self.first_hit = np.full(num_requests, -1, dtype=np.int64)
        self.saved = np.zeros(num_requests, dtype=np.int64)

    def record(self, seq: Sequence, hit: int) -> None:
        """``seq`` is admitted reusing ``hit`` cached tokens."""
        if seq.num_preemptions == 0:
            self.first_hit[seq.id] = hit
        self.saved[seq.id] += hit


def prefix_cache_summary(stats: PrefixCacheStats | None, prompt_tokens) -> dict | None:
    """``summary.json``'s ``prefix_cache`` (see docs/metrics.md); None without prefix caching."""
    if stats is None:
        return None
    admitted = stats.first_hit >= 0
    looked_up = float(np.asarray(prompt_tokens)[admitted].sum())
    n = int(admitted.sum())
    return {
        "token_hit_rate": float(stats.first_hit[admitted].sum()) / looked_up if looked_up else None,
        "request_hit_rate": float((stats.first_hit[admitted] > 0).sum()) / n if n else None,
        "tokens_saved": int(stats.saved.sum()),
    }


def build_kv_cache(num_blocks: int, params, policy_cls, log, max_tokens: int, reforms_batch: bool) -> KVCache:
    """One replica's KV cache from the scenario's ``kv_cache`` section: a :class:`PrefixKVCache`
    when ``prefix_caching`` is on and the policy re-forms its batch every step
    (``reforms_batch``: an ``IterationPolicy``, which the engine knows and this layer does not);
    padded-batch policies (static, dynamic) reserve whole rectangles, so they keep the plain
    cache (noted)."""
    if not params.prefix_caching:
        return KVCache(num_blocks, params.block_size, params.mode, params.reserve, max_tokens)
    if not reforms_batch:
        message = (f"kv_cache.prefix_caching is ignored under {policy_cls.kind} batching "
                   f"(padded batches reserve their whole rectangle; only continuous and "
                   f"chunked_prefill reuse cached prefixes)")
        if message not in log.messages:
            log.note(message)
        return KVCache(num_blocks, params.block_size, params.mode, params.reserve, max_tokens)
    if log.prefix_cache is None:
        log.prefix_cache = PrefixCacheStats(log.num_requests)
    return PrefixKVCache(num_blocks, params.block_size, params.mode, params.hash_block_size,
                         log.prefix_cache, params.reserve, max_tokens)


class PrefixKVCache(KVCache):
    """A :class:`KVCache` whose full prompt blocks are shared by prefix (module docstring).

    ``num_used`` counts distinct blocks that requests hold (a shared block once);
    ``num_free`` therefore includes the unreferenced cached blocks, which are evicted
    on demand by :meth:`allocate` and :meth:`take`.
    """

    prefix_caching = True

    def __init__(self, num_blocks: int, block_size: int = 16, mode: str = "paged",
                 hash_block_size: int = 512, stats: PrefixCacheStats | None = None,
                 reserve: str = "oracle", max_tokens: int = 0):
        super().__init__(num_blocks, block_size, mode, reserve, max_tokens)
        self.hash_block_size = hash_block_size
        self.stats = stats
        self.refs: dict[int, int] = {}  # key -> requests holding the block (0: cached, unreferenced)
        self.lru: OrderedDict[int, None] = OrderedDict()  # unreferenced keys, least recently released first
        self.num_evicted = 0

    # -- block names -------------------------------------------------------------------

    def keys(self, seq: Sequence, lo: int, hi: int) -> list[int]:
        """Keys of ``seq``'s blocks ``lo..hi-1`` (module docstring: block identity)."""
        prefix, bs = seq.prefix, self.block_size
        if hi <= lo:
            return []
        if isinstance(prefix, tuple):
            h = self.hash_block_size
            return [prefix[(k * bs + bs - 1) // h] * KEY_SPAN + k for k in range(lo, hi)]
        base = prefix * KEY_SPAN
        return [base + k for k in range(lo, hi)]

    def shareable_blocks(self, seq: Sequence) -> int:
        """Leading blocks of ``seq`` whose content has a name (may be cached once computed)."""
        prefix = seq.prefix
        if prefix is None:
            return 0
        if isinstance(prefix, tuple):
            return min(seq.prompt_tokens, len(prefix) * self.hash_block_size) // self.block_size
        return seq.num_tokens // self.block_size

    # -- admission ---------------------------------------------------------------------

    def match(self, seq: Sequence) -> tuple[int, int]:
        cap = min(self.shareable_blocks(seq), (seq.num_tokens - 1) // self.block_size)
        if cap <= 0:
            return 0, 0
        refs = self.refs
        cached = self._longest(seq, cap, lambda key: key in refs)
        held = self._longest(seq, cached, lambda key: refs[key] > 0) if cached else 0
        return cached * self.block_size, held

    def _longest(self, seq: Sequence, cap: int, test) -> int:
        """Largest m <= cap with ``test`` true for block m-1 (true for every block before it)."""
        lo, hi = 0, cap
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if test(self.keys(seq, mid - 1, mid)[0]):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def claim(self, seq: Sequence, match: tuple[int, int]) -> None:
        hit, _ = match
        m = hit // self.block_size
        refs, lru = self.refs, self.lru
        for key in self.keys(seq, 0, m):
            count = refs[key]
            if count == 0:  # an unreferenced cached block is in use again
                del lru[key]
                self.num_used += 1
            refs[key] = count + 1
        seq.num_blocks = seq.num_cached_blocks = m
        seq.num_computed = hit
        if seq.num_preemptions == 0:
            seq.num_prefix_hit = hit  # its first step computes from here (first_scheduled_s)
        if self.stats is not None:
            self.stats.record(seq, hit)

    def commit(self, seq: Sequence, num_tokens: int) -> None:
        start = seq.num_cached_blocks
        stop = min(num_tokens // self.block_size, self.shareable_blocks(seq), seq.num_blocks)
        if stop <= start:
            return
        refs, lru = self.refs, self.lru
        for key in self.keys(seq, start, stop):
            count = refs.get(key)
            if count is None:  # this request's block becomes the cached copy
                refs[key] = 1
                continue
            # Already cached: share that copy and drop this request's duplicate.
            if count == 0:
                del lru[key]  # the cached copy is used again, the duplicate freed: net 0
            else:
                self.num_used -= 1
            refs[key] = count + 1
        seq.num_cached_blocks = stop

    # -- allocation and release -----------------------------------------------------------

    def evict_for(self, num_blocks: int) -> None:
        """Evict least recently released cached blocks until ``num_blocks`` are truly free."""
        short = num_blocks - (self.num_blocks - self.num_used - len(self.lru))
        if short > 0:
            lru, refs = self.lru, self.refs
            short = min(short, len(lru))
            for _ in range(short):
                del refs[lru.popitem(last=False)[0]]
            self.num_evicted += short

    def allocate(self, seq: Sequence, num_blocks: int) -> None:
        self.evict_for(num_blocks)
        super().allocate(seq, num_blocks)

    def free(self, seq: Sequence) -> None:
        if seq.prefix is not None and not isinstance(seq.prefix, tuple):
            self.commit(seq, seq.num_computed)  # a session's output is the next turn's prefix
        shared = seq.num_cached_blocks
        self.num_used -= seq.num_blocks - shared
        refs, lru = self.refs, self.lru
        for key in reversed(self.keys(seq, 0, shared)):  # tail first: tails are evicted first
            count = refs[key] - 1
            refs[key] = count
            if count == 0:
                lru[key] = None
                self.num_used -= 1
        seq.num_blocks = seq.num_cached_blocks = 0
        if self.on_free is not None:
            self.on_free(seq.id)

    def check(self, holders: list[Sequence]) -> None:
        """Assert the accounting invariants given every request holding blocks (for tests)."""
        counts: dict[int, int] = {}
        private = 0
        for seq in holders:
            for key in self.keys(seq, 0, seq.num_cached_blocks):
                counts[key] = counts.get(key, 0) + 1
            private += seq.num_blocks - seq.num_cached_blocks
        assert counts == {k: c for k, c in self.refs.items() if c > 0}, "reference counts"
        assert set(self.lru) == {k for k, c in self.refs.items() if c == 0}, "unreferenced = LRU"
        assert self.num_used == len(counts) + private, "blocks in use"
        assert self.num_used + len(self.lru) <= self.num_blocks, "capacity"
