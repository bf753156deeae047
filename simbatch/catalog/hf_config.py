"""The fields of a :class:`~simbatch.catalog.models.ModelSpec` from a Hugging Face ``config.json``.

:func:`read_hf_config` reads the file; :func:`spec_fields_from_hf` maps its
fields onto a spec's (:func:`simbatch.catalog.models.spec_from_hf` builds the spec).
This module does not import :mod:`simbatch.catalog.models`, which imports it: the
mapping sits below the specs, so the two never form an import cycle.

The family is picked by ``architectures[0]`` (or ``model_type`` when a config
names no architecture); each family reads only the fields it needs and says
which one is missing or malformed, in one line, rather than guessing. Fields
that change nothing the cost model prices (dropout, RoPE scaling, token ids,
norms' epsilon) are ignored. An image-text model (Llama 4) is read from its
``text_config``; its vision tower is not modelled (text is served without it).

Nothing here is imported with the package: :mod:`simbatch.catalog.models` imports this
module only when a model is read from a config (``config:`` or ``hf_config:``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from simbatch.errors import SimbatchError
from simbatch.files.textfile import read_text


@dataclass(frozen=True)
class _Family:
    """How one family's config reads: its MLP (gated or plain), whether the LM head is tied
    to the embedding when the config does not say, and which reader adds its extras."""

    gated_mlp: bool
    tied_default: bool
    extras: str  # "", "mixtral", "qwen_moe", "deepseek", "llama4" or "opt"


_LLAMA = _Family(gated_mlp=True, tied_default=False, extras="")
# Gemma's MLP is a gated GELU (gate, up, down: the same three matrices as SwiGLU) and its
# LM head is the embedding (GemmaConfig's tie_word_embeddings defaults to true).
_GEMMA = _Family(gated_mlp=True, tied_default=True, extras="")
_FAMILIES: dict[str, _Family] = {
    # Llama-shaped decoders: the defaults of transformers' config classes (untied).
    # Qwen2's QKV biases and Qwen3's QK norms are under 0.1% of the weights.
    "LlamaForCausalLM": _LLAMA,
    "MistralForCausalLM": _LLAMA,
    "YiForCausalLM": _LLAMA,  # Yi's first upload, before 01-ai relabelled it Llama
    "Qwen2ForCausalLM": _LLAMA,
    "Qwen3ForCausalLM": _LLAMA,
    "MixtralForCausalLM": _Family(True, False, "mixtral"),
    "Qwen2MoeForCausalLM": _Family(True, False, "qwen_moe"),
    "Qwen3MoeForCausalLM": _Family(True, False, "qwen_moe"),
    "DeepseekV2ForCausalLM": _Family(True, False, "deepseek"),
    "DeepseekV3ForCausalLM": _Family(True, False, "deepseek"),
    "GemmaForCausalLM": _GEMMA,
    "Gemma2ForCausalLM": _GEMMA,
    # OPT: fc1/fc2 with ReLU; OPTConfig ties the LM head to the embedding by default.
    "OPTForCausalLM": _Family(gated_mlp=False, tied_default=True, extras="opt"),
    # Llama 4: the image-text model reads its text model from text_config (the vision tower
    # and its projector are not modelled: text is served without them); Llama4ForCausalLM
    # is the text model on its own. transformers' Llama4Config / Llama4TextConfig default
    # tie_word_embeddings to false.
    "Llama4ForConditionalGeneration": _Family(True, False, "llama4"),
    "Llama4ForCausalLM": _Family(True, False, "llama4"),
}
# Architectures whose shapes sit in a sub-config: the key holding the text model's.
_TEXT_CONFIG = {"Llama4ForConditionalGeneration": "text_config"}
# For a config without ``architectures`` (some copies drop it): its model_type.
_MODEL_TYPES = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "yi": "YiForCausalLM",
    "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
    "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM", "opt": "OPTForCausalLM",
    "llama4": "Llama4ForConditionalGeneration", "llama4_text": "Llama4ForCausalLM",
}
# torch_dtype (``dtype`` in transformers 5) -> bytes per element of activations and KV.
_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "half": 2, "float32": 4, "float": 4}
# GPTQ / AWQ checkpoints' bits -> simbatch's weight format (group-wise int, see QUANT_BYTES).
_INT_BITS = {4: "int4", 8: "int8"}

_MISSING = object()
# ModelSpec's fields that a family without the feature leaves at 0 (no experts, no MLA).
_FEATURES_OFF = dict(num_experts=0, experts_per_token=0, moe_intermediate_size=0,
                     shared_expert_intermediate_size=0, num_dense_layers=0, kv_lora_rank=0, q_lora_rank=0,
                     qk_rope_head_dim=0, v_head_dim=0, kv_quant="none", attention_16bit=False)


def read_hf_config(path: Path, where: str) -> dict:
    """The JSON object in ``path``; any problem (unreadable, not UTF-8, not JSON, not an
    object) is a one-line :class:`SimbatchError` naming the file."""
    path = Path(path)
    try:  # the one loader of user files: its messages, after the scenario field
        text = read_text(path, "config.json")
    except SimbatchError as e:
        raise SimbatchError(where, str(e)) from None
    data = _parse_json(text, path, where)
    if not isinstance(data, dict):
        raise SimbatchError(where, f"{path} holds a JSON {type(data).__name__}, expected an object "
                                   "(a config.json)")
    return data


def _parse_json(text: str, path: Path, where: str):
    """The JSON value of ``text``; what the parser refuses, a one-line error naming ``path``:
    bad syntax, arrays or objects nested past Python's recursion limit (a config nests two or
    three deep), and integers of more digits than Python converts (4,300)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SimbatchError(where, f"{path} is not valid JSON: line {e.lineno}, column {e.colno}: "
                                   f"{e.msg}") from None
    except RecursionError:
        raise SimbatchError(where, f"{path} nests arrays or objects too deeply to read (a config.json "
                                   "nests two or three levels)") from None
    except ValueError as e:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        raise SimbatchError(where, f"{path} holds a number too long to read ({str(e).split(':')[0]})") from None


