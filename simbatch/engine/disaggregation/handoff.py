"""The prefill replica, the KV-cache transfer and the decode replica.

A request's life: the prefill pool's router places it on a prefill replica,
whose policy serves it as a request with a one-token output; that token (the
first, so TTFT is measured there) hands it to :class:`Handoff`, which picks a
decode replica (the decode pool's router, at that moment) and sends the
prompt's KV cache over the prefill replica's link; when the bytes are there,
the decode replica's queue receives a :class:`Sequence` whose prompt is already
computed and whose first token is already out, and its policy admits it when
seats and KV memory allow (the admission allocates the prompt's blocks and
computes one token, as for any request).

Decisions (docs/policies.md, "Prefill/decode disaggregation"):

- **Link contention.** Each prefill replica has one outgoing link (its GPUs'
  NICs, used together) and sends one request's KV at a time, first come first
  served; different prefill replicas send in parallel and a decode replica
  may receive from several at once. Transfers queue where the bytes leave
  (Splitwise and DistServe both serialise a prefill instance's sends).
- **Bytes.** Prompt tokens x the model's KV bytes per token (all layers, K and
  V): the first output token's KV is computed by the decode replica's first
  step. Each GPU of a replica holds its heads (1/TP) of its stage's layers and
  has its own link; the shards travel over as many links in parallel as the
  busiest GPU at either end allows: min(prefill TP, decode TP) without
  pipelines, 2 from TP2 to TP1 x PP2 (``build.link_lanes``).
- **Memory.** The prefill replica keeps the request's KV blocks until its
  transfer ends (they are the transfer's source), then frees them. Under
  ``push`` a transferred request waiting in the decode queue holds no decode
  KV (its blocks are taken at admission, like any request's; where the bytes
  wait meanwhile, e.g. host memory as in Mooncake's store, is not modelled).
- **Push or pull** (``disaggregation.transfer``). ``push`` sends as soon as
  the first token is out, overlapping the decode replica's steps. ``pull``
  (DistServe) leaves the request in the decode replica's :class:`PullInbox`,
  which that replica empties between its own steps, each copy blocking them.
"""

from __future__ import annotations

import copy
import math
from collections import deque

from simbatch.core.kvcache import KVCache
from simbatch.core.sequence import FINISHED, Sequence
from simbatch.engine.replica import Replica


class PrefillReplica(Replica):
    """A prefill-pool replica: every request it serves stops at its first token (``output_tokens``
    1), which it emits (TTFT) and hands to :attr:`handoff` instead of retiring the request."""

    handoff: Handoff = None  # set by the builder

    def emit(self, seq: Sequence, step: int, end: float, stays: bool) -> None:
        # one token, one run: it never emitted before, and leaves for the decode pool
        self.log.record_token_run(seq.id, self.index, step, step)
        self.log.first_token_s[seq.id] = end
        seq.num_generated = 1
        seq.status = FINISHED  # the policy retires it; its blocks go to the transfer first
        self.handoff.prefilled(self, seq, end)

    def release(self, hold: Sequence) -> None:
        """A transfer ended: free its source blocks and wake the replica if it idles (its queue
        may have been waiting for them)."""
        self.policy.kv.free(hold)
        self.wake()


class DecodeReplica(Replica):
    """A decode-pool replica: records when each transferred request's first step here starts;
    under ``transfer: pull`` its :class:`PullInbox` holds the requests it has yet to take."""

    def emit(self, seq: Sequence, step: int, end: float, stays: bool) -> None:
        if seq.num_generated == 1 and math.isnan(self.log.decode_start_s[seq.id]):
            # Every emit runs right after its step was recorded (postprocess, apply_chunks,
            # the fast path's finish), so that step is the log's latest row.
            self.log.decode_start_s[seq.id] = self.log.steps["start_s"][-1]
        super().emit(seq, step, end, stays)


class DecodeKVCache(KVCache):
    """A decode replica's KV cache. Its queue holds requests whose prompt was computed elsewhere;
    to the policies' admission (which counts a waiting request's tokens to compute as
    ``num_tokens`` minus its cached prefix) the transferred prompt is such a prefix: present,
    and held by no other request, so admission takes the blocks for it and computes one token.
    A pulled request (``transfer: pull``) already holds its prompt's blocks while it waits;
    admission then takes only what its first decode token adds."""

    def match(self, seq: Sequence) -> tuple[int, int]:
        hit, held = super().match(seq)
        # num_computed is 0 after a preemption (recompute), and the blocks were freed with it
        return max(hit, seq.num_computed), held + seq.num_blocks


def decode_sequence(prefilled: Sequence, output_tokens: int) -> Sequence:
    """The request as the decode replica receives it: prompt KV computed, first token out."""
    seq = Sequence(prefilled.id, prefilled.arrival_s, prefilled.prompt_tokens, output_tokens, prefilled.priority)
    seq.num_computed = prefilled.prompt_tokens
    seq.num_generated = 1
    seq.num_tokens = prefilled.prompt_tokens + 1
    seq.num_preemptions = prefilled.num_preemptions  # preemptions count over both pools
    return seq


