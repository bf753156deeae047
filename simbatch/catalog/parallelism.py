"""How a deployment lays a mixture of experts over its GPUs: the parallelism spec beside
:class:`~simbatch.catalog.models.ModelSpec` (issue 34 §6).

A model is what a checkpoint is (layers, widths, experts, formats); whether each routed expert
is held whole on one GPU or sliced over the tensor-parallel group, how tokens reach the
experts, and over how many data-parallel ranks they are spread are the deployment's choice: a
scenario's ``cluster.expert_parallel``, ``cluster.expert_dispatch``,
``cluster.data_parallel_attention``, ``cluster.eplb`` and ``cluster.redundant_experts`` (and a
disaggregated pool's own). Cost models take the model and this layout side by side, as they
take the tensor-parallel degree.
"""

from __future__ import annotations

from dataclasses import dataclass

from simbatch.catalog.models import ModelSpec

EXPERT_DISPATCHES = ("allreduce", "all2all")  # how an MoE layer reaches experts held whole


@dataclass(frozen=True)
class ExpertLayout:
    """A replica's expert layout (docs/cost_models.md, "Expert parallelism").

    ``expert_parallel`` holds each routed expert whole on one GPU of the tensor-parallel group
    instead of slicing every expert over it, and ``expert_dispatch`` says how the MoE layer
    communicates then (``allreduce`` or ``all2all``). ``attention_data_parallel`` is the number
    of data-parallel ranks (a scenario's replicas) whose GPUs together form the expert-parallel
    group under data-parallel attention (DeepSeek's layout: each rank runs attention and the
    dense layers on its own requests, the routed experts are spread over all the ranks' GPUs);
    1 otherwise. ``eplb`` is DeepSeek's expert-parallel load balancer with ``redundant_experts``
    extra expert slots over the group (:mod:`simbatch.costmodel.routing`).
    """

    expert_parallel: bool = False
    expert_dispatch: str = "allreduce"
    attention_data_parallel: int = 1
    eplb: bool = False
    redundant_experts: int = 0

    def held_weight_bytes(self, model: ModelSpec) -> float:
        """Bytes of ``model``'s weights one replica (all its GPUs together) holds: all of them,
        except under data-parallel attention, where a replica is one of
        ``attention_data_parallel`` ranks that share the routed experts (EPLB's copies too)."""
        total = model.weight_bytes
        if self.attention_data_parallel == 1 and not self.redundant_experts:
            return total
        routed = model.num_moe_layers * model.num_experts * model.expert_params() * model.weight_bytes_per_param
        held = routed * (model.num_experts + self.redundant_experts) / model.num_experts
        return total - routed + held / self.attention_data_parallel

    def describe(self) -> dict:
        """The fields a cost model's description carries: none for the default layout."""
        if not self.expert_parallel:
            return {}
        out: dict = {"expert_dispatch": self.expert_dispatch}
        if self.attention_data_parallel > 1:
            out["attention_data_parallel"] = self.attention_data_parallel
        if self.eplb:
            out.update(eplb=True, redundant_experts=self.redundant_experts)
        return out


SLICED = ExpertLayout()  # every expert sliced over the tensor-parallel group (and any dense model)
