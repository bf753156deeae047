"""Transformer shapes: what the cost model needs to know about an LLM.

A :class:`ModelSpec` holds only shapes (no weights): enough to count
parameters, weight bytes, KV-cache bytes and FLOPs per token. Presets copy the
public Hugging Face ``config.json`` of each model; :func:`get_model` turns a
scenario's ``model:`` entry (a preset name, or a dict of fields, optionally
``base: <preset>`` plus overrides) into a spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from simbatch.errors import SimbatchError
from simbatch.presets import spec_values


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Shapes of a decoder-only transformer (Llama/Mistral/OPT family).

    ``gated_mlp`` selects a SwiGLU MLP (gate, up and down matrices, as in
    Llama) over a plain two-matrix MLP (OPT). ``tied_embeddings`` says the LM
    head shares the input embedding matrix (OPT does), which changes the
    parameter count but not the bytes read per step. Biases, norms' bias terms
    and learned position embeddings (OPT) are left out: under 0.1% of weights.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    gated_mlp: bool
    max_context: int
    dtype_bytes: int = 2
    tied_embeddings: bool = False

    @property
    def q_size(self) -> int:
        """Width of the query (and attention output) projection."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of one of the key / value projections."""
        return self.num_kv_heads * self.head_dim

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of one layer's matrices: QKV, O and the MLP."""
        h = self.hidden_size
        attn = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate_size
        return attn + mlp

    @property
    def num_params(self) -> int:
        """All parameters: layers (matrices and norms), embedding, final norm, LM head."""
        h = self.hidden_size
        per_layer = self.linear_params_per_layer + 2 * h  # two norm weight vectors
        embeddings = self.vocab_size * h * (1 if self.tied_embeddings else 2)
        return self.num_layers * per_layer + h + embeddings

    @property
    def weight_bytes(self) -> int:
        """Bytes the weights occupy in GPU memory (all GPUs together)."""
        return self.num_params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies, over all layers (K and V)."""
        return self.num_layers * 2 * self.kv_size * self.dtype_bytes


def _llama(name, layers, hidden, heads, kv_heads, inter, vocab, ctx) -> ModelSpec:
    """A Llama-style preset (head_dim = hidden / heads, SwiGLU MLP)."""
    return ModelSpec(name, layers, hidden, heads, kv_heads, hidden // heads, inter, vocab, True, ctx)


# Figures from each model's Hugging Face config.json. Mistral-7B v0.1 uses a
# 4096-token sliding window, which is not modelled: attention and KV cost are
# priced over the whole context (pessimistic past 4096 tokens).
MODEL_PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
        _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
        _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
        _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
        _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
        _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768),
        # 01-ai/Yi-34B config.json (huggingface.co/01-ai/Yi-34B): 60 layers,
        # hidden 7168, 56 heads / 8 KV heads (head_dim 128), SwiGLU 20480,
        # vocab 64000, max_position_embeddings 4096 (Sarathi-Serve's figure 9
        # prefills it to 16k; the cost model does not check the context).
        _llama("yi-34b", 60, 7168, 56, 8, 20480, 64000, 4096),
        ModelSpec("opt-13b", 40, 5120, 40, 40, 128, 20480, 50272, False, 2048, tied_embeddings=True),
        # CPU-sized Llama-style shapes for the real (torch) backend.
        _llama("tiny", 4, 256, 4, 2, 688, 2048, 2048),
        _llama("small", 8, 768, 12, 4, 2048, 8192, 4096),
    )
}

_BOOL_FIELDS = {"gated_mlp", "tied_embeddings"}


def get_model(name_or_dict: str | dict | ModelSpec, where: str = "model") -> ModelSpec:
    """A model spec from a preset name (any case), a mapping of fields (optionally
    ``base: <preset>`` plus overrides), or a spec."""
    values = spec_values(ModelSpec, MODEL_PRESETS, name_or_dict, "model", where, _check_field)
    if isinstance(values, ModelSpec):
        return values
    if values["num_heads"] % values["num_kv_heads"]:
        raise SimbatchError(f"{where}.num_kv_heads", "must divide num_heads")
    return ModelSpec(**values)


def _check_field(key: str, value, where: str):
    """The value of one field, after its type and range check."""
    if key == "name":
        if not isinstance(value, str) or not value:
            raise SimbatchError(where, "must be a non-empty string")
    elif key in _BOOL_FIELDS:
        if not isinstance(value, bool):
            raise SimbatchError(where, f"must be true or false, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SimbatchError(where, f"must be a positive integer, got {value!r}")
    return value