def spec_fields_from_hf(config: dict, name: str, where: str, *, weight_quant: str | None = None) -> dict:
    """The ModelSpec fields (all of them, by name) a Hugging Face ``config.json`` (as a dict)
    describes, the model called ``name``.

    ``weight_quant``, when given, is the weights' format and ``quantization_config`` is not
    read (a scenario's explicit format wins over the checkpoint's). Each field is checked
    on its own here; the checks across fields are the spec's (``check_consistent``).
    """
    if not isinstance(config, dict):
        raise SimbatchError(where, f"expected a mapping (the fields of a config.json), got "
                                   f"{type(config).__name__}")
    arch = _architecture(config, where)
    family = _FAMILIES[arch]
    text, at = _text_config(config, where, arch)
    values = _common(text, at, arch)
    values.update(name=name, gated_mlp=family.gated_mlp,
                  tied_embeddings=_bool(config, "tie_word_embeddings", family.tied_default, where),
                  dtype_bytes=_dtype_bytes(config, where),
                  **({"weight_quant": weight_quant} if weight_quant is not None else _quantization(config, where)))
    if family.extras != "deepseek":  # MLA's head width is its own (no-RoPE plus RoPE part)
        values["head_dim"] = _head_dim(text, at, arch, values)
    if family.extras:
        values.update(_EXTRAS[family.extras](text, at, arch, values))
    return {**_FEATURES_OFF, **values}


