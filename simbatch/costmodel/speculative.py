"""The price of a speculative step: the target's verify pass plus the drafter's passes.

A decode slot that computes ``n > 1`` tokens verifies its last token and
``n - 1`` drafts (:mod:`simbatch.scenario.speculative`); the target cost model prices
that slot as it prices any slot of ``n`` query tokens over its context (the
attention scores every draft, the LM head computes logits for every draft).
Before it, the proposer ran: ``max(n) - 1`` passes of the drafter, pass ``j``
over the requests with more than ``j`` drafts, one token each at context
``c + j``; the first pass also takes the step's prefill chunks, since the
drafter keeps its own KV of every prompt (vLLM's draft and EAGLE proposers
run over all scheduled tokens). Each pass is priced by a roofline of the
drafter on the target's GPU and tensor-parallel degree, with no engine
overhead but ``draft_pass_overhead_s`` (the engine's per-step overhead is the
verify step's, once).
"""

from __future__ import annotations

from simbatch.core.plan import StepPlan
from simbatch.costmodel.base import StepCost
from simbatch.costmodel.roofline import RooflineCostModel


class SpeculativeCostModel:
    """Wraps a target cost model; adds the drafter's passes (``drafter``: a cost model of the
    draft model or EAGLE head, None for n-gram lookup, which spends no GPU time)."""

    def __init__(self, target, drafter: RooflineCostModel | None, describe_spec: dict):
        self.target = target
        self.drafter = drafter
        self.name = getattr(target, "name", "speculative")
        self._spec = describe_spec

    def describe(self) -> dict:
        """The target's description, with the drafter's."""
        out = dict(self.target.describe())
        out["speculative"] = {**self._spec, **({"drafter_cost_model": self.drafter.describe()}
                                               if self.drafter is not None else {})}
        return out

    def step_cost(self, plan: StepPlan) -> StepCost:
        """The verify step's cost, plus the draft passes' seconds as ``breakdown["draft"]``."""
        cost = self.target.step_cost(plan)
        seconds = self.draft_seconds(plan) if self.drafter is not None else 0.0
        if not seconds:
            return cost
        bd = dict(cost.breakdown)
        bd["draft"] = seconds
        return StepCost(cost.seconds + seconds, bd, cost.useful_flops, cost.useful_bytes)

    def draft_seconds(self, plan: StepPlan) -> float:
        """The drafter's passes before the verify step of ``plan`` (module docstring)."""
        d = plan.num_decode_slots
        rids, new, ctx = plan.request_ids[:d], plan.num_new_tokens[:d], plan.num_context_tokens[:d]
        drafting = [(c, n - 1) for r, n, c in zip(rids, new, ctx) if r >= 0 and n > 1]
        chunks = [(r, n, c) for r, n, c in zip(plan.request_ids[d:], plan.num_new_tokens[d:],
                                               plan.num_context_tokens[d:]) if r >= 0 and n > 0]
        total = 0.0
        for j in range(max((k for _, k in drafting), default=1 if chunks else 0)):
            rows = [c + j for c, k in drafting if k > j]
            extra = chunks if j == 0 else []
            total += self.drafter.step_cost(StepPlan(
                request_ids=list(range(len(rows) + len(extra))),
                num_new_tokens=[1] * len(rows) + [n for _, n, _ in extra],
                num_context_tokens=rows + [c for _, _, c in extra],
                num_decode_slots=len(rows))).seconds
        return total


def build_drafter(drafter_spec, gpu, tensor_parallel: int, target_params: dict,
                  pass_overhead_s: float) -> RooflineCostModel | None:
    """A roofline of the drafter (None: n-gram) with the target's efficiencies when the target
    is a roofline (else the defaults) and ``pass_overhead_s`` as its only overhead."""
    if drafter_spec is None:
        return None
    # The target engine's CPU terms are not the drafter's (its launch floor: a pass of its own layers).
    params = {k: v for k, v in target_params.items() if not k.endswith("overhead_s") and k != "launch_floor_s"}
    params.update(step_overhead_s=pass_overhead_s, per_seq_overhead_s=0.0, per_token_overhead_s=0.0)
    return RooflineCostModel(drafter_spec, gpu, tensor_parallel, **params)
