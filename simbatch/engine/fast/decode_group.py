"""The running requests of one replica while they decode in lockstep, advanced lazily.

In a steady decode step every running request computes one token, so a
request's counters after ``k`` such steps are its counters at the start plus
``k`` (and one more KV block each time its last block fills). The group keeps
a clock (steady steps run so far) and, per member, the clock at which its
fields were last brought up to date (:attr:`DecodeGroup.settled`); the fields
are settled only when someone needs them: when the request finishes (found
from a heap of finish clocks), or when the policy's next plan reads the
running requests (:meth:`DecodeGroup.sync_all`). A member's token run stays
open in the event log over the steady steps, and settling extends it to the
latest one. What the steps need from the whole batch is kept as running totals
instead of rescanning it: the number of requests that need a block at a given
clock (a histogram over the clock modulo the block size), and the summed
context. So a step costs O(1) and a request O(log n) over its whole decode,
whatever the batch size. :meth:`DecodeGroup.run` takes such steady steps back to
back (the fast path's steady runs for iteration-level policies; a padded batch's
are :func:`simbatch.engine.fast.steps.padded_run`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from simbatch.core.eventlog import EventLog
from simbatch.core.sequence import Sequence
from simbatch.costmodel.base import fast_price


class DecodeGroup:
    """Lazy lockstep state of a replica's running requests (see the module docstring)."""

    def __init__(self, block_size: int, paged: bool, log: EventLog):
        self.block_size = block_size
        self.paged = paged  # max_length reservations take no blocks while decoding
        self.clock = 0  # steady decode steps run so far
        self.last_step = -1  # replica step number of the latest steady step
        # the policy's running list, same order (a dict: finishing members leave in O(1))
        self.members: dict[int, Sequence] = {}
        self.settled: dict[int, int] = {}  # member id -> clock when its fields were last settled
        self.log = log  # where the members' token runs stay open
        self.finishes: list[tuple[int, int, Sequence]] = []  # (finish clock, join order, seq)
        self.need_at = [0] * block_size  # members needing a block at the step run at clock c: need_at[c % bs]
        self.context_base = 0  # sum of (num_computed - clock) over members
        self.num_joined = 0
        # Blocks the steady steps took for members (KVCache.allocate to the group) and not yet
        # settled onto them: the group holds them, like a request, until settle moves them.
        self.num_blocks = 0

    def need(self) -> int:
        """KV blocks the next steady step takes."""
        return self.need_at[self.clock % self.block_size] if self.paged else 0

    def context(self) -> int:
        """Total context (cached tokens) of the members at the next steady step."""
        return self.context_base + len(self.members) * self.clock

    def next_finish(self) -> int:
        """Clock value after the step in which the first member emits its last token."""
        return self.finishes[0][0]

    def adopt(self, running: list[Sequence], prev_decode: int) -> bool:
        """Make every request in the policy's ``running`` list a member, joining newcomers.

        Members are always running (they leave only by finishing, or all at
        once by :meth:`sync_all`), so equal lengths mean nothing to join, and
        when no member sits past the first ``len(members)`` entries the
        newcomers are exactly that tail (continuous batching appends them).
        Returns False when a newcomer is not in a steady decode state (the
        normal path runs instead).
        """
        m, members = len(self.members), self.members
        if len(running) == m:
            return True
        tail = running[m:]
        for s in tail:  # usually one newcomer: a plain loop, not any() over a generator
            if s.id in members:
                tail = [s for s in running if s.id not in members]  # joined out of order (chunked prefill)
                break
        for seq in tail:
            if not self.can_join(seq, prev_decode):
                return False
            self.join(seq)
        return True

    def adopt_decoding(self, running: list[Sequence], num_prefilling: int, prev_decode: int) -> bool:
        """Like :meth:`adopt`, when ``num_prefilling`` running requests are mid-prefill: the
        members become every running request that decodes. False if one cannot join."""
        if len(running) == len(self.members) + num_prefilling:
            return True
        return self.join_decoding(running, prev_decode) and len(running) == len(self.members) + num_prefilling

    def join_decoding(self, seqs: Iterable[Sequence], prev_decode: int) -> bool:
        """Join, in order, those of ``seqs`` that decode and are not members yet; False (and
        stop) at one that cannot join. The fast path's mixed steps pass the requests whose
        prefill a step completed: the only ones :meth:`adopt_decoding` would find next."""
        members = self.members
        for seq in seqs:
            if seq.id not in members and seq.num_generated and seq.num_tokens - seq.num_computed == 1:
                if not self.can_join(seq, prev_decode):
                    return False
                self.join(seq)
        return True

    def can_join(self, seq: Sequence, prev_decode: int) -> bool:
        """``seq`` decodes next step with room to grow block by block, and its token run is live."""
        if not (seq.num_generated and seq.num_tokens - seq.num_computed == 1):
            return False
        if not self.log.run_continues(seq.id, prev_decode):
            return False  # its next token starts a new token run: leave that to postprocess
        slack = seq.num_blocks * self.block_size - seq.num_computed
        return not self.paged or 0 <= slack < self.block_size

    def join(self, seq: Sequence) -> None:
        """Add ``seq`` (up to date now) to the group."""
        clock = self.clock
        self.settled[seq.id] = clock
        self.members[seq.id] = seq
        self.account(seq, 1)
        heapq.heappush(self.finishes, (clock + seq.output_tokens - seq.num_generated, self.num_joined, seq))
        self.num_joined += 1

    def account(self, seq: Sequence, sign: int) -> None:
        """Add (+1) or remove (-1) ``seq``'s share of the running totals; both
        ``num_computed - clock`` and the block phase are invariant while it decodes."""
        settled = self.settled[seq.id]
        if self.paged:
            slack = seq.num_blocks * self.block_size - seq.num_computed
            self.need_at[(settled + slack) % self.block_size] += sign
        self.context_base += sign * (seq.num_computed - settled)

    def settle(self, seq: Sequence) -> None:
        """Apply the steady steps ``seq`` owes: tokens, blocks, its token run."""
        owed = self.clock - self.settled[seq.id]
        if owed <= 0:
            return
        if self.paged:  # blocks were taken at owed steps slack, slack + bs, ...
            slack = seq.num_blocks * self.block_size - seq.num_computed
            if owed > slack:
                grown = (owed - 1 - slack) // self.block_size + 1
                seq.num_blocks += grown
                self.num_blocks -= grown
        seq.num_computed += owed
        seq.num_generated += owed
        seq.num_tokens += owed
        self.log.stay(seq.id, self.last_step)  # it stayed in its run at every steady step
        self.settled[seq.id] = self.clock

    def pop_finished(self) -> list[Sequence]:
        """Members whose last token was the latest step's, settled up to just before it
        (the caller emits that token) and removed from the group, in join order."""
        finishes, clock = self.finishes, self.clock
        done = []
        while finishes and finishes[0][0] == clock:
            seq = heapq.heappop(finishes)[2]
            self.clock = clock - 1  # settle all but the final step, whose token the caller emits
            self.settle(seq)
            self.clock = clock
            if self.paged and self.need_at_final(seq):
                seq.num_blocks += 1
                self.num_blocks -= 1
            seq.num_computed += 1
            self.settled[seq.id] = clock
            done.append(seq)
        members, settled = self.members, self.settled
        for seq in done:
            self.account(seq, -1)  # its fields moved on together, so its phase and offset still hold
            del members[seq.id], settled[seq.id]
        return done

    def need_at_final(self, seq: Sequence) -> bool:
        """Whether ``seq`` took a new block in the final step (its last block was full)."""
        return seq.num_blocks * self.block_size == seq.num_computed

    def run(self, replica, steady):
        """SimPy sub-process: the steady decode steps of every running request of ``replica``
        (its policy promised them: ``steady``, a :class:`~simbatch.policies.base.SteadyRun`);
        returns how many it ran (0: none, the normal path takes the step).

        A step's price comes from the backend's O(1) ``decode_cost`` over the group's totals,
        and it is logged as the step-by-step engine logs it. Before a step the run stops when
        an arrival could be admitted (the queue was empty when the run started), or when the
        step's blocks are short (the normal path decides whom to preempt); after one, when a
        controller is due or the transfer inbox has work. After a step in which members finish,
        it asks what the engine loop would ask before its next step, in the same order (a
        controller, the inbox, ``steady_run``), and goes on with the smaller group when the
        run is still steady, rather than returning to the loop only to be called again. The
        group's fields are read once per stretch and kept in locals (a step is the engine's hot
        path, millions of times a run).
        """
        env, policy, log = replica.env, replica.policy, replica.log
        decode_cost = fast_price(replica.backend, "decode_cost")
        if decode_cost is None:
            return 0
        kv, index, append_step, timeout = policy.kv, replica.index, log.append_step, env.timeout
        finishes, need_at, block_size, paged, inbox = (self.finishes, self.need_at, self.block_size, self.paged,
                                                       replica.inbox)
        done = 0
        now = env.now
        while self.adopt(policy.running, replica.prev_decode):
            n, context_base, clock = len(self.members), self.context_base, self.clock
            # The policy's queue (num_waiting is its length): arrivals append to this deque, and
            # only the replica's own scheduling, which does not run during a stretch, replaces it.
            queue = policy.waiting
            # The policy's promise says whether an arrival ends the run (it could be admitted
            # next step) and why admission takes nobody: the same at every step of a stretch.
            stop_on_arrival, stop = steady.ends_on_arrival, steady.stop_reason
            while True:
                waiting = len(queue)  # the queue as this step starts (nothing below changes it)
                if stop_on_arrival and waiting:
                    return done
                need = need_at[clock % block_size] if paged else 0  # need()
                if need:
                    if need > kv.num_free:
                        return done  # the normal path decides whom to preempt
                    kv.allocate(self, need)  # the group holds them until settle()
                cost = decode_cost(n, context_base + n * clock)  # context()
                start, seconds = now, cost.seconds
                yield timeout(seconds)
                # A timeout made at `start` fires at exactly `start + seconds` (SimPy schedules it
                # at now + delay), so this is env.now without asking the environment for it.
                now = start + seconds
                step = append_step(replica=index, start_s=start, duration_s=seconds, num_seqs=n, num_slots=n,
                                   prefill_tokens=0, decode_tokens=n, padded_tokens=0, kv_used_blocks=kv.num_used,
                                   num_waiting=waiting, stop_reason=stop, useful_flops=cost.useful_flops,
                                   useful_bytes=cost.useful_bytes)
                self.clock = clock = clock + 1
                self.last_step = replica.prev_decode = step
                done += 1
                if finishes[0][0] == clock:  # next_finish()
                    policy.on_step_done(None, self.emit_finished(replica, step, now), now)
                    break
                if now >= replica.control_at:
                    return done  # a controller may turn a knob at this boundary
                if inbox is not None and inbox.ready(replica):
                    return done  # the loop takes a transfer before the next step
            # What Replica.run asks before its next step, in its order.
            if now >= replica.control_at or (inbox is not None and inbox.ready(replica)):
                return done
            steady = policy.steady_run()
            if steady is None or steady.kind != "running":
                replica.answer, replica.answered = steady, True  # the loop's fast_steps reads it
                return done
        return done

    def emit_finished(self, replica, step: int, end: float) -> list[Sequence]:
        """The members that emitted their last token in ``step`` (ended at ``end``), emitted
        through ``replica`` and removed from the group."""
        done = self.pop_finished()
        emit = replica.emit
        for seq in done:
            emit(seq, step, end, True)
        return done

    def sync_all(self) -> None:
        """Settle every member and empty the group (the policy is about to read them)."""
        for seq in self.members.values():
            self.settle(seq)
        if self.num_blocks:  # every block a steady step took belongs to some member by now
            raise RuntimeError(f"decode group still holds {self.num_blocks} KV blocks after settling")
        self.members = {}
        self.settled = {}
        self.finishes = []
        self.need_at = [0] * self.block_size
        self.context_base = 0
