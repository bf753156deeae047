"""Arrivals: release each request at its trace time to the replica its router picks."""

from __future__ import annotations

import simpy

from simbatch.core.eventlog import EventLog
from simbatch.core.prefix_cache import prefix_labels
from simbatch.core.sequence import Sequence
from simbatch.policies.routers import RoundRobinRouter, Router
from simbatch.workload import Workload

NO_LIMIT = float("inf")


def serve_limits(replicas: list) -> list[float]:
    """Per replica, the longest prompt + output it can ever serve.

    The policy's limit (``max_request_tokens``) always counts. KV capacity
    counts only when replicas differ in it: ``simulate`` has checked that every
    request fits the largest cache, and a single-size cluster keeps the
    policy's own guard for a request that cannot fit (its error is tested).
    """
    policy_limits = [r.policy.max_request_tokens() for r in replicas]
    limits = [NO_LIMIT if lim is None else lim for lim in policy_limits]
    kv_tokens = [r.policy.kv.num_blocks * r.policy.kv.block_size for r in replicas]
    if len(set(kv_tokens)) > 1:
        limits = [min(lim, kv) for lim, kv in zip(limits, kv_tokens)]
    return limits


def window_note(refused: int, window: int) -> str:
    """The run-log line for requests longer than the model's context window: the one rule of
    admissibility, the same under every policy (issue 34: static served them while continuous
    rejected them as longer than its step budget, so compare set different requests side by side)."""
    return (f"{refused} request(s) refused: prompt + output longer than the model's context window "
            f"({window:,} tokens), under every policy (vLLM refuses them too: max_model_len); clip them "
            f"with workload.max_total_tokens")


def rejection_note(rejected: int, replicas: list, limits: list[float]) -> str:
    """The run-log line for requests no replica could serve."""
    kinds = {r.policy.kind for r in replicas}
    if len(kinds) == 1 and len(set(limits)) == 1:
        return (f"{rejected} request(s) rejected: prompt + output longer than the "
                f"{replicas[0].policy.kind} policy's max_num_batched_tokens ({limits[0]}); "
                f"raise it or use chunked_prefill")
    return (f"{rejected} request(s) rejected: prompt + output longer than any replica serves "
            f"(at most {max(limits)} tokens: a policy's max_num_batched_tokens or a KV cache)")


def dispatch(env: simpy.Environment, workload: Workload, replicas: list, seqs: list, log: EventLog,
             router: Router | None = None, request_s: float = 0.0, window: int | None = None, fleet=None):
    """SimPy process: one event per arrival. A request longer than the model's context
    ``window`` (prompt + output) is refused first, whatever the policy (vLLM refuses a request
    past ``max_model_len``); then the router picks among the replicas whose policy can serve
    it, and a request none can serve is rejected. A request reaches the scheduler ``request_s``
    after the client sent it (the serving engine's front end, :mod:`simbatch.catalog.servers`);
    its latencies still count from the send. With an autoscaled ``fleet``
    (:mod:`simbatch.engine.autoscale`) the router sees only the replicas ready at the time."""
    router = router or RoundRobinRouter(replicas)
    arrival = workload.arrival_s.tolist()
    prompt = workload.prompt_tokens.tolist()
    output = workload.output_tokens.tolist()
    priority = workload.priority.tolist() if workload.priority is not None else [0] * len(arrival)
    limits = serve_limits(replicas)
    labels = prefix_labels(workload, replicas, log)  # None unless a replica caches prefixes
    floor, ceiling = min(limits), max(limits)  # every replica serves up to floor; none beyond ceiling
    pick = router.pick
    rejected = refused = 0
    widest = NO_LIMIT if window is None else window
    log.arrival_s[:] = workload.arrival_s
    chosen = log.replica
    for i, (t, p, o) in enumerate(zip(arrival, prompt, output)):
        due = t + request_s
        if due > env.now:
            yield env.timeout(due - env.now)
        total = p + o
        if total > widest:
            refused += 1
            continue
        candidates = replicas if fleet is None else fleet.ready
        if total > floor:
            if total > ceiling:
                rejected += 1
                continue
            if fleet is None:
                candidates = [r for r, lim in zip(replicas, limits) if total <= lim]
            else:  # a colocated fleet: replica i is replicas[i]
                candidates = [r for r in candidates if total <= limits[r.index]]
            if not candidates:  # only a replica that is not ready could serve it
                rejected += 1
                continue
        seq = Sequence(i, t, p, o, priority[i], labels[i] if labels else None)
        seqs[i] = seq
        replica = pick(seq, candidates, env.now)
        chosen[i] = replica.index
        replica.submit(seq)
    if refused:
        log.note(window_note(refused, window))
    if rejected:
        log.note(rejection_note(rejected, replicas, limits))
