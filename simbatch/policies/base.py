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
from typing import ClassVar

from simbatch.core.kvcache import KVCache
from simbatch.core.plan import StepPlan
from simbatch.core.sequence import Sequence
from simbatch.core.stop import NONE


class Policy:
    """Base class: holds the waiting queue, the KV cache and a note-taker for the run log."""

    kind: ClassVar[str] = ""
    Params: ClassVar[type]
    # Which steady state steady_decode() promises (see simbatch.engine.fast_forward):
    # "running" (every running request decodes) or "padded_batch" (the batch decodes on).
    steady_kind: ClassVar[str] = ""
    # True when the policy offers schedule_chunks (the fast path's mixed steps).
    mixes_chunks: ClassVar[bool] = False
    # Whether the engine may fast-forward this policy (steady_decode, schedule_chunks,
    # next_plan_reads_running). Never inherited: see __init_subclass__.
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

    def steady_decode(self) -> bool:
        """True when the next plan is "every running request decodes one token" and stays so
        until a request finishes, one arrives or KV blocks run short (the engine then may
        fast-forward those steps). Policies that cannot promise it say False. Asked only
        when the class declares ``fast_path = True``."""
        return False

    def next_plan_reads_running(self) -> bool:
        """False only when the next :meth:`schedule` will not read the running requests'
        counters (the engine then need not settle the ones a steady run advanced lazily)."""
        return True

    def on_step_done(self, plan: StepPlan, finished: list[Sequence], now: float) -> None:
        """Retire finished requests after a step (free their KV as the policy's rules say)."""
        raise NotImplementedError
