"""One replica (a GPU, or a tensor-parallel group) as a SimPy process.

Each iteration is nano-vllm's three verbs: the policy *schedules* a step plan,
the backend *runs* it (here: returns its duration, and SimPy time advances by
it, one event per step, never one per token), and the engine *postprocesses*:
tokens are emitted, finished requests retired, and everything is appended to
the event log: the step as a record of named columns, each token as a stay in
or a join of its request's token run.
"""

from __future__ import annotations

import simpy

from simbatch.control import control_tick
from simbatch.core.eventlog import EventLog
from simbatch.core.plan import StepPlan
from simbatch.core.sequence import FINISHED, Sequence
from simbatch.costmodel.base import CostModel, fast_price
from simbatch.engine.fast.decode_group import DecodeGroup
from simbatch.engine.fast.steps import fast_steps
from simbatch.policies.base import Policy


class Replica:
    """Runs one policy over one backend, recording into a shared :class:`EventLog`."""

    # Work the replica's own loop does between steps, blocking them: a disaggregated decode
    # replica's PullInbox (transfer: pull). None: nothing.
    inbox = None
    # Which drafts a verify step keeps (simbatch.scenario.speculative.Acceptance); None: no speculation.
    speculation = None
    # The policy's steady_run() answer at the current step boundary when a run of the fast path
    # has just asked it (answered: True; fast_steps then reads it instead of asking again).
    answered = False
    answer = None
    # Called with the replica when its loop runs out of work and is about to sleep (an
    # autoscaled fleet turns a draining replica off then: simbatch.engine.autoscale). None: nothing.
    on_idle = None

    def __init__(self, env: simpy.Environment, index: int, policy: Policy,
                 backend: CostModel, log: EventLog, seqs: list[Sequence | None],
                 fast_forward: bool = True):
        self.env = env
        self.index = index
        self.policy = policy
        self.backend = backend
        self.log = log
        self.seqs = seqs  # shared id -> Sequence table, filled by the dispatcher
        self.wakeup = env.event()
        # steady decode runs skip the policy (same results) where its class vouches for
        # them (Policy.fast_path); a step split over streams takes the fast path only
        # where the backend prices micro-batches from their work (price_streams)
        self.streams = getattr(policy.params, "streams", 1)
        self.fast_forward = (fast_forward and policy.fast_path
                             and (self.streams == 1 or fast_price(backend, "price_streams") is not None))
        self.prev_decode = -1  # this replica's latest step that ran decodes
        # running requests advanced lazily by steady decode runs (see DecodeGroup)
        self.group = DecodeGroup(policy.kv.block_size, policy.kv.mode == "paged", log)
        # An online controller (simbatch.control), if any: consulted at the first step
        # boundary at or after control_at; window collects the latencies it watches.
        self.controller = None
        self.control_at = float("inf")
        self.control_interval = 0.0
        self.window = None
        log.kv_capacity_blocks[index] = policy.kv.num_blocks
        self.process = env.process(self.run())

    def speculate(self, acceptance, num_speculative_tokens: int) -> None:
        """Serve with speculative decoding: the policy plans each decode with its drafts, and
        ``acceptance`` decides which a verify step keeps. Every step then goes through the
        policy (the fast path's steady runs assume one token per decode step)."""
        self.speculation = acceptance
        self.policy.spec_tokens = num_speculative_tokens
        self.fast_forward = False

    def submit(self, seq: Sequence) -> None:
        """Queue an arriving request and wake the replica if it is idle."""
        self.policy.add(seq, self.env.now)
        self.wake()

    def wake(self) -> None:
        """Wake the replica if it idles (a no-op while it steps)."""
        if not self.wakeup.triggered:
            self.wakeup.succeed()

    def run(self):
        """The engine loop: schedule, run, postprocess; sleep when there is nothing to do."""
        env, policy = self.env, self.policy
        while True:
            if env.now >= self.control_at:
                control_tick(self, env.now)
            if self.inbox is not None and self.inbox.ready(self):
                yield from self.inbox.pull(self)
            if self.fast_forward:
                steps = fast_steps(self)
                if steps is not None and (yield from steps):
                    continue  # steps the fast path took (same results as the loop's own)
            if self.group.members and policy.next_plan_reads_running():
                self.group.sync_all()
            start = env.now
            plan = policy.schedule(start)
            if plan is None:
                if self.on_idle is not None:
                    self.on_idle(self)
                yield from self.idle(policy.wake_at())
                continue
            num_waiting, stop = policy.num_waiting, policy.stop_reason
            cost = self.backend.step_cost(plan)
            yield env.timeout(cost.seconds)
            finished = self.postprocess(plan, start, cost, num_waiting, stop)
            policy.on_step_done(plan, finished, env.now)

    def idle(self, wake_at: float | None):
        """Sleep until a request arrives or the policy's timer fires."""
        self.wakeup = self.env.event()
        events = [self.wakeup]
        if wake_at is not None:
            events.append(self.env.timeout(max(0.0, wake_at - self.env.now)))
        yield self.env.any_of(events)

    def postprocess(self, plan: StepPlan, start: float, cost, num_waiting: int, stop: int) -> list[Sequence]:
        """Apply a finished step: computed tokens, emitted tokens, finished requests, the log
        (``num_waiting`` and ``stop``, the admission's stop reason, as the step started)."""
        log, end = self.log, self.env.now
        decode_slots = plan.num_decode_slots
        rids, news = plan.request_ids, plan.num_new_tokens
        # The plan's token counts, read once (each StepPlan property sums a slice).
        decode_tokens = plan.num_decode_tokens if decode_slots else 0
        step = log.append_step(
            replica=self.index, start_s=start, duration_s=cost.seconds, num_seqs=plan.num_seqs,
            num_slots=len(rids), prefill_tokens=plan.num_prefill_tokens,
            decode_tokens=decode_tokens, padded_tokens=plan.num_padded_tokens,
            kv_used_blocks=self.policy.kv.num_used, num_waiting=num_waiting, stop_reason=stop,
            useful_flops=cost.useful_flops, useful_bytes=cost.useful_bytes)
        finished = self.apply_decodes(rids, news, decode_slots, step, start, end) if decode_slots else []
        if len(rids) > decode_slots:  # prefill chunks (a prefill-only step has no decode slot)
            seqs = self.seqs
            chunks = [(seqs[rid], n) for rid, n in zip(rids[decode_slots:], news[decode_slots:]) if rid >= 0]
            finished += self.apply_chunks(chunks, step, start, end)
        if decode_tokens:
            self.prev_decode = step
        return finished

    def apply_decodes(self, rids: list, news: list, decode_slots: int, step: int, start: float,
                      end: float) -> list[Sequence]:
        """The decode-slot rows of a step (the first ``decode_slots`` of ``rids`` / ``news``):
        computed and emitted tokens; returns the requests that finished."""
        finished = []
        log = self.log
        seqs, first_scheduled, continues, stay = self.seqs, log.first_scheduled_s, log.run_continues, log.stay
        # A decode-slot token stays in its request's token run when no decode step
        # ran between the run's last token and this step (prefill-only steps that
        # paused the decodes do not break runs; see EventLog).
        since = self.prev_decode
        for rid, n in zip(rids[:decode_slots], news[:decode_slots]):
            if rid < 0:
                continue
            seq = seqs[rid]
            if seq.num_computed == seq.num_prefix_hit and seq.num_preemptions == 0 and seq.num_generated == 0:
                first_scheduled[rid] = start
            if n > 1:  # speculative decoding: its last token and n - 1 drafts verified at once
                if self.verify(seq, n - 1, step, end, continues(rid, since)):
                    finished.append(seq)
                continue
            seq.num_computed += n
            if seq.num_computed == seq.num_tokens:
                g = seq.num_generated + 1
                stays = continues(rid, since)
                if stays and 1 < g < seq.output_tokens:
                    # Hot path (most tokens): a decode that stays in its token run and
                    # is neither the first nor the last token. Same effect as emit().
                    stay(rid, step)
                    seq.num_generated = g
                    seq.num_tokens += 1
                    continue
                self.emit(seq, step, end, stays)
                if seq.status == FINISHED:
                    finished.append(seq)
        return finished

    def apply_chunks(self, chunks: list, step: int, start: float, end: float) -> list[Sequence]:
        """The prefill-chunk rows ``(seq, tokens)`` of a step: computed tokens, a first (or,
        after a recompute, the next) token when a prompt is done; returns the requests that
        finished. Used by :meth:`postprocess` and by the fast path's mixed steps."""
        finished = []
        first_scheduled = self.log.first_scheduled_s
        for seq, n in chunks:
            computed = seq.num_computed
            if computed == seq.num_prefix_hit and seq.num_preemptions == 0 and seq.num_generated == 0:
                first_scheduled[seq.id] = start
            seq.num_computed = computed = computed + n
            if computed == seq.num_tokens:
                self.emit(seq, step, end, False)
                if seq.status == FINISHED:
                    finished.append(seq)
        return finished

    def verify(self, seq: Sequence, drafts: int, step: int, end: float, stays: bool) -> bool:
        """A verify step of ``seq`` over its last token and ``drafts`` drafts: the drafts kept
        and the target's own next token are emitted together, as one chunk of its token run
        (so ITL, as vLLM's benchmark measures it, is the gap between chunks). Returns True
        when ``seq`` finished."""
        kept = self.speculation.accept(seq.id, seq.num_generated, seq.output_tokens, drafts)
        seq.num_computed += 1 + kept  # the rejected drafts' KV slots stay allocated, for the next drafts
        self.emit(seq, step, end, stays)
        for _ in range(kept):
            self.emit(seq, step, end, True)
        if seq.status == FINISHED:
            self.speculation.forget(seq.id)
            return True
        return False

    def emit(self, seq: Sequence, step: int, end: float, stays: bool) -> None:
        """``seq`` produced an output token at the end of replica step ``step``
        (``stays``: the token stays in its open token run, else it joins a new one)."""
        log, rid = self.log, seq.id
        if stays:
            log.stay(rid, step)
        else:
            log.join(rid, self.index, step)
        generated = seq.num_generated
        if generated == 0:
            log.first_token_s[rid] = end
            if self.window is not None:
                self.window.first_token(end, seq.arrival_s)
        seq.num_generated = generated = generated + 1
        if generated == seq.output_tokens:
            seq.status = FINISHED
            log.leave(rid)
            log.finish_s[rid] = end
            log.num_emitted[rid] = generated
            log.num_preemptions[rid] = seq.num_preemptions
            self.seqs[rid] = None  # all it did is in the log now; let it go
        else:
            seq.num_tokens += 1
