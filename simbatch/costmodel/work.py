"""A step's work: its plan reduced to the sums a price needs (tokens, rows, attention pairs),
and :class:`PricedByWork`, the verbs every cost model that prices such sums shares (the
steady decode, mixed, two-stream and padded steps of the engine's fast path).
"""

from __future__ import annotations

from functools import reduce
from itertools import compress
from operator import add, mul

from simbatch.core.plan import StepPlan
from simbatch.costmodel.base import NO_ATTN, AttnWork, StepCost, StepWork


class PricedByWork:
    """Cost models that price a step from its summed work (``price(work, kept, live)``).

    Besides :meth:`step_cost` they price the engine fast path's steps in O(1),
    through the same ``price`` and the same integers, so the seconds are
    bit-identical to pricing the plans themselves.
    """

    _floor = 0.0  # launch_floor_s (DEFAULT_PARAMS): the least seconds a step's kernels take

    def price(self, work: StepWork, kept: StepWork, live: int) -> StepCost:
        """The cost of a step computing ``work``, of which ``kept`` is not padding, over
        ``live`` non-padding slots."""
        raise NotImplementedError

    def launch_wait(self, kernels: float) -> float:
        """Seconds the GPU waits for the CPU to issue a step whose kernels take ``kernels``
        (``launch_floor_s`` in ``DEFAULT_PARAMS``); every pricing path uses this one expression."""
        return self._floor - kernels if kernels < self._floor else 0.0

    def overhead(self, work: StepWork, live: int) -> float:
        """The step's CPU-side seconds (``price``'s ``overhead`` part) for ``work`` over
        ``live`` sequences."""
        raise NotImplementedError

    def step_cost(self, plan: StepPlan) -> StepCost:
        """Seconds for one step, split by part; useful FLOPs/bytes exclude padding."""
        if plan.num_streams > 1:
            return self.streams_cost(plan)
        work, kept, live = plan_work(plan)
        return self.price(work, kept, live)

    def bounds(self, work: StepWork) -> tuple[float, float]:
        """(compute-bound, memory-bound) seconds of the GPU kernels of ``work``, summed over
        kernels (what overlapping streams can share); models without one raise."""
        raise NotImplementedError(f"{type(self).__name__} cannot price overlapping streams")

    def streams_cost(self, plan: StepPlan) -> StepCost:
        """A step issued as micro-batches on separate streams (``plan.micro_batches()``);
        see :meth:`price_streams`."""
        return self.price_streams([plan_work(m) for m in plan.micro_batches()])

    def price_streams(self, parts: list[tuple]) -> StepCost:
        """A step of micro-batches ``parts`` (``(work, kept, live)`` each) on separate streams.

        Streams share the GPU's compute and its memory bandwidth, so the kernels
        of all micro-batches together take at least the larger of their summed
        compute time and their summed memory time, and never less than the
        slowest micro-batch alone: ``max(sum C, sum M, max T_i)``, where ``T_i``
        is micro-batch ``i`` priced on its own. Every micro-batch reads the
        weights again, so splitting a batch that is already memory-bound costs
        time; overlapping a memory-bound decode with a compute-bound prefill
        saves it. All-reduces do not overlap; the step's overhead is the whole
        step's (once, with all its sequences and tokens). One part is priced as
        it is (a step of one phase is not split).
        """
        if len(parts) == 1:
            return self.price(*parts[0])
        costs = [self.price(*part) for part in parts]
        compute = memory = 0.0
        for work, _, _ in parts:
            c, m = self.bounds(work)
            compute, memory = compute + c, memory + m
        fixed = ("allreduce", "all_to_all", "overhead", "launch_wait")
        own = [sum(v for k, v in c.breakdown.items() if k not in fixed) for c in costs]
        overlapped = max(compute, memory, max(own))
        bd: dict[str, float] = {}
        for c in costs:
            for k, v in c.breakdown.items():
                bd[k] = bd.get(k, 0.0) + v
        whole = reduce(add_work, (part[0] for part in parts))
        bd["overhead"] = self.overhead(whole, sum(part[2] for part in parts))
        bd["stream_overlap"] = overlapped - sum(own)  # <= 0: time the streams hide
        if self._floor:  # the whole step's kernels against the floor, not each part's
            bd.pop("launch_wait", None)
            bd["launch_wait"] = self.launch_wait(sum(v for k, v in bd.items() if k != "overhead"))
        return StepCost(sum(bd.values()), bd, sum(c.useful_flops for c in costs),
                        sum(c.useful_bytes for c in costs))

    def decode_cost(self, num_seqs: int, context_sum: int) -> StepCost:
        """:meth:`step_cost` of ``num_seqs`` unpadded decode slots whose contexts sum to ``context_sum``."""
        work = decode_work(num_seqs, context_sum)
        return self.price(work, work, num_seqs)

    def mixed_cost(self, num_decodes: int, context_sum: int, chunk_new: list[int],
                   chunk_ctx: list[int], streams: int = 1) -> StepCost:
        """:meth:`step_cost` of ``num_decodes`` unpadded decode slots (contexts summing to
        ``context_sum``) followed by prefill chunks of ``chunk_new`` tokens over ``chunk_ctx``,
        on ``streams`` streams (2: decodes and chunks as two micro-batches, as
        ``StepPlan.micro_batches`` splits them)."""
        n, s = num_decodes, context_sum
        pre = attn_sums(chunk_new, chunk_ctx)
        if streams > 1 and n and chunk_new:
            dec = decode_work(n, s)
            chunks = StepWork((pre.q_tokens, len(chunk_new) - chunk_new.count(0), NO_ATTN, pre))
            return self.price_streams([(dec, dec, n), (chunks, chunks, len(chunk_new))])
        work = StepWork((n + pre[2], n + len(chunk_new) - chunk_new.count(0), AttnWork((s + n, s + n, n)),
                         pre))
        return self.price(work, work, n + len(chunk_new))

    def padded_decode_costs(self, num_slots: int, num_live: list[int], contexts) -> tuple[list, list, list]:
        """:meth:`padded_decode_cost` of a run of steps, one per entry of ``contexts`` (and of
        ``num_live``, each step's live rows): (seconds, useful FLOPs, useful bytes), each a
        list. Cost models that can price the run at once override this; here it is one call
        per step."""
        costs = [self.padded_decode_cost(num_slots, int(n), int(c)) for n, c in zip(num_live, contexts)]
        return ([c.seconds for c in costs], [c.useful_flops for c in costs], [c.useful_bytes for c in costs])

    def padded_decode_cost(self, num_slots: int, num_live: int, context: int) -> StepCost:
        """:meth:`step_cost` of a padded batch's decode step: ``num_slots`` rows at context
        ``context``, of which ``num_live`` hold a live request (the rest compute padding)."""
        return self.price(decode_work(num_slots, num_slots * context),
                          decode_work(num_live, num_live * context), num_live)


