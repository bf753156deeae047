"""The order of the waiting queue, apart from admission (SGLang's ``SchedulePolicy``).

An iteration-level policy asks its :class:`QueueOrder` to sort the queue right
before it admits from the front, then admits exactly as under FCFS (no skipping
past a head that does not fit). Orders (``policy.queue_order``):

- ``fcfs`` (default): arrival order; a preempted request goes back to the *front*
  (vLLM's and nano-vllm's idiom). The queue is never re-sorted.
- ``spf``: shortest prompt first.
- ``sjf``: shortest job first, job = prompt + output tokens. The output length is the
  trace's, i.e. a perfect predictor: an upper bound on what a learned predictor gives.
- ``lpm``: longest cached prefix first (SGLang's ``lpm``), only with prefix caching;
  with more than ``lpm_max_queue`` (128, SGLang's constant) requests queued, matching
  every one is too costly for a real scheduler and the order falls back to FCFS.
- ``priority``: lower ``priority`` value first (vLLM's convention), FCFS within a class.

Ties (and ``length_buckets``, which make ``spf``/``sjf`` compare bucket numbers,
FCFS within a bucket) fall back to arrival time, then request id, so runs are
deterministic. Under every order but ``fcfs`` a preempted request is sorted like
the others by its original arrival time (no special place at the front), as in
vLLM's priority queue and SGLang's re-sorted waiting queue. ``max_wait_s`` bounds
starvation: a request that has waited that long goes before every younger one,
FCFS among such aged requests.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque

from simbatch.core.params import require

QUEUE_ORDERS = ("fcfs", "spf", "sjf", "lpm", "priority")


def check_queue_params(p) -> None:
    """``__post_init__`` checks of the queue knobs shared by the iteration-level policies."""
    require(p.queue_order in QUEUE_ORDERS, "queue_order",
            f"unknown order {p.queue_order!r}; allowed: {', '.join(QUEUE_ORDERS)}")
    require(p.max_wait_s is None or p.max_wait_s > 0, "max_wait_s", "must be > 0 (or null: no age bound)")
    require(not p.preempt_lower_priority or p.queue_order == "priority", "preempt_lower_priority",
            "needs queue_order: priority")
    require(all(b >= 1 for b in p.length_buckets), "length_buckets", "every bound must be >= 1")
    require(list(p.length_buckets) == sorted(set(p.length_buckets)), "length_buckets",
            "must be strictly increasing")
    require(p.lpm_max_queue >= 1, "lpm_max_queue", "must be >= 1")


class QueueOrder:
    """Sorts a waiting queue by ``policy.queue_order`` (module docstring)."""

    def __init__(self, params, kv, note=lambda m: None):
        self.kind = params.queue_order
        self.is_fcfs = self.kind == "fcfs"
        self.max_wait_s = None if self.is_fcfs else params.max_wait_s  # FCFS never starves anyone
        self.buckets = list(params.length_buckets)
        self.lpm_max_queue = params.lpm_max_queue
        self.kv = kv
        # Orders whose keys never change only need a sort after the queue gained a request.
        self.is_static = self.kind in ("spf", "sjf", "priority") and self.max_wait_s is None
        self.dirty = False  # set by the policy when a request joins the queue
        if self.kind == "lpm" and not kv.prefix_caching:
            note("queue_order lpm without kv_cache.prefix_caching: no prefix is ever cached, "
                 "so the queue is served FCFS by arrival (SGLang does the same)")

    def sort(self, waiting: deque, now: float | None) -> deque:
        """``waiting`` in this order (the same deque when nothing can have changed)."""
        if self.is_fcfs or len(waiting) < 2 or (self.is_static and not self.dirty):
            self.dirty = False
            return waiting
        self.dirty = False
        return deque(sorted(waiting, key=self.key(now, len(waiting))))

    def key(self, now: float | None, size: int):
        """The sort key for a queue of ``size`` requests at time ``now``."""
        base = self.base_key(size)
        if self.max_wait_s is None:
            return base
        cutoff = now - self.max_wait_s  # arrived at or before: aged
        return lambda s: (0, s.arrival_s, s.id) if s.arrival_s <= cutoff else (1, *base(s))

    def base_key(self, size: int):
        """The order's own key, before the age bound."""
        kind, bucket = self.kind, self.bucket
        if kind == "spf":
            return lambda s: (bucket(s.prompt_tokens), s.arrival_s, s.id)
        if kind == "sjf":
            return lambda s: (bucket(s.prompt_tokens + s.output_tokens), s.arrival_s, s.id)
        if kind == "priority":
            return lambda s: (s.priority, s.arrival_s, s.id)
        if size > self.lpm_max_queue:  # lpm on a long queue: FCFS (SGLang)
            return lambda s: (s.arrival_s, s.id)
        match = self.kv.match
        return lambda s: (-match(s)[0], s.arrival_s, s.id)

    def bucket(self, tokens: int) -> int:
        """``tokens`` itself, or the index of the first ``length_buckets`` bound >= it."""
        return bisect_left(self.buckets, tokens) if self.buckets else tokens