def _architecture(config: dict, where: str) -> str:
    """The architecture that picks the family: ``architectures[0]``, else ``model_type``."""
    archs = config.get("architectures")
    if archs is not None:
        if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
            raise SimbatchError(f"{where}.architectures", f"expected a list of class names, got {archs!r}")
        if archs[0] not in _FAMILIES:
            raise SimbatchError(f"{where}.architectures", f"{archs[0]!r} is not read; known: "
                                f"{', '.join(_FAMILIES)} (or give the model's shapes as a mapping)")
        return archs[0]
    model_type = config.get("model_type")
    if model_type is None:
        raise SimbatchError(f"{where}.architectures", "missing (and no model_type); needed to pick the "
                                                      "model family")
    if not isinstance(model_type, str) or model_type not in _MODEL_TYPES:  # a list or mapping is no name
        raise SimbatchError(f"{where}.model_type", f"{_short(model_type)} is not read; known: "
                            f"{', '.join(_MODEL_TYPES)} (or give the model's shapes as a mapping)")
    return _MODEL_TYPES[model_type]


def _text_config(config: dict, where: str, arch: str) -> tuple[dict, str]:
    """The mapping holding the text model's shapes, and where it is: the config itself, or
    its ``text_config`` for an image-text architecture (whose vision tower is left out)."""
    key = _TEXT_CONFIG.get(arch)
    if key is None:
        return config, where
    text = config.get(key)
    if text is None:
        raise SimbatchError(f"{where}.{key}", f"missing; needed for {arch} (its text model's shapes)")
    if not isinstance(text, dict):
        raise SimbatchError(f"{where}.{key}", f"expected a mapping (the text model's config), got "
                                              f"{type(text).__name__}")
    return text, f"{where}.{key}"


# The config key of the dense MLP's width where it is not intermediate_size (Llama 4's names
# its experts' width intermediate_size).
_MLP_KEYS = {"OPTForCausalLM": "ffn_dim", "Llama4ForConditionalGeneration": "intermediate_size_mlp",
             "Llama4ForCausalLM": "intermediate_size_mlp"}


def _common(config: dict, where: str, arch: str) -> dict:
    """The fields every family shares (OPT names its MLP width ``ffn_dim``, Llama 4 its dense
    layers' ``intermediate_size_mlp``)."""
    hidden = _int(config, "hidden_size", where, arch)
    heads = _int(config, "num_attention_heads", where, arch)
    mlp_key = _MLP_KEYS.get(arch, "intermediate_size")
    return dict(num_layers=_int(config, "num_hidden_layers", where, arch), hidden_size=hidden,
                num_heads=heads, num_kv_heads=_int(config, "num_key_value_heads", where, arch, default=heads),
                intermediate_size=_int(config, mlp_key, where, arch),
                vocab_size=_int(config, "vocab_size", where, arch),
                max_context=_int(config, "max_position_embeddings", where, arch))


def _head_dim(config: dict, where: str, arch: str, values: dict) -> int:
    """An explicit ``head_dim`` (Gemma's, Qwen3's), else the hidden size split over the heads
    (a null one, as in some Mistral configs, counts as absent)."""
    head_dim = _int(config, "head_dim", where, arch, default=None)
    if head_dim is not None:
        return head_dim
    hidden, heads = values["hidden_size"], values["num_heads"]
    if hidden % heads:
        raise SimbatchError(f"{where}.head_dim", f"missing, and hidden_size ({hidden}) is not a multiple "
                                                 f"of num_attention_heads ({heads})")
    return hidden // heads


def _mixtral(config: dict, where: str, arch: str, values: dict) -> dict:
    """Mixtral: every layer's MLP is ``num_local_experts`` experts of ``intermediate_size``."""
    return dict(num_experts=_int(config, "num_local_experts", where, arch),
                experts_per_token=_int(config, "num_experts_per_tok", where, arch),
                moe_intermediate_size=values["intermediate_size"])


