"""The torch backend: executes each step plan on a real model and returns the measured time.

It has the cost models' interface (``step_cost(plan) -> StepCost``,
``describe()``), so the engine's :class:`~simbatch.engine.replica.Replica`
and every policy drive it unchanged. One call is one engine step:

1. *overhead*: the engine's own time since the previous step ended (policy
   scheduling, postprocessing, event handling) plus this backend's input
   preparation (block allocation, index tensors) and bookkeeping after the
   pass; in a wall-clock run "since the previous step ended" is since the
   simulation clock's present moment (:meth:`TorchBackend.bind_clock`), which
   also covers waking up from idle;
2. *forward*: one forward pass over every row of the plan, padding included,
   bracketed by device synchronisation (the sampled ids are read back, as an
   engine must).

``StepCost.seconds`` is their sum, so a wall-clock engine that advances its
clock by it stays in step with the wall clock. Every step's plan and times are
kept in :attr:`TorchBackend.steps` so they can be paired with predictions.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from simbatch.backends.device import (
    DTYPES,
    available_cores,
    default_dtype,
    device_facts,
    resolve_device,
    synchronize,
)
from simbatch.backends.torch_inputs import StepInputs, prepare
from simbatch.backends.torch_kv import PagedKVPool
from simbatch.backends.torch_model import LlamaModel
from simbatch.catalog.models import ModelSpec, get_model
from simbatch.core.plan import StepPlan
from simbatch.costmodel.base import StepCost
from simbatch.errors import SimbatchError

WARMUP_RID = 1 << 40  # request ids the warm-up uses (never a workload's)
REPLAY_RID = 1 << 41  # and those a replay's stand-in requests use
PROBE_RID = 1 << 42  # and the machine-speed probe's (simbatch.calibrate.probe)


@dataclass(slots=True)
class StepRecord:
    """One executed step: its plan and where its wall time went (seconds)."""

    plan: StepPlan
    start_s: float       # monotonic time the step's overhead began
    schedule_s: float    # engine time before the backend was called (since the previous step / wake-up)
    prepare_s: float     # plan -> index tensors, KV blocks
    forward_s: float     # the forward pass, synchronised
    post_s: float        # bookkeeping after the pass
    num_rows: int        # tokens the pass computed (padding included)

    @property
    def seconds(self) -> float:
        """The whole step: overhead + forward."""
        return self.schedule_s + self.prepare_s + self.forward_s + self.post_s

    @property
    def overhead_s(self) -> float:
        """Everything but the forward pass."""
        return self.schedule_s + self.prepare_s + self.post_s


class TorchBackend:
    """Runs step plans on a random-weight Llama model with a paged KV cache (module docstring)."""

    name = "torch"

    def __init__(self, model: ModelSpec | str | dict, *, num_blocks: int, block_size: int = 16,
                 device: str = "cpu", dtype: str | None = None, seed: int = 0, threads: int | None = None,
                 keep_hidden: bool = False):
        self.spec = get_model(model, "model")
        if self.spec.special_features:
            raise SimbatchError("model", f"the torch backend runs dense 16-bit Llama-style models; {self.spec.name} "
                                         f"has {' and '.join(self.spec.special_features)}")
        self.device = resolve_device(device)
        self.dtype_name = dtype or default_dtype(self.device.type)
        self.threads = threads or available_cores()
        torch.set_num_threads(self.threads)
        self.model = LlamaModel(self.spec, self.device, DTYPES[self.dtype_name], seed)
        self.pool = PagedKVPool(self.spec, num_blocks, block_size, self.device, DTYPES[self.dtype_name])
        self.seed = seed
        self.keep_hidden = keep_hidden
        self.steps: list[StepRecord] = []
        self.last_hidden: torch.Tensor | None = None  # with keep_hidden: the last step's hidden states
        self.last_inputs: StepInputs | list[StepInputs] | None = None  # a list with two streams
        self._clock: Callable[[], float] | None = None
        self._last_end: float | None = None
        self._owners: dict[int, int] = {}  # padded batches: slot -> request that held it
        self._facts = device_facts(self.device, self.threads)

    def bind_clock(self, wall_of_now: Callable[[], float]) -> None:
        """Measure each step's overhead from ``wall_of_now()`` (the monotonic time of the
        engine clock's present), instead of from the previous step's end."""
        self._clock = wall_of_now

    def release(self, rid: int) -> None:
        """Drop request ``rid``'s KV cache (the policy freed it: finished or preempted)."""
        self.pool.release(rid)

    def reset(self) -> None:
        """Forget every request and step (between runs that share the weights)."""
        for rid in list(self.pool.tables):
            self.pool.release(rid)
        self.steps.clear()
        self._clock = None
        self._last_end = None
        self._owners = {}

    @property
    def facts(self) -> dict:
        """The machine this backend runs on (``profile.yaml``'s ``device:`` mapping; simbatch.catalog.machine)."""
        return dict(self._facts)

    def describe(self) -> dict:
        """What ran: kind, device, dtype, model, KV pool, threads, seed."""
        return {"kind": "torch", "source": f"measured:{self._facts['name']}", "device": self._facts["kind"],
                "dtype": self.dtype_name, "model": self.spec.name, "seed": self.seed,
                "threads": self.threads, "kv_blocks": self.pool.num_blocks,
                "kv_block_size": self.pool.block_size, "torch": str(torch.__version__)}

    def step_cost(self, plan: StepPlan) -> StepCost:
        """Execute ``plan`` (one forward pass) and return its measured wall time."""
        enter = time.monotonic()
        base = self._clock() if self._clock is not None else self._last_end
        base = enter if base is None else min(base, enter)
        self._check_and_reset(plan)
        parts = plan.micro_batches()
        owners = self._row_owners(plan)
        inputs = [prepare(p, self.pool, self.spec.vocab_size, self.model.max_position, self.device,
                          owners if p is plan else None)
                  for p in parts]
        rows = sum(i.num_rows for i in inputs)
        if rows != plan.num_batched_tokens:
            raise RuntimeError(f"prepared {rows} rows for a plan of {plan.num_batched_tokens} tokens")
        begin = time.monotonic()
        outs = self._forward(inputs)
        synchronize(self.device)
        for _, sampled in outs:
            sampled.tolist()  # the engine needs the tokens on the host (a sync point on a GPU)
        done = time.monotonic()
        hidden = outs[0][0] if len(outs) == 1 else torch.cat([h for h, _ in outs])
        inputs = inputs[0] if len(inputs) == 1 else inputs
        for rid, new in zip(plan.request_ids, plan.num_new_tokens):
            if rid >= 0:
                self.pool.advance(rid, new)
        if self.keep_hidden:
            self.last_hidden, self.last_inputs = hidden, inputs
        end = time.monotonic()
        record = StepRecord(_copy(plan), base, enter - base, begin - enter, done - begin, end - done, rows)
        self.steps.append(record)
        self._last_end = end
        return StepCost(record.seconds, {"overhead": record.overhead_s, "forward": record.forward_s})

    def replay(self, plan: StepPlan) -> StepRecord:
        """Execute a recorded ``plan`` again and return its record (not kept in :attr:`steps`).

        The plan's requests are long gone, so stand-ins take their places: fresh
        ids whose caches hold the plan's contexts by bookkeeping alone
        (:meth:`PagedKVPool.pretend`), padding-only rows each reading a stand-in's
        cache as they read their finished request's. The work is the plan's, slot
        for slot: how long it takes a second time is the measurement's noise
        (simbatch.validation.noise). Host time counts from this call (no engine ran)."""
        ids = [REPLAY_RID + i for i in range(plan.num_slots)]
        rids = [mine if rid >= 0 else -1 for mine, rid in zip(ids, plan.request_ids)]
        clock, self._clock = self._clock, None
        try:
            for rid, ctx in zip(ids, plan.num_context_tokens):
                self.pool.pretend(rid, ctx)
            self._owners = dict(enumerate(ids)) if plan.num_pad_tokens is not None else {}
            self._last_end = None
            self.step_cost(dataclasses.replace(_copy(plan), request_ids=rids))
            return self.steps.pop()
        finally:
            for rid in ids:
                self.pool.release(rid)
            self._owners = {}
            self._clock, self._last_end = clock, None

    def _row_owners(self, plan: StepPlan) -> dict[int, int] | None:
        """Slot -> the request that last held it, for a padded batch's padding-only slots
        (a padded batch keeps its rows in place while they finish)."""
        if plan.num_pad_tokens is None:
            self._owners = {}
            return None
        for i, rid in enumerate(plan.request_ids):
            if rid >= 0:
                self._owners[i] = rid
        return self._owners

    def _forward(self, inputs: list[StepInputs]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One forward pass per micro-batch: on a GPU each on its own CUDA stream, so the
        memory-bound decodes and the compute-bound chunks run side by side (what the cost
        model's two-stream overlap prices); on a CPU, which has no streams, one after another.
        The micro-batches touch disjoint requests, hence disjoint KV blocks."""
        if len(inputs) == 1 or self.device.type != "cuda":
            return [self.model.forward(i, self.pool) for i in inputs]
        main = torch.cuda.current_stream(self.device)
        streams = [torch.cuda.Stream(self.device) for _ in inputs]
        outs = []
        for stream, step_inputs in zip(streams, inputs):
            stream.wait_stream(main)  # inputs were prepared on the main stream
            with torch.cuda.stream(stream):
                outs.append(self.model.forward(step_inputs, self.pool))
        for stream, (hidden, sampled) in zip(streams, outs):
            main.wait_stream(stream)
            hidden.record_stream(main)
            sampled.record_stream(main)
        return outs

    def _check_and_reset(self, plan: StepPlan) -> None:
        """Recompute after preemption (context 0 again) drops the old cache; the plan's
        contexts must match what is cached (a padded batch may plan more: its padding)."""
        padded = plan.num_pad_tokens is not None
        pads = plan.num_pad_tokens or [0] * plan.num_slots
        for i, (rid, new, ctx) in enumerate(zip(plan.request_ids, plan.num_new_tokens,
                                                plan.num_context_tokens)):
            if i < plan.num_decode_slots and new + pads[i] != 1:
                raise RuntimeError(f"decode slot {i} computes {new + pads[i]} tokens, expected 1")
            if rid < 0:
                continue
            cached = self.pool.length(rid)
            if ctx == 0 and cached:
                self.pool.release(rid)
                cached = 0
            if ctx != cached and not (padded and ctx > cached):
                raise RuntimeError(f"request {rid}: plan context {ctx}, but {cached} tokens cached")

    def warmup(self, num_tokens: int = 64) -> None:
        """A few untimed steps (a prompt, a chunk over it, decodes) so first-call costs
        (allocator, kernel selection, thread pools) stay out of the measured run."""
        a, b = WARMUP_RID, WARMUP_RID + 1
        n = max(2, min(num_tokens, self.model.max_position // 2,
                       self.pool.num_blocks * self.pool.block_size // 3 - 2))
        plans = [StepPlan([a], [n], [0]), StepPlan([b], [n // 2], [0]),
                 StepPlan([a, b], [1, n // 2], [n, n // 2], num_decode_slots=1),
                 StepPlan([a, b], [1, 1], [n + 1, n], num_decode_slots=2)]
        for plan in plans:
            self.step_cost(plan)
        self.release(a)
        self.release(b)
        self.steps.clear()
        self._last_end = None


def _copy(plan: StepPlan) -> StepPlan:
    """A private copy (policies may reuse a plan's lists); every other field kept as is."""
    pad = list(plan.num_pad_tokens) if plan.num_pad_tokens is not None else None
    return dataclasses.replace(plan, request_ids=list(plan.request_ids), num_new_tokens=list(plan.num_new_tokens),
                               num_context_tokens=list(plan.num_context_tokens), num_pad_tokens=pad)
