"""Cluster routers: which replica an arriving request joins (``cluster.router``).

The dispatcher hands a router only the replicas that can serve the request
(their policy's length limit, their KV cache), in replica order; the router
returns one. Scores read the replicas' live state (queue, running batch, KV
blocks, the step in flight), never the future. Ties go to the lowest replica
index (``min`` keeps the first of equal scores), so a run stays a function of
its scenario and seed. Rules and sources: docs/policies.md, "Clusters and routing".
"""

from __future__ import annotations

from typing import ClassVar

from simbatch.core.plan import StepPlan
from simbatch.core.sequence import Sequence
from simbatch.errors import SimbatchError

DEFAULT_TOKEN_BUDGET = 8192  # tokens per step for policies without max_num_batched_tokens (padded batches)


def num_running(policy) -> int:
    """Requests a replica's policy has admitted and not finished (iteration or padded-batch policies)."""
    running = getattr(policy, "running", None)
    if running is not None:
        return len(running)
    batch = getattr(policy, "batch", None)
    return len(batch.seqs) - batch.num_finished if batch is not None else 0


class Router:
    """Base class: scores each candidate replica; the lowest score wins, ties to the lowest index."""

    name: ClassVar[str] = ""
    needs_step_clock: ClassVar[bool] = False  # replicas' backends must be wrapped in a StepClock

    def __init__(self, replicas: list):
        self.replicas = replicas

    def pick(self, seq: Sequence, candidates: list, now: float):
        """The replica ``seq`` joins, from ``candidates`` (non-empty, in replica order)."""
        if len(candidates) == 1:
            return candidates[0]
        return min(candidates, key=lambda r: self.score(r, seq, now))

    def score(self, replica, seq: Sequence, now: float) -> float:
        """Lower is better."""
        raise NotImplementedError


class RoundRobinRouter(Router):
    """Each set of candidate replicas takes turns by its own counter, advanced per routed
    request (vLLM production-stack's ``RoundRobinRouter``: a next index per sorted endpoint set,
    ``routing_logic.py`` ``route_request``; Dynamo's ``--router-mode round-robin``).

    When every replica can serve every request there is one set and request ``k`` routed goes
    to replica ``k mod N``; a rejected request takes no turn. Replicas that cannot serve a
    request (their policy's limit, their KV cache) leave the set, which then has a counter of
    its own, as an endpoint set of different URLs has in production-stack.
    """

    name = "round_robin"

    def __init__(self, replicas: list):
        super().__init__(replicas)
        self.next_index: dict[tuple[int, ...], int] = {}
        self.turn = 0  # the full set's counter, kept apart: it is the common case

    def pick(self, seq: Sequence, candidates: list, now: float):
        if len(candidates) == len(self.replicas):  # every replica (candidates are a subset)
            turn, self.turn = self.turn, self.turn + 1
            return candidates[turn % len(candidates)]
        key = tuple(r.index for r in candidates)
        turn = self.next_index.get(key, 0)
        self.next_index[key] = turn + 1
        return candidates[turn % len(candidates)]


class LeastOutstandingRouter(Router):
    """Fewest requests queued + running: load by request count, as llm-d's queue-depth scorer and
    Envoy's / NGINX's least-request balancing; blind to how long each request is."""

    name = "least_outstanding"

    def score(self, replica, seq: Sequence, now: float) -> float:
        policy = replica.policy
        return policy.num_waiting + num_running(policy)


class LeastKVRouter(Router):
    """Lowest KV load: blocks held + blocks the queue and this request will need, over capacity.

    llm-d's KV-cache-utilization scorer reads blocks held; Dynamo's KV router
    counts "potential active blocks" (held + the new request's). This adds the
    queue's demand too, and divides by capacity so replicas of different sizes compare.
    """

    name = "least_kv"

    def score(self, replica, seq: Sequence, now: float) -> float:
        kv = replica.policy.kv
        queued = sum(kv.blocks_needed(s, s.num_remaining) for s in replica.policy.waiting)
        return (kv.num_used + queued + kv.blocks_needed(seq, seq.num_remaining)) / kv.num_blocks


class PrefixAwareRouter(Router):
    """Most cached prefix, weighed against load (vLLM production-stack's load-aware KV-cache
    routing; SGLang's router and llm-d's prefix scorer share the idea).

    Each candidate scores ``hit / prompt - beta x (load - mean load) / max(1, mean load)``,
    where ``hit`` is the prompt tokens its prefix cache already holds for the request
    (``KVCache.match``), ``load`` its requests queued + running, and the highest score
    wins (``beta = 1``): a warm replica keeps a conversation unless it is much busier than
    the rest. Without prefix caching every hit is 0 and it balances load alone.
    """

    name = "prefix_aware"
    beta = 1.0

    def pick(self, seq: Sequence, candidates: list, now: float):
        if len(candidates) == 1:
            return candidates[0]
        loads = [r.policy.num_waiting + num_running(r.policy) for r in candidates]
        mean = sum(loads) / len(loads)
        prompt = max(1, seq.num_tokens)
        best, best_score = candidates[0], float("-inf")
        for replica, load in zip(candidates, loads):
            hit = replica.policy.kv.match(seq)[0]
            score = hit / prompt - self.beta * (load - mean) / max(1.0, mean)
            if score > best_score:  # strictly better: ties stay with the lower index
                best, best_score = replica, score
        return best