def _qwen_moe(config: dict, where: str, arch: str, values: dict) -> dict:
    """Qwen2-MoE / Qwen3-MoE: routed experts of ``moe_intermediate_size`` (plus, in Qwen2-MoE,
    a shared expert; its one-output gate is left out like the routers' biases)."""
    # A mixture in every layer is all ModelSpec holds: dense layers come first or nowhere.
    if _int(config, "decoder_sparse_step", where, arch, default=1) != 1:
        raise SimbatchError(f"{where}.decoder_sparse_step", "only 1 (a mixture of experts in every "
                                                            "layer) is supported")
    dense = config.get("mlp_only_layers", [])
    if dense:  # None or [] both mean no dense layer
        raise SimbatchError(f"{where}.mlp_only_layers", f"only an empty list is supported, got {dense!r}")
    shared = 0  # Qwen3-MoE has none
    if arch == "Qwen2MoeForCausalLM":
        shared = _int(config, "shared_expert_intermediate_size", where, arch, zero_ok=True)
    return dict(num_experts=_int(config, "num_experts", where, arch),
                experts_per_token=_int(config, "num_experts_per_tok", where, arch),
                moe_intermediate_size=_int(config, "moe_intermediate_size", where, arch),
                shared_expert_intermediate_size=shared)


def _deepseek(config: dict, where: str, arch: str, values: dict) -> dict:
    """DeepSeek-V2/V3: multi-head latent attention, and (``n_routed_experts``) a mixture of
    experts after ``first_k_dense_replace`` dense layers, with ``n_shared_experts`` shared
    experts of the routed width (one shared MLP of their summed width, same weights)."""
    nope = _int(config, "qk_nope_head_dim", where, arch)
    rope = _int(config, "qk_rope_head_dim", where, arch)
    out = dict(head_dim=nope + rope, qk_rope_head_dim=rope,
               kv_lora_rank=_int(config, "kv_lora_rank", where, arch),
               # null in DeepSeek-V2-Lite: queries are projected directly, without compression.
               q_lora_rank=_int(config, "q_lora_rank", where, arch, default=0, zero_ok=True),
               v_head_dim=_int(config, "v_head_dim", where, arch))
    experts = _int(config, "n_routed_experts", where, arch, default=0, zero_ok=True)
    if experts:
        if _int(config, "moe_layer_freq", where, arch, default=1) != 1:
            raise SimbatchError(f"{where}.moe_layer_freq", "only 1 (a mixture of experts in every layer "
                                                           "after the dense ones) is supported")
        width = _int(config, "moe_intermediate_size", where, arch)
        shared = _int(config, "n_shared_experts", where, arch, default=0, zero_ok=True)
        out.update(num_experts=experts, experts_per_token=_int(config, "num_experts_per_tok", where, arch),
                   moe_intermediate_size=width, shared_expert_intermediate_size=shared * width,
                   num_dense_layers=_int(config, "first_k_dense_replace", where, arch, default=0,
                                         zero_ok=True))
    return out


def _llama4(config: dict, where: str, arch: str, values: dict) -> dict:
    """Llama 4 (vLLM's Llama4MoE): a mixture of ``num_local_experts`` routed experts of
    ``intermediate_size`` and one shared expert of the same width in the MoE layers; only a
    mixture in every layer (Scout's ``interleave_moe_layer_step: 1``) is read.

    Not modelled: the chunked local attention (iRoPE: three layers in four attend within
    chunks of ``attention_chunk_size`` tokens, the fourth globally without RoPE) is priced
    as full attention over the whole context, exact up to one chunk (8,192 tokens on
    Scout), pessimistic past it; the router's sigmoid gate and QK norms are left out like
    other routers' and norms' cost."""
    experts = _int(config, "num_local_experts", where, arch)
    if _int(config, "interleave_moe_layer_step", where, arch, default=1) != 1:
        raise SimbatchError(f"{where}.interleave_moe_layer_step", "only 1 (a mixture of experts in every "
                                                                 "layer, as in Scout) is supported")
    layers = config.get("moe_layers")
    if layers is not None and layers != list(range(values["num_layers"])):
        raise SimbatchError(f"{where}.moe_layers", f"only every layer (0 to {values['num_layers'] - 1}) "
                                                   f"is supported, got {_short(layers)}")
    width = _int(config, "intermediate_size", where, arch)
    return dict(num_experts=experts, experts_per_token=_int(config, "num_experts_per_tok", where, arch),
                moe_intermediate_size=width, shared_expert_intermediate_size=width)