class Handoff:
    """From a finished prefill to the decode queue: routing, link queueing, transfer, release.

    ``decode_limits`` are the decode replicas' :func:`~simbatch.engine.dispatcher.serve_limits`;
    ``lanes[(p, d)]``: links a transfer from replica ``p`` to ``d`` uses in parallel.
    """

    def __init__(self, env, log, seqs, output_tokens: list[int], decode: list[DecodeReplica], router,
                 decode_limits: list[float], link, kv_bytes_per_token: float, lanes, transfer=None):
        self.env, self.log, self.seqs = env, log, seqs
        self.output_tokens = output_tokens
        self.decode, self.router, self.decode_limits = decode, router, decode_limits
        self.link, self.kv_bytes_per_token, self.lanes = link, kv_bytes_per_token, lanes
        self.link_free_at: dict[int, float] = {}  # prefill replica index -> when its link is next free
        self.pull = transfer is not None and transfer.mode == "pull"
        if self.pull:
            for r in decode:
                r.inbox = PullInbox(self, transfer.max_waiting_share)

    def prefilled(self, replica: PrefillReplica, seq: Sequence, end: float) -> None:
        """``seq`` emitted its first token on ``replica`` at ``end``."""
        rid, log = seq.id, self.log
        self.seqs[rid] = None  # the prefill replica is done with it
        output = self.output_tokens[rid]
        if output == 1:  # nothing left to decode: it finishes here, its blocks freed as usual
            log.finish_s[rid] = end
            log.num_emitted[rid] = 1
            log.num_preemptions[rid] = seq.num_preemptions
            return
        # The blocks stay with a copy of the request (its block table, shared prefix blocks
        # included) until the transfer ends; the policy's free() of the finished request
        # then frees nothing.
        hold = copy.copy(seq)
        seq.num_blocks = seq.num_cached_blocks = 0
        seq.prefix = None
        nxt = decode_sequence(seq, output)
        target = self.pick_decode(nxt, end)
        log.decode_replica[rid] = target.index
        if self.pull:  # the decode replica takes it between its steps (PullInbox)
            target.inbox.offer(replica, hold, nxt)
            target.wake()
            return
        start, done = self.book_link(replica, target, nxt, end)
        self.env.process(self.transfer(replica, hold, target, nxt, done))

    def book_link(self, source: PrefillReplica, target: DecodeReplica, seq: Sequence, now: float):
        """Reserve ``source``'s outgoing link for ``seq``'s prompt KV from ``now`` on (behind the
        transfers already booked on it); log and return (start, end) of the transfer."""
        nbytes = seq.prompt_tokens * self.kv_bytes_per_token
        start = max(now, self.link_free_at.get(source.index, 0.0))
        done = start + self.link.transfer_seconds(nbytes, self.lanes[(source.index, target.index)])
        self.link_free_at[source.index] = done
        log = self.log
        log.transfer_start_s[seq.id], log.transfer_end_s[seq.id], log.kv_bytes[seq.id] = start, done, nbytes
        return start, done

    def pick_decode(self, seq: Sequence, now: float) -> DecodeReplica:
        """The decode replica ``seq`` goes to, among those that can serve it (the dispatcher
        checked that one can)."""
        total = seq.prompt_tokens + seq.output_tokens
        candidates = self.decode
        if any(total > lim for lim in self.decode_limits):
            candidates = [r for r, lim in zip(self.decode, self.decode_limits) if total <= lim]
        return self.router.pick(seq, candidates, now)

    def transfer(self, source: PrefillReplica, hold: Sequence, target: DecodeReplica, seq: Sequence, done: float):
        """SimPy process: wait for the transfer to end, free the source blocks, queue the decode."""
        yield self.env.timeout(done - self.env.now)
        self.deliver(source, hold, target, seq)

    def deliver(self, source: PrefillReplica, hold: Sequence, target: DecodeReplica, seq: Sequence) -> None:
        """A transfer ended: the prefill replica frees its blocks, the decode queue gets ``seq``."""
        source.release(hold)
        self.seqs[seq.id] = seq
        target.submit(seq)


class PullInbox:
    """A decode replica's requests whose prefill is done and whose KV still sits on the prefill
    replica, under ``transfer: pull`` (DistServe's decode instance: ``distserve/
    decoding_stage_scheduler.py``, ``post_process``, and ``single_stage_engine.py``, ``_step``).

    After each of its steps (and when idle) the decode replica takes requests from the head of
    this queue, first come first served, while the prompt blocks its waiting queue already holds
    are under ``max_waiting_share`` of its blocks and the head's prompt blocks are free. Taking
    one allocates those blocks, then copies the KV over the link *in the replica's own loop*:
    the copy is awaited before the next step starts, so migrations stall decoding. When the
    copy ends, the prefill replica frees its blocks and the request joins the decode queue.
    """

    def __init__(self, handoff: Handoff, max_waiting_share: float):
        self.handoff = handoff
        self.max_waiting_share = max_waiting_share
        self.queue: deque = deque()  # (source prefill replica, its block holder, decode Sequence)

    def offer(self, source: PrefillReplica, hold: Sequence, seq: Sequence) -> None:
        """A finished prefill asks to be taken."""
        self.queue.append((source, hold, seq))

    def ready(self, replica: DecodeReplica) -> bool:
        """Whether the head may be taken now (the class docstring's rule)."""
        if not self.queue:
            return False
        kv = replica.policy.kv
        waiting = sum(s.num_blocks for s in replica.policy.waiting)
        if waiting >= self.max_waiting_share * kv.num_blocks:
            return False
        return kv.blocks_for(self.queue[0][2].prompt_tokens) <= kv.num_free

    def pull(self, replica: DecodeReplica):
        """SimPy sub-process: take every request the rule allows, one copy after another."""
        handoff, env, kv = self.handoff, replica.env, replica.policy.kv
        while self.ready(replica):
            source, hold, seq = self.queue.popleft()
            kv.allocate(seq, kv.blocks_for(seq.prompt_tokens))
            _, done = handoff.book_link(source, replica, seq, env.now)
            yield env.timeout(done - env.now)
            handoff.deliver(source, hold, replica, seq)
