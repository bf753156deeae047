"""Arrivals: release each request at its trace time to a replica (round-robin for now)."""

from __future__ import annotations

import simpy

from simbatch.eventlog import EventLog
from simbatch.sequence import Sequence
from simbatch.workload import Workload


def dispatch(env: simpy.Environment, workload: Workload, replicas: list, seqs: list, log: EventLog):
    """SimPy process: one event per arrival. Requests a policy can never serve are rejected."""
    arrival = workload.arrival_s.tolist()
    prompt = workload.prompt_tokens.tolist()
    output = workload.output_tokens.tolist()
    priority = workload.priority.tolist() if workload.priority is not None else [0] * len(arrival)
    limit = replicas[0].policy.max_request_tokens()
    rejected = 0
    log.arrival_s[:] = workload.arrival_s
    for i, t in enumerate(arrival):
        if t > env.now:
            yield env.timeout(t - env.now)
        if limit is not None and prompt[i] + output[i] > limit:
            rejected += 1  # vLLM rejects prompts longer than max_model_len the same way
            continue
        seq = Sequence(i, t, prompt[i], output[i], priority[i])
        seqs[i] = seq
        r = i % len(replicas)
        log.replica[i] = r
        replicas[r].submit(seq)
    if rejected:
        log.note(f"{rejected} request(s) rejected: prompt + output longer than the "
                 f"{replicas[0].policy.kind} policy's max_num_batched_tokens ({limit}); "
                 f"raise it or use chunked_prefill")
