"""Pipeline parallelism: a replica's layers split into stages, each on its own GPUs.

A step's batch is cut into ``m`` equal micro-batches that flow through the
``p`` stages one after another; stage ``s`` takes ``t_s`` per micro-batch (its
layers' kernels, priced by the roofline for a model of that many layers, plus
sending the activations to the next stage). Two schedules:

- ``drain`` (GPipe, Huang et al. 2019): every step fills and empties the
  pipeline, so it takes ``sum(t_s) + (m - 1) max(t_s)``. For equal stages
  that is ``(m + p - 1) t`` against ``m t`` of work per stage: the textbook
  bubble fraction ``(p - 1) / (m + p - 1)``.
- ``overlap`` (vLLM's virtual engines, TensorRT-LLM's in-flight micro-batches):
  the next step's micro-batches enter while this step's drain, so in steady
  state a step takes ``max(m max(t_s), sum(t_s))``: the slowest stage sets the
  pace (stage imbalance remains), and a step is never shorter than one
  micro-batch's trip through every stage.

Each micro-batch re-reads its stage's weights, so in memory-bound decode more
micro-batches cost more; the CPU-side overhead is paid once per step. Layers
are split as vLLM's ``get_pp_indices`` does (vllm/distributed/utils.py): evenly,
the remainder one each to the stages before the last, counting back from it
(the last stage holds the LM head).
"""

from __future__ import annotations

from dataclasses import replace

from simbatch.costmodel.base import AttnWork, StepCost, StepWork
from simbatch.costmodel.roofline import PricedByWork, RooflineCostModel
from simbatch.errors import SimbatchError
from simbatch.hardware import GPUSpec
from simbatch.models import ModelSpec

SCHEDULES = ("overlap", "drain")


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
                 micro_batches: int = 0, schedule: str = "overlap", link=None, **params: float):
        if schedule not in SCHEDULES:
            raise SimbatchError("cluster.pipeline_schedule", f"unknown schedule {schedule!r}; "
                                                             f"allowed: {', '.join(SCHEDULES)}")
        if stages > model.num_layers:
            raise SimbatchError("cluster.pipeline_parallel", f"{stages} stages for {model.name}'s "
                                                             f"{model.num_layers} layers")
        self.model, self.gpu, self.tensor_parallel = model, gpu, tensor_parallel
        self.stages, self.micro_batches = stages, micro_batches or stages
        self.schedule = schedule
        self.whole = RooflineCostModel(model, gpu, tensor_parallel, **params)  # overhead, counts
        kernels_only = {**params, "step_overhead_s": 0.0, "per_seq_overhead_s": 0.0, "per_token_overhead_s": 0.0}
        self.layers = stage_layers(model.num_layers, stages)
        self._stage = [RooflineCostModel(replace(model, name=f"{model.name}-stage{s}", num_layers=n), gpu,
                                         tensor_parallel, **kernels_only) for s, n in enumerate(self.layers)]
        # Activations handed to the next stage: hidden states and the residual per token, each
        # GPU of the stage sending its 1/tp slice to its peer over its own link (``link``: a
        # simbatch.links.Link, e.g. InfiniBand between nodes; None: the GPU's own).
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
        m, slowest, trip = self.micro_batches, max(times), sum(times)
        span = trip + (m - 1) * slowest if self.schedule == "drain" else max(m * slowest, trip)
        busy = m * trip / self.stages  # the stages' mean busy time
        overhead = self.whole.overhead(work, live)
        flops, nbytes = self.whole.counts(kept)
        bd = {"stages": busy, "bubble": span - busy, "overhead": overhead}
        return StepCost(span + overhead, bd, flops / self.stages, nbytes / self.stages)

    def overhead(self, work: StepWork, live: int) -> float:
        return self.whole.overhead(work, live)


def _scaled(work: StepWork, f: float) -> StepWork:
    """``work`` times ``f`` (one of ``1/f`` equal micro-batches; fractional counts)."""
    tokens, rows, dec, pre = work
    return StepWork((tokens * f, rows * f, AttnWork(v * f for v in dec), AttnWork(v * f for v in pre)))