def _short(value) -> str:
    """A value's repr for a message, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _opt(config: dict, where: str, arch: str, values: dict) -> dict:
    """OPT: one head per KV head; an embedding narrower than the model (OPT-350m projects it
    in and out) has no place in ModelSpec, so it is refused rather than miscounted."""
    proj = _int(config, "word_embed_proj_dim", where, arch, default=values["hidden_size"])
    if proj != values["hidden_size"]:
        raise SimbatchError(f"{where}.word_embed_proj_dim", f"{proj} differs from hidden_size "
                            f"({values['hidden_size']}); the embedding projection is not modelled")
    return {}


_EXTRAS = {"mixtral": _mixtral, "qwen_moe": _qwen_moe, "deepseek": _deepseek, "llama4": _llama4, "opt": _opt}


def _int(config: dict, key: str, where: str, arch: str, default=_MISSING, zero_ok: bool = False):
    """An integer field: positive (or 0 when ``zero_ok``); ``default`` when absent or null,
    else a one-line error saying the family needs it."""
    value = config.get(key)
    if value is None:
        if default is _MISSING:
            raise SimbatchError(f"{where}.{key}", f"missing; needed for {arch}")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0 and not zero_ok):
        kind = "a non-negative" if zero_ok else "a positive"
        raise SimbatchError(f"{where}.{key}", f"expected {kind} integer, got {value!r}")
    return value


def _bool(config: dict, key: str, default: bool, where: str) -> bool:
    """A true/false field, ``default`` when absent or null."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SimbatchError(f"{where}.{key}", f"expected true or false, got {value!r}")
    return value


