"""Transformer shapes: what the cost model needs to know about an LLM.

A :class:`ModelSpec` holds only shapes (no weights): enough to count
parameters, weight bytes, KV-cache bytes and FLOPs per token. Presets copy the
public Hugging Face ``config.json`` of each model; :func:`get_model` turns a
scenario's ``model:`` entry (a preset name, or a dict of fields, optionally
``base: <preset>`` plus overrides) into a spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from simbatch.catalog.presets import spec_values
from simbatch.errors import SimbatchError

# Bytes per weight (or per KV element) of each quantised format. int4 keeps one
# 16-bit scale per group of 128 weights, as GPTQ, AWQ and vLLM's Marlin kernels
# do by default (group_size 128): 0.5 + 2 / 128 bytes a weight.
QUANT_BYTES = {"fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2 / 128}
WEIGHT_QUANTS = ("none", "fp8", "int8", "int4")
KV_QUANTS = ("none", "fp8")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Shapes of a decoder-only transformer (Llama/Mistral/Qwen/OPT family, mixtures of
    experts such as Mixtral and DeepSeek, multi-head latent attention).

    ``gated_mlp`` selects a SwiGLU MLP (gate, up and down matrices, as in
    Llama) over a plain two-matrix MLP (OPT). ``tied_embeddings`` says the LM
    head shares the input embedding matrix (OPT does), which changes the
    parameter count but not the bytes read per step. Biases, norms' bias terms
    and learned position embeddings (OPT) are left out: under 0.1% of weights.

    **Mixture of experts** (``num_experts > 0``): every layer from
    ``num_dense_layers`` on replaces its MLP with ``num_experts`` routed experts
    of width ``moe_intermediate_size``, of which each token uses
    ``experts_per_token`` (top-k), plus an always-used shared expert of width
    ``shared_expert_intermediate_size`` (0: none) and a router; the leading
    ``num_dense_layers`` keep a dense MLP of width ``intermediate_size``.

    **Multi-head latent attention** (``kv_lora_rank > 0``, DeepSeek-V2/V3): K
    and V are compressed into one latent of ``kv_lora_rank`` plus a shared RoPE
    key of ``qk_rope_head_dim``, which is all the KV cache holds;
    ``head_dim`` is the query/key head width (its no-RoPE part plus
    ``qk_rope_head_dim``), ``v_head_dim`` the value head width and
    ``q_lora_rank`` the query compression (0: none).

    **Quantisation**: ``dtype_bytes`` is the activations' element size (and the
    weights' and KV cache's, unquantised); ``weight_quant`` stores the linear
    layers' weights (attention, MLP and experts; not embeddings, norms or the
    LM head, which serving engines keep in 16 bits) as ``fp8``, ``int8`` or
    ``int4``, and ``kv_quant: fp8`` the KV cache. ``attention_16bit`` keeps the attention
    projections (Q, K, V, O) in 16 bits while the other linear layers are quantised, as
    checkpoints whose quantisation ``ignore`` list names ``self_attn`` do (RedHatAI's
    Llama-4-Scout FP8-dynamic): their weights are stored, read and multiplied at the 16-bit rate.

    **Routing** (mixtures of experts only): ``routing_skew`` is the Zipf exponent of the
    experts' popularity (0: uniform routing; :mod:`simbatch.costmodel.routing`). How the experts
    are laid out over GPUs is the deployment's, not the model's:
    :class:`~simbatch.catalog.parallelism.ExpertLayout`, beside the model.
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
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    num_dense_layers: int = 0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    weight_quant: str = "none"
    kv_quant: str = "none"
    attention_16bit: bool = False  # attention kept in 16 bits under weight_quant (see above)
    routing_skew: float = 0.0

    @property
    def is_moe(self) -> bool:
        """True for a mixture of experts."""
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (DeepSeek)."""
        return self.kv_lora_rank > 0

    @property
    def special_features(self) -> list[str]:
        """What sets this model apart from a dense, 16-bit model with standard (grouped-query)
        attention, in words (empty for such a model): what measured profiles and the torch
        backend do not cover."""
        return [text for cond, text in (
            (self.is_moe, "a mixture of experts"), (self.is_mla, "multi-head latent attention"),
            (self.weight_quant != "none", f"{self.weight_quant} weights"),
            (self.kv_quant != "none", f"an {self.kv_quant} KV cache")) if cond]

    @property
    def is_dense_standard(self) -> bool:
        """True for a dense, unquantised model with standard attention (no :attr:`special_features`)."""
        return not self.special_features

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def q_size(self) -> int:
        """Width of the query projection (and of the attention output, but under MLA)."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of one of the key / value projections (standard attention)."""
        return self.num_kv_heads * self.head_dim

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes a linear layer's weight takes (quantised or not)."""
        return QUANT_BYTES.get(self.weight_quant, self.dtype_bytes)

    def attention_kept_bytes(self, tp: int = 1) -> float:
        """Bytes per GPU, over all layers, that attention kept in 16 bits adds to the linear
        layers' weights priced at :attr:`weight_bytes_per_param` (0 unless ``attention_16bit``
        with quantised weights)."""
        if not self.attention_16bit or self.weight_quant == "none":
            return 0.0
        return float(self.num_layers * self.attention_params(tp) * (self.dtype_bytes - self.weight_bytes_per_param))

    @property
    def kv_dtype_bytes(self) -> float:
        """Bytes one cached K or V element takes."""
        return QUANT_BYTES.get(self.kv_quant, self.dtype_bytes)

    def attention_params(self, tp: int = 1) -> int:
        """Weights of one layer's attention projections each of ``tp`` GPUs holds (heads are
        split; KV heads are replicated when ``tp`` exceeds them; MLA's down-projections are
        replicated, as vLLM holds them)."""
        h, heads = self.hidden_size, self.num_heads // tp
        if self.is_mla:
            q = (h * self.q_lora_rank + self.q_lora_rank * heads * self.head_dim if self.q_lora_rank
                 else h * heads * self.head_dim)
            kv_down = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            nope = self.head_dim - self.qk_rope_head_dim
            kv_up = self.kv_lora_rank * heads * (nope + self.v_head_dim)
            return q + kv_down + kv_up + heads * self.v_head_dim * h
        q = self.q_size // tp
        kv = max(1, self.num_kv_heads // tp) * self.head_dim
        return h * (q + 2 * kv) + q * h

    def mlp_params(self, width: int, tp: int = 1) -> int:
        """Weights of one MLP of intermediate ``width`` (gated or plain) per GPU of ``tp``."""
        return ((2 if self.gated_mlp else 1) * width // tp + width // tp) * self.hidden_size

    def dense_layer_params(self, tp: int = 1) -> int:
        """Per GPU, all layers together: the weights every step reads whole (attention, dense
        MLPs, shared experts and routers), i.e. all but the routed experts."""
        L, moe = self.num_layers, self.num_moe_layers
        attn = L * self.attention_params(tp)
        dense = (L - moe) * self.mlp_params(self.intermediate_size, tp)
        shared = moe * self.mlp_params(self.shared_expert_intermediate_size, tp)
        router = moe * self.hidden_size * self.num_experts  # replicated, tiny
        return attn + dense + shared + router

    def expert_params(self, tp: int = 1) -> int:
        """Weights of one routed expert per GPU (experts split over the TP group, vLLM's
        default); 0 for a dense model."""
        return self.mlp_params(self.moe_intermediate_size, tp) if self.is_moe else 0

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of one layer's matrices (QKV, O and the MLP; every routed expert counted),
        averaged over the layers."""
        total = self.dense_layer_params() + self.num_moe_layers * self.num_experts * self.expert_params()
        return total // self.num_layers

    @property
    def linear_params(self) -> int:
        """All layers' matrices, every routed expert counted (the weights that are quantised)."""
        return self.dense_layer_params() + self.num_moe_layers * self.num_experts * self.expert_params()

    @property
    def active_params(self) -> int:
        """Parameters one token uses (only its ``experts_per_token`` routed experts)."""
        unused = self.num_moe_layers * (self.num_experts - self.experts_per_token) * self.expert_params()
        return self.num_params - unused

    @property
    def num_params(self) -> int:
        """All parameters: layers (matrices and norms), embedding, final norm, LM head."""
        return self.linear_params + self._other_params

    @property
    def _other_params(self) -> int:
        """Norms, embedding and LM head: kept in 16 bits when the matrices are quantised."""
        h = self.hidden_size
        embeddings = self.vocab_size * h * (1 if self.tied_embeddings else 2)
        return self.num_layers * 2 * h + h + embeddings

    @property
    def weight_bytes(self) -> float:
        """Bytes the whole model's weights occupy (what a replica holds under a data-parallel
        expert layout: :meth:`~simbatch.catalog.parallelism.ExpertLayout.held_weight_bytes`)."""
        return (self.linear_params * self.weight_bytes_per_param + self._other_params * self.dtype_bytes
                + self.attention_kept_bytes())

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token occupies, over all layers (K and V, or MLA's latent), one
        copy (what a KV transfer sends)."""
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        return self.num_layers * 2 * self.kv_size * self.kv_dtype_bytes

    def kv_bytes_per_token_per_gpu(self, tp: int = 1) -> float:
        """KV-cache bytes one token occupies on each GPU of a ``tp``-way replica: KV heads are
        split (and replicated when ``tp`` exceeds them); MLA's latent is replicated whole."""
        if self.is_mla:
            return self.kv_bytes_per_token
        return self.num_layers * 2 * max(1, self.num_kv_heads // tp) * self.head_dim * self.kv_dtype_bytes


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
        # The file ships as simbatch/catalog/hf_configs/yi-34b.json.
        _llama("yi-34b", 60, 7168, 56, 8, 20480, 64000, 4096),
        ModelSpec("opt-13b", 40, 5120, 40, 40, 128, 20480, 50272, False, 2048, tied_embeddings=True),
        # Presets whose config.json ships in simbatch/catalog/hf_configs/<name>.json (sources in
        # its README.md); tests/test_hf_config.py checks that reading each file gives the spec
        # here, which is written out so that importing simbatch reads no file.
        # max_context is the config's max_position_embeddings.
        ModelSpec(name="llama-3.1-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                  head_dim=128, intermediate_size=14336, vocab_size=128256, gated_mlp=True,
                  max_context=131072),  # hf_configs/llama-3.1-8b.json
        ModelSpec(name="llama-3.1-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
                  head_dim=128, intermediate_size=28672, vocab_size=128256, gated_mlp=True,
                  max_context=131072),  # hf_configs/llama-3.1-70b.json
        ModelSpec(name="llama-3.1-405b", num_layers=126, hidden_size=16384, num_heads=128, num_kv_heads=8,
                  head_dim=128, intermediate_size=53248, vocab_size=128256, gated_mlp=True,
                  max_context=131072),  # hf_configs/llama-3.1-405b.json
        ModelSpec(name="qwen2.5-7b", num_layers=28, hidden_size=3584, num_heads=28, num_kv_heads=4,
                  head_dim=128, intermediate_size=18944, vocab_size=152064, gated_mlp=True,
                  max_context=131072),  # hf_configs/qwen2.5-7b.json
        ModelSpec(name="qwen2.5-72b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
                  head_dim=128, intermediate_size=29568, vocab_size=152064, gated_mlp=True,
                  max_context=131072),  # hf_configs/qwen2.5-72b.json
        # Gemma 2 alternates 4096-token sliding-window layers with global ones, which is not
        # modelled (every layer is priced over the whole context, as for Mistral above).
        ModelSpec(name="gemma-2-9b", num_layers=42, hidden_size=3584, num_heads=16, num_kv_heads=8,
                  head_dim=256, intermediate_size=14336, vocab_size=256000, gated_mlp=True,
                  max_context=8192, tied_embeddings=True),  # hf_configs/gemma-2-9b.json
        ModelSpec(name="opt-66b", num_layers=64, hidden_size=9216, num_heads=72, num_kv_heads=72,
                  head_dim=128, intermediate_size=36864, vocab_size=50272, gated_mlp=False,
                  max_context=2048, tied_embeddings=True),  # hf_configs/opt-66b.json
        ModelSpec(name="mixtral-8x7b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                  head_dim=128, intermediate_size=14336, vocab_size=32000, gated_mlp=True,
                  max_context=32768, num_experts=8, experts_per_token=2,
                  moe_intermediate_size=14336),  # hf_configs/mixtral-8x7b.json
        ModelSpec(name="qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_heads=32, num_kv_heads=4,
                  head_dim=128, intermediate_size=6144, vocab_size=151936, gated_mlp=True,
                  max_context=40960, num_experts=128, experts_per_token=8,
                  moe_intermediate_size=768),  # hf_configs/qwen3-30b-a3b.json
        # DeepSeek-V3 ships FP8 (block-scaled e4m3) weights: its quantization_config.
        ModelSpec(name="deepseek-v3", num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128,
                  head_dim=192, intermediate_size=18432, vocab_size=129280, gated_mlp=True,
                  max_context=163840, num_experts=256, experts_per_token=8, moe_intermediate_size=2048,
                  shared_expert_intermediate_size=2048, num_dense_layers=3, kv_lora_rank=512,
                  q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128,
                  weight_quant="fp8"),  # hf_configs/deepseek-v3.json
        # Llama-4-Scout-17B-16E as RedHatAI's FP8-dynamic checkpoint serves it: its text model
        # (the vision tower is not modelled), a mixture in every layer of 16 routed experts and
        # one shared expert, all 8192 wide (intermediate_size 16384 is the unused dense width);
        # FP8 weights and activations but the attention, which its recipe keeps in 16 bits.
        ModelSpec(name="llama-4-scout-17b-16e-fp8", num_layers=48, hidden_size=5120, num_heads=40,
                  num_kv_heads=8, head_dim=128, intermediate_size=16384, vocab_size=202048, gated_mlp=True,
                  max_context=10485760, num_experts=16, experts_per_token=1, moe_intermediate_size=8192,
                  shared_expert_intermediate_size=8192, weight_quant="fp8",
                  attention_16bit=True),  # hf_configs/llama-4-scout-17b-16e-fp8.json
        # CPU-sized Llama-style shapes for the real (torch) backend.
        _llama("tiny", 4, 256, 4, 2, 688, 2048, 2048),
        _llama("small", 8, 768, 12, 4, 2048, 8192, 4096),
    )
}

_BOOL_FIELDS = {"gated_mlp", "tied_embeddings", "attention_16bit"}
# Fields that may be 0 (the feature is off).
_ZERO_FIELDS = {"num_experts", "experts_per_token", "moe_intermediate_size", "shared_expert_intermediate_size",
                "num_dense_layers", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim"}
# Bounds on a model's figures, so that a step's seconds stay finite and simulated time within
# its horizon (simbatch.core.horizon). No shape field of a real model comes near 10**9 (the largest
# here: Llama-4-Scout's 10,485,760-token context, a 256,000-token vocabulary, a 53,248-wide MLP,
# 256 experts): a figure past it is a typo or a hostile file, and a vocab_size of 10**400
# overflowed the roofline's float arithmetic.
MAX_MODEL_INT = 10**9
# routing_skew is a Zipf exponent: by 100 every preset's routing has collapsed onto its k most
# popular experts (over 99.99 % of tokens pick the k-th, under 0.01 % the next), so a larger
# one changes nothing but the arithmetic; 1e5 underflowed every other expert's share to 0 and
# the draw's chances to NaN inside the simulation. The k-th expert's share, k ** -skew, must
# also stay a float (e ** -700, about 1e-304): skew x ln(experts_per_token) at most 700.
MAX_ROUTING_SKEW = 100.0
_MAX_SKEW_LOG = 700.0
_CHOICES = {"weight_quant": WEIGHT_QUANTS, "kv_quant": KV_QUANTS}
# Fields a scenario's cluster section sets (how the experts are laid out over GPUs), not a model entry.
DEPLOYMENT_FIELDS = {"expert_parallel": "cluster.expert_parallel", "expert_dispatch": "cluster.expert_dispatch",
                     "attention_data_parallel": "cluster.data_parallel_attention", "eplb": "cluster.eplb",
                     "redundant_experts": "cluster.redundant_experts"}


def get_model(name_or_dict: str | dict | ModelSpec, where: str = "model", *,
              base_dir: Path | None = None) -> ModelSpec:
    """A model spec from a preset name (any case), a mapping of fields (optionally
    ``base: <preset>`` plus overrides), a Hugging Face config (``config: path/to/config.json``,
    relative to ``base_dir``, default the current directory; or ``hf_config: {...}`` inline,
    each optionally with ``name`` and field overrides), or a spec."""
    for key in DEPLOYMENT_FIELDS.keys() & (name_or_dict.keys() if isinstance(name_or_dict, dict) else ()):
        raise SimbatchError(f"{where}.{key}", f"how experts are laid out over GPUs is the deployment's: "
                                              f"set {DEPLOYMENT_FIELDS[key]} instead")
    if isinstance(name_or_dict, dict) and _HF_KEYS & name_or_dict.keys():
        return _from_hf(name_or_dict, where, base_dir)
    values = spec_values(ModelSpec, MODEL_PRESETS, name_or_dict, "model", where, _check_field)
    if isinstance(values, ModelSpec):
        return values
    check_consistent(values, where)
    return ModelSpec(**values)


_HF_KEYS = {"config", "hf_config"}


def spec_from_hf(config: dict, name: str, where: str, *, weight_quant: str | None = None) -> ModelSpec:
    """The spec a Hugging Face ``config.json`` (as a dict) describes, called ``name``
    (the mapping is :func:`simbatch.catalog.hf_config.spec_fields_from_hf`'s); ``weight_quant``,
    when given, replaces the config's ``quantization_config``."""
    from simbatch.catalog.hf_config import spec_fields_from_hf  # only when a model is read from a config

    values = spec_fields_from_hf(config, name, where, weight_quant=weight_quant)
    check_sizes(values, where)
    check_consistent(values, where)
    return ModelSpec(**values)


def _from_hf(entry: dict, where: str, base_dir: Path | None) -> ModelSpec:
    """The spec of a ``{config: PATH}`` or ``{hf_config: {...}}`` entry: the config's shapes,
    then the entry's other fields as overrides (``weight_quant`` there also means the
    config's quantization_config is not read), checked like any custom model."""
    from simbatch.catalog.hf_config import read_hf_config, spec_fields_from_hf  # only when a scenario uses it

    if _HF_KEYS <= entry.keys():
        raise SimbatchError(where, "give config (a config.json path) or hf_config (its fields inline), "
                                   "not both")
    allowed = {f.name for f in fields(ModelSpec)}
    unknown = [k for k in entry if k not in allowed | _HF_KEYS]
    if unknown:
        raise SimbatchError(f"{where}.{unknown[0]}", "unknown field; allowed with a Hugging Face config: "
                            f"config or hf_config, then {', '.join(sorted(allowed))}")
    overrides = {k: _check_field(k, v, f"{where}.{k}") for k, v in entry.items() if k not in _HF_KEYS}
    if "config" in entry:
        path = _config_path(entry["config"], f"{where}.config", base_dir)
        config, at = read_hf_config(path, f"{where}.config"), f"{where}.config"
        default_name = _name_from_path(path)
    else:
        config, at, path, default_name = entry["hf_config"], f"{where}.hf_config", None, "hf-model"
    try:
        values = check_sizes(spec_fields_from_hf(config, overrides.get("name", default_name), at,
                                                 weight_quant=overrides.get("weight_quant")), at)
    except SimbatchError as e:
        if path is None:
            raise
        raise SimbatchError(e.where, f"{e.cause} (in {path})") from None
    values.update(overrides)
    check_consistent(values, where)
    return ModelSpec(**values)


def _config_path(value, where: str, base_dir: Path | None) -> Path:
    """A ``config:`` entry as a path: ``~`` expanded, relative ones under ``base_dir`` (the
    scenario file's folder) or, without one, the current directory."""
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise SimbatchError(where, f"expected the path of a config.json, got {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else (Path(base_dir) if base_dir is not None else Path.cwd()) / path


def _name_from_path(path: Path) -> str:
    """The default name of a model read from ``path``: the folder a ``config.json`` sits in
    (``.../Llama-3.1-8B/config.json`` -> ``llama-3.1-8b``, how Hugging Face snapshots and
    ``save_pretrained`` lay it out), else the file's own stem (``configs/yi-34b.json``)."""
    stem = path.parent.name if path.name == "config.json" else path.stem
    return stem.lower() or "hf-model"


def check_sizes(values: dict, where: str) -> dict:
    """``values`` (a config's fields, each read as an integer already) after refusing any
    integer over :data:`MAX_MODEL_INT`, named ``where.<field>``."""
    for key, value in values.items():
        if isinstance(value, int) and not isinstance(value, bool):
            _check_size(value, f"{where}.{key}")
    return values


def _check_size(value: int, where: str) -> None:
    """Refuse an integer shape no real model comes near (see :data:`MAX_MODEL_INT`)."""
    if value > MAX_MODEL_INT:
        got = f"a {value.bit_length()}-bit integer" if value.bit_length() > 64 else f"{value:,}"
        raise SimbatchError(where, f"must be at most {MAX_MODEL_INT:,} (no real model comes near), got {got}")


def check_consistent(v: dict, where: str) -> None:
    """Checks across a model's fields (each one's own type and range checked already)."""
    if v["num_heads"] % v["num_kv_heads"]:
        raise SimbatchError(f"{where}.num_kv_heads", "must divide num_heads")
    if v.get("num_experts", 0):
        if not 1 <= v.get("experts_per_token", 0) <= v["num_experts"]:
            raise SimbatchError(f"{where}.experts_per_token",
                                f"must be between 1 and num_experts ({v['num_experts']}) in a mixture of experts")
        _check_skew_reachable(v, where)
        if not v.get("moe_intermediate_size", 0):
            raise SimbatchError(f"{where}.moe_intermediate_size", "must be positive in a mixture of experts")
        if v.get("num_dense_layers", 0) >= v["num_layers"]:
            raise SimbatchError(f"{where}.num_dense_layers", f"must be below num_layers ({v['num_layers']})")
    else:
        for key in ("experts_per_token", "moe_intermediate_size", "shared_expert_intermediate_size",
                    "num_dense_layers", "routing_skew"):
            if v.get(key, 0):
                raise SimbatchError(f"{where}.{key}", "applies to a mixture of experts only (set num_experts)")
    if v.get("kv_lora_rank", 0):
        for key in ("qk_rope_head_dim", "v_head_dim"):
            if not v.get(key, 0):
                raise SimbatchError(f"{where}.{key}", "must be positive with multi-head latent attention "
                                                      "(kv_lora_rank)")
        if v["qk_rope_head_dim"] >= v["head_dim"]:
            raise SimbatchError(f"{where}.qk_rope_head_dim",
                                f"must be below head_dim ({v['head_dim']}: no-RoPE plus RoPE part)")
    else:
        for key in ("q_lora_rank", "qk_rope_head_dim", "v_head_dim"):
            if v.get(key, 0):
                raise SimbatchError(f"{where}.{key}", "applies to multi-head latent attention only "
                                                      "(set kv_lora_rank)")


def _check_skew_reachable(v: dict, where: str) -> None:
    """Refuse a routing skew under which the ``experts_per_token``-th expert's share underflows
    (see :data:`MAX_ROUTING_SKEW`): no token could then pick its k experts."""
    skew, k = v.get("routing_skew", 0.0), v["experts_per_token"]
    if k > 1 and skew * math.log(k) > _MAX_SKEW_LOG:
        raise SimbatchError(f"{where}.routing_skew", f"must be at most {_MAX_SKEW_LOG / math.log(k):.4g} with "
                                                     f"{k} experts per token (the {k}-th most popular expert's "
                                                     f"share, {k} ** -skew, underflows), got {skew!r}")


def _check_field(key: str, value, where: str):
    """The value of one field, after its type and range check."""
    if key == "name":
        if not isinstance(value, str) or not value:
            raise SimbatchError(where, "must be a non-empty string")
    elif key in _BOOL_FIELDS:
        if not isinstance(value, bool):
            raise SimbatchError(where, f"must be true or false, got {value!r}")
    elif key in _CHOICES:
        if value not in _CHOICES[key]:
            raise SimbatchError(where, f"unknown format {value!r}; allowed: {', '.join(_CHOICES[key])}")
    elif key == "routing_skew":  # a Zipf exponent (simbatch.costmodel.routing)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise SimbatchError(where, f"must be a number >= 0 (0: uniform routing), got {value!r}")
        if value > MAX_ROUTING_SKEW:
            raise SimbatchError(where, f"must be at most {MAX_ROUTING_SKEW:g} (every token on the same experts "
                                       f"already), got {value!r}")
        return float(value)
    elif isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0
                                                                               and key not in _ZERO_FIELDS):
        kind = "a non-negative" if key in _ZERO_FIELDS else "a positive"
        raise SimbatchError(where, f"must be {kind} integer, got {value!r}")
    else:
        _check_size(value, where)
    return value
