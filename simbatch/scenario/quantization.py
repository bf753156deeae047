"""A scenario's ``quantization:`` section: the formats weights and KV cache are stored in.

``quantization: {weights: bf16 | fp16 | fp8 | int8 | int4, kv_cache: bf16 | fp16 | fp8}``
turns the scenario's model into the same shapes with quantised storage
(``ModelSpec.weight_quant`` / ``kv_quant``); memory sizing, KV transfers and
the roofline's bytes and FLOP rates all follow from the spec (docs/cost_models.md).
"""

from __future__ import annotations

from dataclasses import replace

from simbatch.catalog.models import ModelSpec
from simbatch.errors import SimbatchError

# Scenario names -> ModelSpec formats ("none": the model's own 16-bit dtype).
WEIGHT_FORMATS = {"bf16": "none", "fp16": "none", "fp8": "fp8", "int8": "int8", "int4": "int4"}
KV_FORMATS = {"bf16": "none", "fp16": "none", "fp8": "fp8"}
FIELDS = {"weights": WEIGHT_FORMATS, "kv_cache": KV_FORMATS}


def apply_quantization(model: ModelSpec, spec, where: str = "quantization") -> ModelSpec:
    """``model`` stored as ``spec`` says (None: unchanged); errors name ``where`` and the field."""
    if spec is None:
        return model
    if not isinstance(spec, dict):
        raise SimbatchError(where, f"expected a mapping such as {{weights: fp8, kv_cache: fp8}}, "
                                   f"got {type(spec).__name__}")
    changes = {}
    for key, value in spec.items():
        formats = FIELDS.get(key)
        if formats is None:
            raise SimbatchError(f"{where}.{key}", f"unknown field; allowed: {', '.join(FIELDS)}")
        name = value.strip().lower() if isinstance(value, str) else None  # a list or mapping names none
        if name not in formats:
            raise SimbatchError(f"{where}.{key}", f"unknown format {value!r}; allowed: {', '.join(formats)}")
        changes["weight_quant" if key == "weights" else "kv_quant"] = formats[name]
    if model.dtype_bytes != 2 and any(v != "none" for v in changes.values()):
        raise SimbatchError(where, f"applies to 16-bit models; {model.name} has {model.dtype_bytes}-byte elements")
    return replace(model, **changes)


def describe(model: ModelSpec) -> dict:
    """The storage formats of ``model`` for ``summary.json`` (``16-bit`` when unquantised)."""
    return {"weights": model.weight_quant if model.weight_quant != "none" else f"{8 * model.dtype_bytes}-bit",
            "kv_cache": model.kv_quant if model.kv_quant != "none" else f"{8 * model.dtype_bytes}-bit"}