def _dtype_bytes(config: dict, where: str) -> int:
    """Bytes per element from ``torch_dtype`` (or transformers 5's ``dtype``); 2 when absent,
    the 16-bit formats every engine serves these models in."""
    key = "torch_dtype" if "torch_dtype" in config else "dtype"
    value = config.get(key)
    if value is None:
        return 2
    if not isinstance(value, str) or value not in _DTYPE_BYTES:  # a list or mapping is no dtype
        raise SimbatchError(f"{where}.{key}", f"{_short(value)} is not read; known: {', '.join(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[value]


def _quantization(config: dict, where: str) -> dict:
    """The spec's quantisation fields from ``quantization_config``: ``weight_quant`` (fp8
    checkpoints: DeepSeek-V3's block-scaled e4m3 and compressed-tensors' FP8 schemes; 4- or
    8-bit GPTQ / AWQ; "none" without one) and ``attention_16bit``."""
    quant = config.get("quantization_config")
    if quant is None:
        return {"weight_quant": "none"}
    if not isinstance(quant, dict):
        raise SimbatchError(f"{where}.quantization_config", f"expected a mapping, got {_short(quant)}")
    if quant.get("quant_method") == "compressed-tensors":
        return _compressed_tensors(quant, f"{where}.quantization_config")
    return {"weight_quant": _weight_quant(quant, where)}


def _weight_quant(quant: dict, where: str) -> str:
    """The weights' format of a ``quantization_config`` of another method than
    compressed-tensors: fp8, or 4- or 8-bit GPTQ / AWQ."""
    method = quant.get("quant_method")
    if method == "fp8":
        return "fp8"
    if method in ("gptq", "awq"):
        bits = quant.get("bits", quant.get("w_bit"))  # AutoAWQ's exports name it w_bit
        if isinstance(bits, (int, float)) and bits in _INT_BITS:  # a list or mapping is no bit count
            return _INT_BITS[bits]
        raise SimbatchError(f"{where}.quantization_config.bits", f"{_short(bits)}-bit {method} is not modelled; "
                            "4 or 8 are (or give weight_quant in the model entry, which skips "
                            "quantization_config)")
    # The scenario's quantization: section applies to the spec this returns, so it cannot
    # stand in for a config that fails here; the model entry's weight_quant is read first.
    raise SimbatchError(f"{where}.quantization_config.quant_method",
                        f"{method!r} is not read; give the format in the scenario instead: weight_quant "
                        "(none, fp8, int8 or int4) in the model entry skips quantization_config, or delete "
                        "quantization_config from the file and use the quantization: section")


# Refusals of a compressed-tensors config say how to go on without it.
_CT_HINT = ("FP8 weights and activations (num_bits 8, type float) are read; or give weight_quant in the "
            "model entry, which skips quantization_config")
# Entries of a compressed-tensors ignore list simbatch keeps in 16 bits anyway, or does not model:
# the LM head and embeddings, the routers (``router``; Qwen-MoE's ``mlp.gate``), the vision tower.
_KEPT_16BIT = ("lm_head", "embed", "router", "vision", "multi_modal_projector")


def _compressed_tensors(quant: dict, at: str) -> dict:
    """llm-compressor's compressed-tensors format (``quant_method: compressed-tensors``): one
    scheme (``config_groups``) of 8-bit float weights, per tensor, channel or block, with
    8-bit float input activations, dynamic per token or static (W8A8: FP8 tensor cores), is
    ``weight_quant: fp8``; the scales (one fp32 per channel or block) are left out. An
    ``ignore`` entry naming ``self_attn`` keeps the attention projections in 16 bits.
    ``kv_cache_scheme`` is not read (vLLM keeps the KV cache in 16 bits unless
    ``--kv-cache-dtype`` says otherwise; the scenario's ``kv_quant`` does)."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        got = f"{len(groups)} groups" if isinstance(groups, dict) else _short(groups)
        raise SimbatchError(f"{at}.config_groups", f"expected one quantisation scheme, got {got}; {_CT_HINT}")
    (name, group), = groups.items()
    if not isinstance(group, dict):
        raise SimbatchError(f"{at}.config_groups.{name}", f"expected a mapping, got {_short(group)}")
    for key in ("weights", "input_activations"):
        _fp8_args(group.get(key), f"{at}.config_groups.{name}.{key}")
    return {"weight_quant": "fp8", "attention_16bit": _attention_ignored(quant.get("ignore"), f"{at}.ignore")}


def _fp8_args(args, at: str) -> None:
    """Refuses quantisation arguments that are not 8-bit floats (missing input activations
    are weight-only FP8, which vLLM runs as W8A16 kernels: not modelled)."""
    if args is None:
        raise SimbatchError(at, f"missing (weight-only FP8 is not modelled); {_CT_HINT}")
    if not isinstance(args, dict):
        raise SimbatchError(at, f"expected a mapping, got {_short(args)}")
    for key, want in (("num_bits", 8), ("type", "float")):
        if args.get(key) != want:
            raise SimbatchError(f"{at}.{key}", f"{_short(args.get(key))} is not read; {_CT_HINT}")


def _attention_ignored(ignore, at: str) -> bool:
    """True when the ignore list keeps the text model's attention (``self_attn``) in 16 bits;
    entries for what is 16-bit anyway or not modelled pass; any other layer kept in 16 bits
    would be priced quantised, so it is refused."""
    if ignore is None:
        return False
    if not isinstance(ignore, list) or not all(isinstance(e, str) for e in ignore):
        raise SimbatchError(at, f"expected a list of module names or patterns, got {_short(ignore)}")
    attention = False
    for entry in ignore:
        if any(m in entry for m in _KEPT_16BIT) or entry.rstrip("$").endswith(".gate"):
            continue
        if "self_attn" not in entry:
            raise SimbatchError(at, f"{entry!r} keeps layers in 16 bits that would be priced quantised; "
                                    "only the LM head, embeddings, routers, the vision tower and self_attn "
                                    "are read (give weight_quant in the model entry to skip quantization_config)")
        attention = True
    return attention
