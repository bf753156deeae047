"""Mixtures of experts in the ``profile`` cost model: the MoE layers priced from a dense
profile's measured MLP GEMMs.

A profile measures dense linear layers: each GEMM's time against the tokens it
computes, at one shape. A routed expert is an MLP (gate/up, then down) of the
expert's width, computing only the rows routed to it, so an MoE layer costs what the
profile's ``mlp_up`` and ``mlp_down`` curves predict **at each expert's row count**:

* the routing (:class:`simbatch.costmodel.routing.ExpertLoad`, the roofline's own) gives,
  for a step of ``T`` tokens, the expected distinct experts ``D`` touched and the rows
  ``R`` (token-expert pairs) computed on the GPU that waits longest (``R = kT`` and ``D``
  of all the experts without expert parallelism; the busiest GPU's under it, EPLB's
  placement and ``routing_skew`` included);
* each touched expert computes ``R / D`` rows, priced one by one from the dense curves:
  ``D x slices x (up(R/D) + down(R/D))`` per MoE layer.

The profile must have measured an MLP of the routed experts' width (its
``intermediate_size`` is the model's ``moe_intermediate_size``; profile_fit checks it), so
an expert's GEMM is a measured shape: sliced over the tensor-parallel group as the profile
was measured (``slices`` 1), or, under expert parallelism, whole on one GPU, i.e. ``tp``
of the measured slices one after another (``slices = tp``). Other MLPs of the model (a
shared expert, leading dense layers) run over every token at width ``w``: the measured
curves at the step's tokens times ``w / expert width`` (a whole number for every preset).
The router (``hidden x experts``, too small for any profile to hold) falls back to the
roofline re-targeted to the device, as every unmeasured part does.

Assumptions (docs/cost_models.md): the fused / grouped MoE kernel's efficiency is not
measured, each expert's GEMM is priced as a separate dense GEMM of its rows (its launch
and tail included, so small per-expert batches lean high); rows split evenly over the
touched experts; the activation of a token's ``k`` routed rows is what the profile's
``misc_layer`` measured for one MLP, and the routing glue (top-k, permute, un-permute) is
not priced.
"""

from __future__ import annotations

import dataclasses

from simbatch.catalog.hardware import GPUSpec
from simbatch.catalog.models import ModelSpec
from simbatch.catalog.parallelism import ExpertLayout
from simbatch.costmodel.fit import TokenCurve
from simbatch.costmodel.routing import ExpertLoad

# The dense model a profile for a mixture of experts measured: these fields off.
_MOE_OFF = {"num_experts": 0, "experts_per_token": 0, "moe_intermediate_size": 0,
            "shared_expert_intermediate_size": 0, "num_dense_layers": 0, "routing_skew": 0.0}


def measured_twin(model: ModelSpec) -> ModelSpec:
    """The dense model whose layers a profile for ``model`` measures: ``model`` itself when
    dense; for a mixture of experts the same attention with one MLP of the routed experts'
    width in every layer (what fits and fallbacks are computed on)."""
    if not model.is_moe:
        return model
    return dataclasses.replace(model, intermediate_size=model.moe_intermediate_size, **_MOE_OFF)


def mlp_layer_weight(model: ModelSpec) -> float:
    """How many measured MLPs (of the routed experts' width, over every token) one step runs
    outside the routed experts, all layers: the leading dense layers' and the shared experts'
    MLPs, each as its width over the experts'."""
    width = model.moe_intermediate_size
    return (model.num_dense_layers * model.intermediate_size / width
            + model.num_moe_layers * model.shared_expert_intermediate_size / width)


class ProfileExperts:
    """Seconds of a step's routed experts and routers, from the measured MLP curves (module
    docstring); built by :class:`simbatch.costmodel.profile.ProfileCostModel`."""

    __slots__ = ("up", "down", "layers", "slices", "dp", "load", "_router_tok", "_router_fixed")

    def __init__(self, up: TokenCurve, down: TokenCurve, model: ModelSpec, layout: ExpertLayout, tp: int, ep: int,
                 gpu: GPUSpec, efficiency: dict[str, float]):
        self.up, self.down = up, down
        self.layers = model.num_moe_layers
        # Expert parallelism keeps each expert whole on one GPU: tp measured slices of it.
        self.slices = tp if layout.expert_parallel else 1
        self.dp = layout.attention_data_parallel  # the EP group's tokens: every data-parallel rank's
        self.load = ExpertLoad(model.num_experts, model.experts_per_token, ep, model.routing_skew,
                               layout.eplb, layout.redundant_experts)
        # Router GEMM (hidden x experts, replicated): the roofline's counting at the re-targeted
        # efficiencies. Compute: 2 h E FLOPs a token; memory: its weights, each token's row in and out.
        h, e, dt = model.hidden_size, model.num_experts, model.dtype_bytes
        inv_flops = 1.0 / (gpu.peak_flops * efficiency["compute_eff"])
        inv_bw = 1.0 / (gpu.hbm_bandwidth * efficiency["bw_eff"])
        self._router_tok = (2.0 * h * e * inv_flops, (h + e) * dt * inv_bw)
        self._router_fixed = h * e * dt * inv_bw

    def routed(self, tokens: int) -> float:
        """Seconds of all MoE layers' routed experts for a step of ``tokens`` tokens, on the GPU
        that waits longest: each touched expert's GEMMs at its share of the rows."""
        if not tokens:
            return 0.0
        rows, touched = self.load.busiest(tokens * self.dp)
        per = rows / touched
        return self.layers * touched * self.slices * (self.up(per) + self.down(per))

    def router(self, tokens: int) -> float:
        """Seconds of all MoE layers' router GEMMs over ``tokens`` tokens (roofline fallback)."""
        if not tokens:
            return 0.0
        c, m = self._router_tok
        return self.layers * max(tokens * c, self._router_fixed + tokens * m)

    def describe(self) -> dict:
        """How the experts are priced, for ``summary.json``."""
        return {"routed_experts": "mlp_up + mlp_down at each touched expert's rows",
                "expert_slices": self.slices}
