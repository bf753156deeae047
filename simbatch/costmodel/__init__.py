"""Cost models: backends that price a step plan in seconds.

:func:`build_cost_model` turns a scenario's ``cost_model:`` entry
(``{kind: roofline, <parameters>}``) into a :class:`CostModel`. Only the
analytic ``roofline`` kind exists so far; a calibrated ``profile`` kind (fitted
to measured kernel timings) is planned.
"""

from __future__ import annotations

from simbatch.costmodel.base import CostModel, StepCost
from simbatch.costmodel.roofline import RooflineCostModel, check_params, check_tensor_parallel
from simbatch.errors import SimbatchError
from simbatch.hardware import GPUSpec, get_gpu
from simbatch.models import ModelSpec, get_model

__all__ = ["CostModel", "StepCost", "RooflineCostModel", "build_cost_model", "COST_MODEL_KINDS"]

COST_MODEL_KINDS = ("roofline",)


def build_cost_model(spec: dict | str | None, model: ModelSpec | str | dict,
                     gpu: GPUSpec | str | dict, tensor_parallel: int = 1,
                     where: str = "cost_model") -> CostModel:
    """A cost model from its spec: ``{kind: roofline, ...params}``.

    ``spec`` may also be just the kind's name, or None / a dict without
    ``kind`` for the default (roofline). Errors name ``where`` and the field.
    """
    if spec is None:
        spec = {}
    elif isinstance(spec, str):
        spec = {"kind": spec}
    elif not isinstance(spec, dict):
        raise SimbatchError(where, f"expected a mapping with a 'kind', got {type(spec).__name__}")
    params = dict(spec)
    kind = params.pop("kind", "roofline")
    if not isinstance(kind, str) or kind.strip().lower() not in COST_MODEL_KINDS:
        raise SimbatchError(f"{where}.kind",
                            f"unknown cost model kind {kind!r}; allowed: {', '.join(COST_MODEL_KINDS)}")
    model = get_model(model, "model")
    gpu = get_gpu(gpu, "gpu")
    # Check here too so that errors carry the caller's `where`.
    check_tensor_parallel(tensor_parallel, model, "tensor_parallel")
    check_params(params, where)
    return RooflineCostModel(model, gpu, tensor_parallel, **params)