def plan_work(plan: StepPlan) -> tuple[StepWork, StepWork, int]:
    """(work computed, work kept, live slots) of a plan; kept work leaves padding out."""
    new, ctx, pad, rids = plan.num_new_tokens, plan.num_context_tokens, plan.num_pad_tokens, plan.request_ids
    q = new if pad is None else list(map(add, new, pad))
    work = _work(q, ctx, plan.num_decode_slots)
    kept = work
    if pad is not None or -1 in rids:  # padding present: count kept work only
        kept_new = _zero_padding_slots(new, rids) if -1 in rids else new
        kept = _work(kept_new, ctx, plan.num_decode_slots)
    return work, kept, len(rids) - rids.count(-1)


def add_work(a: StepWork, b: StepWork) -> StepWork:
    """Two steps' work summed field by field."""
    return StepWork((a.tokens + b.tokens, a.rows + b.rows, AttnWork(map(add, a.decode, b.decode)),
                     AttnWork(map(add, a.prefill, b.prefill))))


def decode_work(num_seqs: int, context_sum: int) -> StepWork:
    """What :func:`_work` returns for ``num_seqs`` one-token decode slots with contexts summing
    to ``context_sum`` (the same integers, so prices built on it are bit-identical)."""
    n, s = num_seqs, context_sum
    return StepWork((n, n, AttnWork((s + n, s + n, n)), NO_ATTN))


def _work(q: list[int], ctx: list[int], num_decode: int) -> StepWork:
    """The work of slots with per-slot query lengths ``q`` over contexts ``ctx``, the first
    ``num_decode`` of them decode slots."""
    n = len(q)
    if num_decode == n:
        dec, pre = attn_sums(q, ctx), NO_ATTN
    elif num_decode == 0:
        dec, pre = NO_ATTN, attn_sums(q, ctx)
    else:
        dec = attn_sums(q[:num_decode], ctx[:num_decode])
        pre = attn_sums(q[num_decode:], ctx[num_decode:])
    rows = n - q.count(0)
    if dec[0] > dec[1]:  # pairs beyond KV read: a decode slot verifies drafts, each needs its logits
        rows += dec[2] - num_decode + q[:num_decode].count(0)
    return StepWork((dec[2] + pre[2], rows, dec, pre))


def _zero_padding_slots(new: list[int], rids: list[int]) -> list[int]:
    """``new`` with padding-only slots (request id -1) zeroed.

    ``list.index`` scans in C, faster than a comprehension when few slots are
    padding (the usual case) and no slower when most are.
    """
    kept = new.copy()
    i = rids.index(-1)
    try:
        while True:
            kept[i] = 0
            i = rids.index(-1, i + 1)
    except ValueError:
        return kept


def attn_sums(q: list[int], ctx: list[int]) -> AttnWork:
    """One attention kernel's work (causal score pairs, KV tokens read, query tokens) summed
    over its slots.

    A slot with ``q`` queries over ``c`` cached tokens scores ``q*c`` pairs
    against the cache and ``q*(q+1)/2`` causally among its own tokens; it reads
    ``c + q`` tokens of KV. Slots with no query tokens run nothing.
    """
    if len(q) == 1:  # one slot (a prompt or chunk alone, the usual chunk under load): no sums
        k = q[0]
        if not k:
            return NO_ATTN
        c = ctx[0]
        return AttnWork((k * c + (k * k + k) // 2, c + k, k))  # the formula below, for one slot
    sq = sum(q)
    if not sq:
        return NO_ATTN
    zeros = q.count(0)
    sc = sum(compress(ctx, q)) if zeros else sum(ctx)
    if sq == len(q) - zeros:  # every running slot has one query token (decode)
        return AttnWork((sc + sq, sc + sq, sq))
    pairs = sum(map(mul, q, ctx)) + (sum(map(mul, q, q)) + sq) // 2
    return AttnWork((pairs, sc + sq, sq))
