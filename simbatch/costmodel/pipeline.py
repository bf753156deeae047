"""Pipeline parallelism: a replica's layers split into stages, each on its own GPUs.

A step's batch is cut into ``m`` equal micro-batches that flow through the
``p`` stages one after another; stage ``s`` takes ``t_s`` per micro-batch (its
layers' kernels, priced by the roofline for a model of that many layers, plus
sending the activations to the next stage). Three schedules:

- ``drain`` (GPipe, Huang et al. 2019): every step fills and empties the
  pipeline, so it takes ``sum(t_s) + (m - 1) max(t_s)``. For equal stages
  that is ``(m + p - 1) t`` against ``m t`` of work per stage: the textbook
  bubble fraction ``(p - 1) / (m + p - 1)``.
- ``overlap`` (vLLM's virtual engines, TensorRT-LLM's in-flight micro-batches):
  the next step's micro-batches enter while this step's drain, so in steady
  state a step takes ``max(m max(t_s), sum(t_s))``: the slowest stage sets the
  pace (stage imbalance remains), and a step is never shorter than one
  micro-batch's trip through every stage.
- ``round_robin`` (DistServe's decode instance): as ``overlap``, but each
  micro-batch is an engine step of its own, and its CPU-side overhead (the
  step's share of the engine's per-step, per-sequence and per-token time)
  runs ahead of its kernels on the first stage, where the next micro-batch
  cannot use the GPU meanwhile: ``t_0`` gains ``o = overhead(work / m)``, so a
  step of equal stages takes ``m (t + o)``, the engine's fixed per-step time
  ``m`` times over (see :func:`round_robin_stages` for the source).

Each micro-batch re-reads its stage's weights, so in memory-bound decode more
micro-batches cost more; under ``overlap`` and ``drain`` the CPU-side overhead
is paid once per step, in series with the pipeline. Layers
are split as vLLM's ``get_pp_indices`` does (vllm/distributed/utils.py): evenly,
the remainder one each to the stages before the last, counting back from it
(the last stage holds the LM head).
"""

from __future__ import annotations

from dataclasses import replace

from simbatch.catalog.hardware import GPUSpec
from simbatch.catalog.models import ModelSpec
from simbatch.catalog.parallelism import SLICED, ExpertLayout
from simbatch.costmodel.base import AttnWork, StepCost, StepWork
from simbatch.costmodel.roofline import RooflineCostModel
from simbatch.costmodel.work import PricedByWork
from simbatch.errors import SimbatchError

SCHEDULES = ("overlap", "drain", "round_robin")


