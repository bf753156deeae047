"""The fast path: steady runs of decode steps without the policy or per-request work.

When the policy says the batch is steady (every running request decoding and
nobody admissible; or a started padded batch), the next steps are all "every
running request computes one token", until a request reaches its last token,
KV blocks run short, or (when the queue was empty) a request arrives. Those
steps still each get their own SimPy timeout, log row and price (so times and
ordering are exactly the step-by-step engine's), but the plan is not rebuilt
and the requests are not touched per step: the price comes from the
backend's O(1) ``decode_cost`` / ``padded_decode_cost``, block needs from a
histogram of each request's room in its last block, and the requests'
counters and token runs are advanced once at the end.
"""

from __future__ import annotations

from simbatch.sequence import FINISHED


def block_slack(seqs, block_size: int) -> list[int] | None:
    """Per request, decode steps left before it needs a new block (None: not a paged steady state)."""
    slack = [s.num_blocks * block_size - s.num_computed for s in seqs]
    if any(not 0 <= r < block_size for r in slack):
        return None
    return slack


def steady_run(replica):
    """SimPy sub-process: fast-forward the steady state the policy promises; returns steps run."""
    if replica.policy.steady_kind == "padded_batch":
        return (yield from padded_run(replica))
    return (yield from decode_run(replica))


def padded_run(replica):
    """Decode steps of a started padded batch until one of its rows is about to finish."""
    env, policy, log = replica.env, replica.policy, replica.log
    cost_of = getattr(replica.backend, "padded_decode_cost", None)
    batch = policy.batch
    live = [s for s in batch.seqs if s.status != FINISHED]
    limit = min(s.output_tokens - s.num_generated for s in live) - 1
    if cost_of is None or limit <= 0:
        return 0
    slots, n = len(batch.seqs), len(live)
    step0, decoded0 = log.replica_num_steps[replica.index], batch.num_decodes_done
    used = policy.kv.num_used  # reserved up front: constant through the batch
    for done in range(limit):
        # the padded context PaddedBatch.next_plan would use for this decode step
        cost = cost_of(slots, n, batch.max_prompt + decoded0 + done)
        start, waiting = env.now, policy.num_waiting
        yield env.timeout(cost.seconds)
        log.record_step(replica=replica.index, start_s=start, duration_s=cost.seconds, num_seqs=n,
                        num_slots=slots, prefill_tokens=0, decode_tokens=n, padded_tokens=slots - n,
                        kv_used_blocks=used, num_waiting=waiting, useful_flops=cost.useful_flops,
                        useful_bytes=cost.useful_bytes)
    batch.num_decodes_done += limit
    advance(replica, live, [], step0, limit, 1)
    return limit


def decode_run(replica):
    """Steady decode steps of every running request; returns how many it ran (0: none)."""
    env, policy, kv, log = replica.env, replica.policy, replica.policy.kv, replica.log
    decode_cost = getattr(replica.backend, "decode_cost", None)
    seqs = list(policy.running)
    n = len(seqs)
    limit = min(s.output_tokens - s.num_generated for s in seqs) - 1  # stop before anyone's last token
    if decode_cost is None or limit <= 0:
        return 0
    bs, paged = kv.block_size, kv.mode == "paged"
    slack = block_slack(seqs, bs) if paged else []
    if slack is None:
        return 0
    need_at = [0] * bs  # step k of the run needs need_at[k % bs] new blocks
    for r in slack:
        need_at[r] += 1
    step0 = log.replica_num_steps[replica.index]
    context0 = sum(s.num_computed for s in seqs)
    # With an empty queue an arrival may be admitted next step, so it ends the
    # run; behind a blocked head (steady_decode's promise) arrivals change nothing.
    stop_on_arrival = policy.num_waiting == 0
    done = 0
    while done < limit and not (stop_on_arrival and policy.num_waiting):
        need = need_at[done % bs] if paged else 0
        if need > kv.num_free:
            break  # the normal path decides whom to preempt
        kv.take(need)
        cost = decode_cost(n, context0 + done * n)
        start, waiting = env.now, policy.num_waiting
        yield env.timeout(cost.seconds)
        log.record_step(replica=replica.index, start_s=start, duration_s=cost.seconds, num_seqs=n,
                        num_slots=n, prefill_tokens=0, decode_tokens=n, padded_tokens=0,
                        kv_used_blocks=kv.num_used, num_waiting=waiting, useful_flops=cost.useful_flops,
                        useful_bytes=cost.useful_bytes)
        done += 1
    if done:
        advance(replica, seqs, slack, step0, done, bs)
    return done


def advance(replica, seqs, slack: list[int], step0: int, done: int, block_size: int) -> None:
    """Apply ``done`` decode steps to each request at once: tokens, blocks, token runs."""
    last = step0 + done - 1
    for i, s in enumerate(seqs):
        s.num_computed += done
        s.num_generated += done
        s.num_tokens += done
        if slack:  # blocks taken at steps slack, slack + bs, ... of the run
            r = slack[i]
            s.num_blocks += (done - 1 - r) // block_size + 1 if done > r else 0
        if s.run_first >= 0 and s.run_last >= replica.prev_decode:  # the run goes on (see postprocess)
            s.run_last = last
        else:
            replica.close_run(s)
            s.run_first, s.run_last = step0, last
    replica.prev_decode = last