class LatencyAwareRouter(Router):
    """Lowest predicted TTFT, priced by each replica's own cost model.

    llm-d's predicted-latency scheduling routes on a TTFT predicted per pod
    (there by an online-trained model, which assumes identical pods); Dynamo's
    KV router weighs the prefill work ahead of a request. Here the prediction is
    the cost model's, so replicas of different GPUs, TP degrees and policies compare.

    Estimate = what is left of the step in flight + the prefill tokens ahead of
    the request (queued requests and prefills under way) run in steps of the
    replica's token budget + this request's prompt in a step of its own. Each
    price is ``backend.step_cost`` of a one-slot prefill-only plan, cached by
    token count. Decodes that share or interleave with those steps, and a
    padded batch's remaining decodes, are not counted.
    """

    name = "latency_aware"
    needs_step_clock = True

    def __init__(self, replicas: list):
        super().__init__(replicas)
        self.prices: dict[int, dict[int, float]] = {}  # id(backend) -> {tokens: seconds}

    def prefill_seconds(self, backend, num_tokens: int) -> float:
        """Seconds of a step prefilling ``num_tokens`` tokens of one request from an empty cache."""
        if num_tokens <= 0:
            return 0.0
        cache = self.prices.setdefault(id(backend), {})
        seconds = cache.get(num_tokens)
        if seconds is None:
            plan = StepPlan(request_ids=[0], num_new_tokens=[num_tokens], num_context_tokens=[0])
            seconds = cache[num_tokens] = backend.step_cost(plan).seconds
        return seconds

    def score(self, replica, seq: Sequence, now: float) -> float:
        policy, clock = replica.policy, replica.backend
        backend = clock.inner  # price through the unwrapped model: the clock must not move
        ahead = sum(s.num_remaining for s in policy.waiting)
        ahead += sum(s.num_remaining for s in getattr(policy, "running", ()) if not s.is_decoding)
        budget = getattr(policy.params, "max_num_batched_tokens", None) or DEFAULT_TOKEN_BUDGET
        full, rest = divmod(ahead, budget)
        drain = full * self.prefill_seconds(backend, budget) + self.prefill_seconds(backend, rest)
        return max(0.0, clock.busy_until - now) + drain + self.prefill_seconds(backend, seq.num_remaining)


class StepClock:
    """Wraps a replica's backend to remember when the step it last priced ends.

    The engine prices a step and then waits exactly that long, so the end of
    the step in flight is "now + its price" (latency-aware routing needs what
    is left of it). Everything else is passed through unchanged.
    """

    def __init__(self, backend, env):
        self.inner = backend
        self.env = env
        self.busy_until = 0.0
        for verb in ("decode_cost", "padded_decode_cost", "mixed_cost"):  # the engine's fast path, when offered
            if hasattr(backend, verb):
                setattr(self, verb, self._timed(getattr(backend, verb)))
        # A whole padded run priced before its steps would leave the clock behind: the fast
        # path prices such runs step by step here (padded_decode_cost, timed above).
        self.padded_decode_costs = None

    def _timed(self, price):
        def timed(*args):
            cost = price(*args)
            self.busy_until = self.env.now + cost.seconds
            return cost
        return timed

    def step_cost(self, plan: StepPlan):
        """The wrapped backend's price; the step ends that long from now."""
        cost = self.inner.step_cost(plan)
        self.busy_until = self.env.now + cost.seconds
        return cost

    def __getattr__(self, name):
        if name == "inner":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


ROUTER_CLASSES: dict[str, type[Router]] = {
    cls.name: cls for cls in (RoundRobinRouter, LeastOutstandingRouter, LeastKVRouter, LatencyAwareRouter,
                              PrefixAwareRouter)
}
ROUTERS = tuple(ROUTER_CLASSES)


def make_router(name: str, replicas: list) -> Router:
    """The router ``name`` (checked when the scenario was loaded) over ``replicas``."""
    return ROUTER_CLASSES[name](replicas)


def check_router(name: str, where: str) -> None:
    """A user error naming ``where`` unless ``name`` is a router."""
    if name not in ROUTER_CLASSES:
        raise SimbatchError(where, f"unknown router {name!r}; allowed: {', '.join(ROUTERS)}")