def stage_layers(num_layers: int, stages: int) -> list[int]:
    """Layers per pipeline stage, as vLLM's ``get_pp_indices`` splits them."""
    parts = [num_layers // stages] * stages
    for i in range(2, num_layers % stages + 2):
        parts[-i] += 1
    return parts


def largest_stage_share(num_layers: int, stages: int) -> float:
    """The share of the model's layers (hence of its weights and each token's KV) that the stage
    with the most layers holds: what binds a pipeline replica's memory (1 without one)."""
    return max(stage_layers(num_layers, stages)) / num_layers


class PipelineCostModel(PricedByWork):
    """Prices a step on a replica of ``stages`` pipeline stages (see the module docstring)."""

    name = "roofline"

    def __init__(self, model: ModelSpec, gpu: GPUSpec, tensor_parallel: int, stages: int,
                 micro_batches: int = 0, schedule: str = "overlap", link=None, *,
                 layout: ExpertLayout = SLICED, **params: float):
        if schedule not in SCHEDULES:
            raise SimbatchError("cluster.pipeline_schedule", f"unknown schedule {schedule!r}; "
                                                             f"allowed: {', '.join(SCHEDULES)}")
        if stages > model.num_layers:
            raise SimbatchError("cluster.pipeline_parallel", f"{stages} stages for {model.name}'s "
                                                             f"{model.num_layers} layers")
        self.model, self.gpu, self.tensor_parallel = model, gpu, tensor_parallel
        self.stages, self.micro_batches = stages, micro_batches or stages
        self.schedule = schedule
        if params.get("launch_floor_s"):
            raise SimbatchError("engine.launch_s", "a launch floor is not priced for pipeline-parallel "
                                                   "replicas (cluster.pipeline_parallel > 1)")
        self.whole = RooflineCostModel(model, gpu, tensor_parallel, layout=layout, **params)  # overhead, counts
        kernels_only = {**params, "step_overhead_s": 0.0, "per_seq_overhead_s": 0.0, "per_token_overhead_s": 0.0}
        self.layers = stage_layers(model.num_layers, stages)
        self._stage = [RooflineCostModel(replace(model, name=f"{model.name}-stage{s}", num_layers=n), gpu,
                                         tensor_parallel, layout=layout, **kernels_only)
                       for s, n in enumerate(self.layers)]
        # Activations handed to the next stage: hidden states and the residual per token, each
        # GPU of the stage sending its 1/tp slice to its peer over its own link (``link``: a
        # simbatch.catalog.links.Link, e.g. InfiniBand between nodes; None: the GPU's own).
        per_tok = 2 * model.hidden_size * model.dtype_bytes / tensor_parallel
        if link is None:
            self._send_tok = per_tok / (gpu.link_bandwidth * self.whole.params["allreduce_eff"])
            self._send_fixed = gpu.link_latency_s
        else:
            self._send_tok, self._send_fixed = per_tok / link.bandwidth, link.latency_s
        self.link = link

    @property
    def params(self) -> dict:
        return self.whole.params

    def describe(self) -> dict:
        return {**self.whole.describe(), "pipeline_parallel": self.stages, "micro_batches": self.micro_batches,
                "pipeline_schedule": self.schedule, "stage_layers": self.layers,
                "pipeline_link": self.link.describe() if self.link is not None else "gpu"}

    def stage_seconds(self, work: StepWork) -> list[float]:
        """Seconds each stage takes for one micro-batch of ``work`` (activations sent included)."""
        m = self.micro_batches
        mb = _scaled(work, 1.0 / m)
        no_head = StepWork((mb[0], 0, mb[2], mb[3]))  # the LM head runs on the last stage only
        out = []
        for s, stage in enumerate(self._stage):
            last = s == self.stages - 1
            part = mb if last else no_head
            seconds = stage.price(part, part, 0).seconds
            out.append(seconds if last else seconds + mb[0] * self._send_tok + self._send_fixed)
        return out

    def price(self, work: StepWork, kept: StepWork, live: int) -> StepCost:
        times = self.stage_seconds(work)
        if self.schedule == "round_robin":
            return self.round_robin_price(times, work, kept, live)
        m, slowest, trip = self.micro_batches, max(times), sum(times)
        span = trip + (m - 1) * slowest if self.schedule == "drain" else max(m * slowest, trip)
        busy = m * trip / self.stages  # the stages' mean busy time
        overhead = self.whole.overhead(work, live)
        flops, nbytes = self.whole.counts(kept)
        bd = {"stages": busy, "bubble": span - busy, "overhead": overhead}
        return StepCost(span + overhead, bd, flops / self.stages, nbytes / self.stages)

    def round_robin_price(self, kernels: list[float], work: StepWork, kept: StepWork, live: int) -> StepCost:
        """A step under ``round_robin`` from each stage's kernel seconds per micro-batch: each
        micro-batch's engine step (:func:`round_robin_stages`) on the first stage, the
        ``overlap`` span over those times. The breakdown's ``overhead`` is the part of the span
        the stages' mean kernel time leaves, up to the engine steps' own seconds."""
        m = self.micro_batches
        per_step = self.whole.overhead(_scaled(work, 1.0 / m), live / m)  # one micro-batch's engine step
        times = round_robin_stages(kernels, per_step)
        span = max(m * max(times), sum(times))
        busy = m * sum(kernels) / self.stages
        overhead = min(m * per_step, span - busy)
        flops, nbytes = self.whole.counts(kept)
        bd = {"stages": busy, "bubble": span - busy - overhead, "overhead": overhead}
        return StepCost(span, bd, flops / self.stages, nbytes / self.stages)

    def overhead(self, work: StepWork, live: int) -> float:
        return self.whole.overhead(work, live)


def round_robin_stages(kernels: list[float], per_step: float) -> list[float]:
    """Each stage's seconds per micro-batch under ``round_robin``: the first stage's kernels
    follow the micro-batch's own engine step (``per_step`` seconds of CPU-side overhead).

    DistServe's decode instance (LLMServe/DistServe@82831f1) keeps one batch per stage
    (``distserve/decoding_stage_scheduler.py``, ``DecodingStageFCFSScheduler``: "#pp disjoint
    batches", ``get_next_batch`` rotating ``cur_index``), and each ``_step`` of
    ``distserve/single_stage_engine.py`` (``DecodingStageLLMEngine``) runs one of them: the
    scheduler pass, block allocation, a Ray call to every worker of every stage, then the
    returned tokens' detokenisation and callbacks, so a token of every request costs
    ``pp`` engine steps. DistServe's own simulator prices it so: ``simdistserve/base/
    worker.py`` ``do_decode`` adds its Ray overhead (``add_ray_overhead``) to the first
    stage's time for every micro-batch, in series with its kernels, and
    ``simdistserve/estimators/time_estimator.py`` ``get_decode_time`` divides the kernel
    time by ``pp`` with no other pipeline term (``pp_const = 0``). The engine's per-step
    time is simbatch's ``step_overhead_s`` (its per-sequence and per-token terms split with
    the batch).
    """
    return [kernels[0] + per_step, *kernels[1:]]


def _scaled(work: StepWork, f: float) -> StepWork:
    """``work`` times ``f`` (one of ``1/f`` equal micro-batches; fractional counts)."""
    tokens, rows, dec, pre = work
    return StepWork((tokens * f, rows * f, AttnWork(v * f for v in dec), AttnWork(v * f for v in pre)))
