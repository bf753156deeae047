"""The fast path: steady runs of decode steps without the policy or per-request work.

When the policy says the batch is steady (every running request decoding and
nobody admissible; or a started padded batch), the next steps are all "every
running request computes one token", until a request reaches its last token,
KV blocks run short, or (when the queue was empty) a request arrives. Those
steps still each get their own SimPy timeout, log row and price (so times and
ordering are exactly the step-by-step engine's), but the plan is not rebuilt
and the requests are not touched per step: the price comes from the
backend's O(1) ``decode_cost`` / ``padded_decode_cost``. Running requests of
iteration-level policies live in the replica's :class:`DecodeGroup`, which
settles a request's counters only when it finishes or the policy needs them,
so steady decoding costs O(1) per step whatever the batch size; a padded
batch's rows are advanced once at the end of the run.
"""

from __future__ import annotations

from simbatch.sequence import FINISHED


def steady_run(replica):
    """SimPy sub-process: fast-forward the steady state the policy promises; returns steps run."""
    if replica.policy.steady_kind == "padded_batch":
        return (yield from padded_run(replica))
    return (yield from decode_run(replica))


def padded_run(replica):
    """Decode steps of a started padded batch until one of its rows is about to finish.

    Nothing can change such a run but a controller (at ``control_at``): the batch
    admits no one and its KV was reserved up front. So its steps are priced at once
    (``padded_decode_costs``) and logged at once at its end (the replica's rows stay in
    order); each still gets its own SimPy timeout, and the queue length it started with.
    """
    env, policy, log, backend = replica.env, replica.policy, replica.log, replica.backend
    costs_of = getattr(backend, "padded_decode_costs", None)
    cost_of = getattr(backend, "padded_decode_cost", None)
    batch = policy.batch
    live = [s for s in batch.seqs if s.status != FINISHED]
    limit = min(s.output_tokens - s.num_generated for s in live) - 1
    if (costs_of is None and cost_of is None) or limit <= 0:
        return 0
    slots, n = len(batch.seqs), len(live)
    step0, decoded0 = log.replica_num_steps[replica.index], batch.num_decodes_done
    # the padded context PaddedBatch.next_plan would use for each of these decode steps
    contexts = range(batch.max_prompt + decoded0, batch.max_prompt + decoded0 + limit)
    if costs_of is not None:
        seconds, flops, nbytes = costs_of(slots, n, contexts)
    else:  # a backend that must see each step priced as it starts (the latency-aware router's clock)
        seconds, flops, nbytes, priced = None, [], [], []
    starts, waiting, control_at, timeout = [], [], replica.control_at, env.timeout
    for i in range(limit):
        starts.append(env.now)
        waiting.append(policy.num_waiting)
        if seconds is None:
            cost = cost_of(slots, n, contexts[i])
            priced.append(cost.seconds)
            flops.append(cost.useful_flops)
            nbytes.append(cost.useful_bytes)
            yield timeout(cost.seconds)
        else:
            yield timeout(seconds[i])
        if env.now >= control_at:
            break  # a controller may turn a knob at this boundary
    done = len(starts)
    if seconds is None:
        seconds = priced
    used = policy.kv.num_used  # reserved up front: constant through the batch
    log.append_steps(replica.index, starts, seconds[:done], n, slots, 0, n, slots - n, used, waiting,
                     flops[:done], nbytes[:done])
    batch.num_decodes_done += done
    advance(replica, live, step0, done)
    return done


def decode_run(replica):
    """Steady decode steps of every running request, up to and including the first step in
    which one of them emits its last token; returns how many it ran (0: none)."""
    env, policy, log, group = replica.env, replica.policy, replica.log, replica.group
    kv = policy.kv
    decode_cost = getattr(replica.backend, "decode_cost", None)
    if decode_cost is None or not group.adopt(policy.running, replica.prev_decode):
        return 0
    n, index, append_step = len(group.members), replica.index, log.append_step
    # With an empty queue an arrival may be admitted next step, so it ends the
    # run; behind a blocked head (steady_decode's promise) arrivals change nothing.
    stop_on_arrival = policy.num_waiting == 0
    done = 0
    while not (stop_on_arrival and policy.num_waiting):
        need = group.need()
        if need > kv.num_free:
            break  # the normal path decides whom to preempt
        kv.take(need)
        cost = decode_cost(n, group.context())
        start, waiting = env.now, policy.num_waiting
        yield env.timeout(cost.seconds)
        step = append_step(index, start, cost.seconds, n, n, 0, n, 0, kv.num_used, waiting,
                           cost.useful_flops, cost.useful_bytes)
        group.clock += 1
        group.last_step = replica.prev_decode = step
        done += 1
        if group.next_finish() == group.clock:
            finish(replica, step)
            break
        if env.now >= replica.control_at:
            break  # a controller may turn a knob at this boundary
        if replica.inbox is not None and replica.inbox.ready(replica):
            break  # the loop takes a transfer before the next step
    return done


def mixed_step(replica):
    """One step of chunked prefill with its decodes run lazily by the decode group: the policy
    plans only the chunks. Returns 1 if it ran the step, 0 to leave it to the normal path."""
    env, policy, log, group = replica.env, replica.policy, replica.log, replica.group
    kv, budget = policy.kv, policy.params.budget
    mixed_cost = getattr(replica.backend, "mixed_cost", None)
    if mixed_cost is None or not group.adopt_decoding(policy.running, len(policy.prefilling),
                                                      replica.prev_decode):
        return 0
    n = len(group.members)
    need = group.need()
    # The normal path's decodes: all of them, within the budget, without preempting anyone.
    if n == 0 or n > budget or need > kv.num_free:
        return 0
    kv.take(need)
    start, context = env.now, group.context()
    chunks = policy.schedule_chunks(budget - n, group.members)
    waiting = policy.num_waiting
    chunk_new = [k for _, k in chunks]
    cost = mixed_cost(n, context, chunk_new, [s.num_computed for s, _ in chunks], replica.streams)
    yield env.timeout(cost.seconds)
    num = n + len(chunks)
    step = log.append_step(replica.index, start, cost.seconds, num, num, sum(chunk_new), n, 0, kv.num_used,
                           waiting, cost.useful_flops, cost.useful_bytes)
    end = env.now
    finished = replica.apply_chunks(chunks, step, start, end)
    group.clock += 1
    group.last_step = replica.prev_decode = step
    if group.next_finish() == group.clock:
        finished += emit_last_tokens(replica, step, end)
    policy.on_step_done(None, finished, end)
    return 1


def finish(replica, step: int) -> None:
    """Emit the last token of the members that finished in ``step`` and retire them."""
    end = replica.env.now
    replica.policy.on_step_done(None, emit_last_tokens(replica, step, end), end)


def emit_last_tokens(replica, step: int, end: float) -> list:
    """The decode group's members that emitted their last token in ``step``, emitted."""
    done = replica.group.pop_finished()
    for seq in done:
        replica.emit(seq, step, end, True)
    return done


def advance(replica, seqs, step0: int, done: int) -> None:
    """Apply ``done`` decode steps of a padded batch to each live row at once: tokens, token runs
    (a padded batch reserved its blocks up front)."""
    last = step0 + done - 1
    for s in seqs:
        s.num_computed += done
        s.num_generated += done
        s.num_tokens += done
        if s.run_first >= 0 and s.run_last >= replica.prev_decode:  # the run goes on (see postprocess)
            s.run_last = last
        else:
            replica.close_run(s)
            s.run_first, s.run_last = step0, last
    replica.prev_decode = last
