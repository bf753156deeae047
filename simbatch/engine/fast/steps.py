"""The fast path: steady runs of decode steps without the policy or per-request work.

When the policy describes a steady run (``Policy.steady_run``: every running request
decoding and nobody admissible, or a started padded batch), the next steps are all "every
running request computes one token", until a request reaches its last token,
KV blocks run short, or (when the queue was empty) a request arrives. Those
steps still each get their own SimPy timeout, log row and price (so times and
ordering are exactly the step-by-step engine's), but the plan is not rebuilt
and the requests are not touched per step: the price comes from the
backend's O(1) ``decode_cost`` / ``padded_decode_cost``. Running requests of
iteration-level policies live in the replica's :class:`DecodeGroup`, which
settles a request's counters only when it finishes or the policy needs them,
so steady decoding costs O(1) per step whatever the batch size (the steady
decode run itself is :meth:`simbatch.engine.fast.decode_group.DecodeGroup.run`); a
padded batch's rows are advanced once at the end of :func:`padded_run`.

Chunked prefill's steps mix the running decodes with prefill chunks. There the
decodes are still the decode group's (O(1) a step) and the policy plans only
the chunks (``schedule_chunks``), and :func:`mixed_run` takes such steps back
to back, asking between two steps exactly what the engine loop would ask, so
a loaded replica re-enters the loop only when something else has to happen.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from simbatch.costmodel.base import fast_price

first = itemgetter(0)  # a (request, tokens) pair's request


def fast_steps(replica):
    """The fast path's turn at a step boundary (``Replica.run`` asks it before scheduling): the
    SimPy sub-process of the run the policy describes (``steady_run``): the decode group's for
    every running request decoding, :func:`padded_run` for a started padded batch,
    :func:`mixed_run` for chunked prefill's mixed steps; each returns how many steps it ran
    (0: the loop schedules one). None when the policy describes none.

    A plain function, not a sub-process itself: the replica delegates to the run directly, one
    generator frame less for every step of it to pass through."""
    # A run of the fast path may have just asked the policy at this very boundary (nothing
    # has happened since): then it is not asked twice.
    if replica.answered:
        run, replica.answered = replica.answer, False
    else:
        run = replica.policy.steady_run()
    if run is None:
        return None
    kind = run.kind
    if kind == "running":
        return replica.group.run(replica, run)
    if kind == "mixed":
        return mixed_run(replica, run)
    return padded_run(replica, run)


def padded_run(replica, run):
    """Decode steps of a started padded batch to its end (or to a controller's boundary);
    ``run``: the policy's promise (:class:`~simbatch.policies.base.SteadyRun`).

    Nothing can change such a run but a controller (at ``control_at``): the batch
    admits no one, its KV was reserved up front, and a row that finishes becomes a
    padding slot. So its steps are priced at once (``padded_decode_costs``, with each
    step's live rows) and logged at once at its end (the replica's rows stay in order).
    Steps that end before any other process's next event share one timeout
    (:func:`quiet_steps`); the rest take one each. Whenever the run resumes, the rows
    that have emitted their last token by then are finished, through the policy's own
    ``on_step_done``, so what another process can see of the batch (its finished rows)
    is what the step-by-step engine shows at that time.
    """
    env, policy, log, backend = replica.env, replica.policy, replica.log, replica.backend
    costs_of = fast_price(backend, "padded_decode_costs")
    cost_of = fast_price(backend, "padded_decode_cost")
    batch = policy.batch
    live, to_go, contexts = batch.decode_run()  # the batch's own description of its steps
    if (costs_of is None and cost_of is None) or not live:
        return 0
    remaining = np.array(to_go)  # ascending
    limit, slots = len(contexts), len(batch.seqs)
    # the live rows of each step (a row with r tokens to go emits its last in step r - 1)
    lives = (len(live) - np.searchsorted(remaining, np.arange(limit), side="right")).tolist()
    step0, prev = log.replica_num_steps[replica.index], replica.prev_decode
    if costs_of is not None:
        seconds, flops, nbytes = costs_of(slots, lives, contexts)
    else:  # a backend that must see each step priced as it starts (the latency-aware router's clock)
        seconds, flops, nbytes, priced = None, [], [], []
    used = policy.kv.num_used  # reserved up front: constant through the batch
    starts, waiting, control_at, timeout = [], [], replica.control_at, env.timeout
    rows = _Rows(replica, live, to_go, step0, prev)
    i = 0
    while i < limit:
        if seconds is not None:
            # Steps that end before anything else in the simulation happens (the next event
            # of any process: an arrival, another replica's step) or a controller is due
            # change nothing another process could see: one timeout covers them all.
            quiet, end = quiet_steps(env.now, seconds, i, limit, min(env.peek(), control_at))
            if quiet:
                waiting += [policy.num_waiting] * len(quiet)
                starts += quiet
                yield timeout(end - env.now)
                i += len(quiet)
                rows.finish(i, starts, env.now)
                continue
        starts.append(env.now)
        waiting.append(policy.num_waiting)
        if seconds is None:
            cost = cost_of(slots, lives[i], contexts[i])
            priced.append(cost.seconds)
            flops.append(cost.useful_flops)
            nbytes.append(cost.useful_bytes)
            yield timeout(cost.seconds)
        else:
            yield timeout(seconds[i])
        i += 1
        rows.finish(i, starts, env.now)
        if env.now >= control_at:
            break  # a controller may turn a knob at this boundary
    done = len(starts)
    if seconds is None:
        seconds = priced
    a = 0
    while a < done:  # one log call per stretch of steps with the same live rows
        n = lives[a]
        b = a + lives[a:done].count(n)  # live counts only fall, so equal ones are adjacent
        log.append_steps(replica=replica.index, start_s=starts[a:b], duration_s=seconds[a:b], num_seqs=n,
                         num_slots=slots, prefill_tokens=0, decode_tokens=n, padded_tokens=slots - n,
                         kv_used_blocks=used, num_waiting=waiting[a:b], stop_reason=run.stop_reason,
                         useful_flops=flops[a:b], useful_bytes=nbytes[a:b])
        a = b
    batch.decoded(done)
    advance(replica, rows.unfinished(), step0, done)
    return done


class _Rows:
    """A padded run's live rows, by tokens to go: finishes them as the run's steps complete."""

    def __init__(self, replica, live: list, remaining: list, step0: int, prev: int):
        self.replica, self.live, self.remaining = replica, live, remaining
        self.step0, self.prev = step0, prev  # the run's first step; the decode step before it
        self.next = 0  # live[next:] have not finished

    def finish(self, done: int, starts: list, now: float) -> None:
        """Steps ``0 .. done - 1`` have run (``starts``: each one's start; ``now``: the last's end):
        every row whose last token fell in them emits it and leaves, as the step-by-step
        engine's postprocess and the policy's ``on_step_done`` would have."""
        live, remaining, k = self.live, self.remaining, self.next
        if k == len(live) or remaining[k] > done:
            return
        finished = []
        while k < len(live) and remaining[k] <= done:
            s, r = live[k], remaining[k]
            end = starts[r] if r < done else now  # the end of step r - 1 is the next one's start
            self._last_token(s, r, end)
            finished.append(s)
            k += 1
        self.next = k
        self.replica.policy.on_step_done(None, finished, now)

    def _last_token(self, s, r: int, end: float) -> None:
        """Row ``s`` emits its remaining ``r`` tokens, the last at the end of the run's step r - 1."""
        replica, step0, log = self.replica, self.step0, self.replica.log
        stays = log.run_continues(s.id, self.prev)  # its run goes on (see postprocess)
        if r > 1:  # tokens at steps step0 .. step0 + r - 2, then the last one
            s.num_generated += r - 1
            s.num_tokens += r - 1
            if not stays:
                log.join(s.id, replica.index, step0)
            log.stay(s.id, step0 + r - 2)
            stays = True
        s.num_computed += r
        replica.emit(s, step0 + r - 1, end, stays)

    def unfinished(self) -> list:
        """The rows still live when the run stopped."""
        return self.live[self.next:]


def quiet_steps(now: float, seconds: list, i: int, limit: int, horizon: float) -> tuple[list, float]:
    """(starts, end) of steps ``i``, ``i + 1``, ... (below ``limit``) run back to back from
    ``now`` that end strictly before ``horizon``, times summed one step at a time as SimPy sums
    them; ``([], now)`` when there are none, or when one timeout from ``now`` would not end
    at exactly the same float (then each step takes its own)."""
    starts, t = [], now
    while i < limit:
        end = t + seconds[i]
        if end >= horizon:
            break
        starts.append(t)
        t, i = end, i + 1
    if not starts or now + (t - now) != t:
        return [], now
    return starts, t


def mixed_run(replica, mixed):
    """Steps of chunked prefill back to back, each its running decodes (run lazily by the
    decode group) plus the chunks the policy plans for what they leave of the budget
    (``schedule_chunks``), as the policy's ``mixed`` run (a ``"mixed"`` :class:`SteadyRun`)
    describes them; returns how many it ran (0: leave the step to the normal path).

    It stops where the engine loop would do something else before the next step: a
    controller is due, the transfer inbox has work, the policy promises a steady decode run
    (``DecodeGroup.run`` takes it), or the next step's decodes cannot all run as the decode
    group runs them (one does not decode, they do not fit the budget, blocks run short: the
    normal path decides whom to preempt). Between two steps it asks exactly what the loop
    asks (``steady_run`` last), in the same order, so the steps are the step-by-step
    engine's; what it saves is the loop's round trip and the per-step sub-process.
    """
    env, policy, log, group = replica.env, replica.policy, replica.log, replica.group
    mixed_cost = fast_price(replica.backend, "mixed_cost")
    if mixed_cost is None:
        return 0
    # Knobs change only at a controller's boundary, where this run stops: read them once.
    kv, budget, streams, index = policy.kv, policy.params.budget, replica.streams, replica.index
    append_step, timeout, apply_chunks = log.append_step, env.timeout, replica.apply_chunks
    schedule_chunks, on_step_done, inbox = policy.schedule_chunks, policy.on_step_done, replica.inbox
    steady_run = policy.steady_run
    join_decoding = group.join_decoding
    done = 0
    while group.adopt_decoding(policy.running, len(policy.prefilling), replica.prev_decode):
        members = group.members  # adopt_decoding may have rebuilt the group
        n = len(members)
        need = group.need()
        # The normal path's decodes: all of them, within the budget, without preempting anyone.
        if n == 0 or n > budget or need > kv.num_free:
            break
        if need:
            kv.allocate(group, need)  # the group holds them until it settles its members
        start, context = env.now, group.context()
        chunks = schedule_chunks(budget - n, members)
        waiting, stop = policy.num_waiting, policy.stop_reason
        one = len(chunks) == 1  # the usual case under load: one chunk takes what the decodes left
        if one:
            (seq, tokens), = chunks
            chunk_new, chunk_ctx = [tokens], [seq.num_computed]
        else:
            chunk_new, chunk_ctx = [k for _, k in chunks], [s.num_computed for s, _ in chunks]
            tokens = sum(chunk_new)
        cost = mixed_cost(n, context, chunk_new, chunk_ctx, streams)
        seconds = cost.seconds
        yield timeout(seconds)
        num = n + len(chunks)
        step = append_step(replica=index, start_s=start, duration_s=seconds, num_seqs=num, num_slots=num,
                           prefill_tokens=tokens, decode_tokens=n, padded_tokens=0,
                           kv_used_blocks=kv.num_used, num_waiting=waiting, stop_reason=stop,
                           useful_flops=cost.useful_flops, useful_bytes=cost.useful_bytes)
        end = env.now
        finished = apply_chunks(chunks, step, start, end)
        group.clock += 1
        group.last_step = replica.prev_decode = step
        if group.next_finish() == group.clock:
            finished += group.emit_finished(replica, step, end)
        on_step_done(None, finished, end)
        # The requests whose prefill this step completed decode next: join them now (in running
        # order, as adopt_decoding's scan of the running list would) rather than by that scan.
        # One chunk: join_decoding's own first test, asked here (mostly the chunk goes on).
        if not one:
            join_decoding(map(first, chunks), step)
        elif seq.num_generated and seq.num_tokens - seq.num_computed == 1:
            join_decoding((seq,), step)
        done += 1
        # What Replica.run asks before its next step, in its order.
        if end >= replica.control_at or (inbox is not None and inbox.ready(replica)):
            break
        run = steady_run()
        if run is not mixed:  # a steady decode run (DecodeGroup.run takes it), or none
            replica.answer, replica.answered = run, True  # the loop's fast_steps reads this answer
            break
    return done


def advance(replica, seqs, step0: int, done: int) -> None:
    """Apply ``done`` decode steps of a padded batch to each live row at once: tokens, token runs
    (a padded batch reserved its blocks up front)."""
    last, log = step0 + done - 1, replica.log
    for s in seqs:
        s.num_computed += done
        s.num_generated += done
        s.num_tokens += done
        if not log.run_continues(s.id, replica.prev_decode):  # its run broke (see postprocess)
            log.join(s.id, replica.index, step0)
        log.stay(s.id, last)
    replica.prev_decode = last
