"""The backend interface: one function from a step plan to seconds, with a breakdown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from simbatch.plan import StepPlan


@dataclass(slots=True)
class StepCost:
    """The price of one step.

    ``seconds`` is the step's wall time; ``breakdown`` splits it by part
    (e.g. ``linear``, ``attn_prefill``, ``attn_decode``, ``lm_head``,
    ``allreduce``, ``overhead``), summing to ``seconds``. ``useful_flops`` and
    ``useful_bytes`` count only work on kept tokens (padding excluded), per
    GPU, for MFU/MBU.
    """

    seconds: float
    breakdown: dict[str, float] = field(default_factory=dict)
    useful_flops: float = 0.0
    useful_bytes: float = 0.0


class CostModel(Protocol):
    """Anything that prices a step plan."""

    name: str

    def step_cost(self, plan: StepPlan) -> StepCost:
        """Seconds (and breakdown) for one engine step executing ``plan``."""
        ...

    def describe(self) -> dict:
        """What this cost model is, for ``summary.json`` (``kind``, ``source``, parameters)."""
        ...


def chunked_prefill_seconds(cost_model: CostModel, length: int, chunk: int) -> float:
    """Seconds to prefill a ``length``-token prompt alone in chunks of ``chunk`` tokens, one
    step per chunk, each over the KV of the chunks before it (Sarathi-Serve's Figure 9 setup)."""
    total, done = 0.0, 0
    while done < length:
        c = min(chunk, length - done)
        total += cost_model.step_cost(StepPlan(request_ids=[0], num_new_tokens=[c],
                                               num_context_tokens=[done], num_decode_slots=0)).seconds
        done += c
    return total
