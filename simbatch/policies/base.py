"""What every batching policy is: a waiting queue, a KV cache and a ``schedule`` verb.

The engine drives a policy with three calls (nano-vllm's schedule / run /
postprocess): :meth:`Policy.add` when a request arrives, :meth:`Policy.schedule`
for the next step plan, :meth:`Policy.on_step_done` with the requests that
finished. A policy never knows whether its plan is priced by a cost model or
executed on a real model.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import ClassVar, NamedTuple

from simbatch.core.kvcache import KVCache
from simbatch.core.plan import StepPlan
from simbatch.core.sequence import Sequence
from simbatch.core.stop import NONE


class SteadyRun(NamedTuple):
    """What a policy promises of its next steps, from its own admission dry run: the engine's
    fast path (:mod:`simbatch.engine.fast`) then runs them without asking it again.

    Every running request (``kind`` ``"running"``), or every row of a started padded batch
    (``"padded"``), decodes one token a step until a request finishes or KV blocks run short,
    and, when ``ends_on_arrival``, until a request arrives (the queue was empty, so an arrival
    could be admitted; behind a blocked head, arrivals change nothing). ``stop_reason``: why
    admission takes nobody meanwhile (a :mod:`simbatch.core.stop` code, logged with each step).

    ``"mixed"`` (chunked prefill): the next steps are every running decode plus the prefill
    chunks the policy's ``schedule_chunks`` plans for what they leave of the budget, for as
    long as all the decodes fit (the step's chunk planning gives its own stop reason).
    """

    kind: str
    stop_reason: int
    ends_on_arrival: bool


_STEADY: dict[tuple[str, int, bool], SteadyRun] = {}


def steady(kind: str, stop_reason: int, ends_on_arrival: bool) -> SteadyRun:
    """The :class:`SteadyRun` of these fields (one shared instance each: asked at every step
    boundary of a loaded replica, so it is not built anew)."""
    key = (kind, stop_reason, ends_on_arrival)
    run = _STEADY.get(key)
    if run is None:
        run = _STEADY[key] = SteadyRun(kind, stop_reason, ends_on_arrival)
    return run


class Policy:
    """Base class: holds the waiting queue, the KV cache and a note-taker for the run log."""

    kind: ClassVar[str] = ""
    Params: ClassVar[type]
    # Whether the engine may fast-forward this policy (steady_run, and schedule_chunks for
    # the mixed runs it describes; next_plan_reads_running). Never inherited: see __init_subclass__.
    fast_path: ClassVar[bool] = False
    # What an online controller turns on this policy, by controller kind (simbatch.control):
    # {"slo": "max_num_seqs"}. Inherited: a subclass whose Params keep the field is driven
    # alike (the TGI example under the SLO controller); one declares {} to opt out.
    knobs: ClassVar[dict[str, str]] = {}
    # Why the latest admission (or its dry run) stopped taking requests: a code of
    # simbatch.core.stop, logged with each step (steps.csv's stop_reason). NONE: no reason given.
    stop_reason: int = NONE

    def __init_subclass__(cls, **kwargs):
        # A fast-path promise covers the scheduling code written beside it. A subclass
        # that changes any rule (schedule, admission, add, ...) would inherit a promise
        # its own code may break, and the fast path would silently diverge from the
        # step-by-step engine. So a class is fast-forwarded only when its own body
        # says ``fast_path = True``; anything else runs step by step, which is always
        # correct (docs/policies.md, "Writing a policy").
        super().__init_subclass__(**kwargs)
        if "fast_path" not in cls.__dict__:
            cls.fast_path = False

    def __init__(self, params, kv: KVCache, note: Callable[[str], None] = lambda m: None):
        self.params = params
        self.kv = kv
        self.note = note
        self.waiting: deque[Sequence] = deque()

    @property
    def num_waiting(self) -> int:
        """Requests queued and not yet running."""
        return len(self.waiting)

    def add(self, seq: Sequence, now: float) -> None:
        """A request arrives (FCFS queue)."""
        self.waiting.append(seq)

    def max_request_tokens(self) -> int | None:
        """Longest prompt + output this policy can ever serve (None: no limit)."""
        return None

    def schedule(self, now: float) -> StepPlan | None:
        """The next step's plan, or None to idle until an arrival or :meth:`wake_at`."""
        raise NotImplementedError

    def wake_at(self) -> float | None:
        """When idle, the time a timer should wake the engine (None: only an arrival)."""
        return None

    def steady_run(self) -> SteadyRun | None:
        """The steady run the next steps are (:class:`SteadyRun`: the engine then may
        fast-forward them), or None when the policy cannot promise one. Asked only when the
        class declares ``fast_path = True``."""
        return None

    def next_plan_reads_running(self) -> bool:
        """False only when the next :meth:`schedule` will not read the running requests'
        counters (the engine then need not settle the ones a steady run advanced lazily)."""
        return True

    def on_step_done(self, plan: StepPlan, finished: list[Sequence], now: float) -> None:
        """Retire finished requests after a step (free their KV as the policy's rules say)."""
        raise NotImplementedError
