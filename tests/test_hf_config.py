"""Models from their Hugging Face config.json (simbatch/catalog/hf_config.py; spec_from_hf and get_model's
config: / hf_config: entries in simbatch/catalog/models.py).

The shipped configs (simbatch/catalog/hf_configs, sources in its README) are read and
compared with the presets written out in simbatch/catalog/models.py; parameter counts are
checked against the totals the model makers publish, which neither the files nor
the code supplied.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from simbatch.catalog.hf_config import read_hf_config
from simbatch.catalog.models import MODEL_PRESETS, get_model, spec_from_hf
from simbatch.errors import SimbatchError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "simbatch" / "catalog" / "hf_configs"
SHIPPED = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen2.5-7b", "qwen2.5-72b", "mixtral-8x7b",
           "deepseek-v3", "yi-34b", "opt-66b", "qwen3-30b-a3b", "gemma-2-9b", "llama-4-scout-17b-16e-fp8"]

# Meta-Llama-3.1-8B's config.json as published (shape fields and the rest), for the inline tests.
LLAMA_8B = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())

# deepseek-ai/DeepSeek-V2-Lite's shape fields (its config.json; copy in inference-sim/inference-sim,
# model_configs/deepseek-v2-lite/config.json): MLA without query compression (q_lora_rank null).
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "first_k_dense_replace": 1,
    "hidden_size": 2048, "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_routed_experts": 64, "n_shared_experts": 2,
    "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
    "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 102400,
}


def read(name: str) -> dict:
    return read_hf_config(CONFIGS / f"{name}.json", "test")


def test_every_shipped_config_has_its_preset():
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == sorted(SHIPPED)
    assert set(SHIPPED) <= set(MODEL_PRESETS)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_config_reads_as_its_preset(name):
    # The presets are written out by hand (import reads no file); the reader must agree exactly.
    assert spec_from_hf(read(name), name, "model") == MODEL_PRESETS[name]
    assert get_model({"config": f"{name}.json"}, base_dir=CONFIGS) == MODEL_PRESETS[name]


def test_yi_34b_preset_is_the_shipped_config():
    # The yi-34b preset predates the reader; its figures must be what 01-ai's file says.
    spec = spec_from_hf(read("yi-34b"), "yi-34b", "model")
    assert spec == MODEL_PRESETS["yi-34b"] == get_model("yi-34b")
    assert (spec.num_layers, spec.hidden_size, spec.num_kv_heads, spec.max_context) == (60, 7168, 8, 4096)


# Published totals: Meta's model card (405B), Mistral's Mixtral announcement (46.7B total, 12.9B per
# token), Qwen3-30B-A3B's model card (30.5B total, 29.9B without embeddings, 3.3B activated).
@pytest.mark.parametrize("name,total,active", [
    ("llama-3.1-405b", 405e9, 405e9),
    ("mixtral-8x7b", 46.7e9, 12.9e9),
])
def test_parameter_counts_match_published_totals(name, total, active):
    spec = get_model(name)
    assert spec.num_params == pytest.approx(total, rel=0.01)
    assert spec.active_params == pytest.approx(active, rel=0.01)


def test_qwen3_30b_a3b_counts():
    spec = get_model("qwen3-30b-a3b")
    assert spec.num_params == pytest.approx(30.5e9, rel=0.01)
    embeddings = 2 * spec.vocab_size * spec.hidden_size  # untied input and output tables
    assert spec.num_params - embeddings == pytest.approx(29.9e9, rel=0.01)
    # "3.3B activated" is given to two figures (the count is 3.35B): 2% covers the rounding.
    assert spec.active_params == pytest.approx(3.3e9, rel=0.02)


def test_deepseek_v3_counts():
    spec = get_model("deepseek-v3")
    # DeepSeek's README: 671B of main-model weights (the 14B multi-token-prediction module aside).
    assert spec.num_params == pytest.approx(671e9, rel=0.01)
    # "37B activated" is rounded to the billion; simbatch's 37.55B also counts the whole input
    # embedding table (0.93B, of which a token reads one row): 2% covers both.
    assert spec.active_params == pytest.approx(37e9, rel=0.02)
    assert spec.weight_quant == "fp8"  # from quantization_config
    assert spec.kv_bytes_per_token == 61 * (512 + 64) * 2  # the MLA latent, not 128 heads of K and V


def test_deepseek_v2_lite_without_query_compression():
    spec = spec_from_hf(DEEPSEEK_V2_LITE, "deepseek-v2-lite", "model")
    assert spec.q_lora_rank == 0 and spec.head_dim == 192
    assert spec.shared_expert_intermediate_size == 2 * 1408 and spec.num_dense_layers == 1
    # Queries projected straight from the hidden state: hidden x heads x head_dim, no low-rank pair.
    with_compression = spec_from_hf({**DEEPSEEK_V2_LITE, "q_lora_rank": 1536}, "x", "model")
    assert spec.attention_params() < with_compression.attention_params()
    assert spec.num_params == pytest.approx(15.7e9, rel=0.01)  # DeepSeek-V2-Lite's model card


def test_inline_config_equals_the_file(tmp_path):
    folder = tmp_path / "Meta-Llama-3.1-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_8B))
    from_file = get_model({"config": "Meta-Llama-3.1-8B/config.json", "name": "llama"}, base_dir=tmp_path)
    inline = get_model({"hf_config": LLAMA_8B, "name": "llama"})
    assert from_file == inline
    assert (inline.num_kv_heads, inline.head_dim, inline.max_context) == (8, 128, 131072)
    # Default names: the folder of a config.json, lower-cased; "hf-model" inline.
    assert get_model({"config": str(folder / "config.json")}).name == "meta-llama-3.1-8b"
    assert get_model({"hf_config": LLAMA_8B}).name == "hf-model"


def test_relative_config_path_without_base_dir_is_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "my-model.json").write_text(json.dumps(LLAMA_8B))
    monkeypatch.chdir(tmp_path)
    assert get_model({"config": "my-model.json"}).name == "my-model"


def test_overrides_apply_and_are_checked():
    spec = get_model({"hf_config": LLAMA_8B, "max_context": 8192, "kv_quant": "fp8"})
    assert spec.max_context == 8192 and spec.kv_quant == "fp8" and spec.hidden_size == 4096
    with pytest.raises(SimbatchError, match=r"^model\.max_context: must be a positive integer"):
        get_model({"hf_config": LLAMA_8B, "max_context": 0})
    with pytest.raises(SimbatchError, match=r"^model\.num_kv_heads: must divide num_heads"):
        get_model({"hf_config": LLAMA_8B, "num_kv_heads": 5})
    with pytest.raises(SimbatchError, match=r"^model\.base: unknown field"):
        get_model({"hf_config": LLAMA_8B, "base": "llama-3-8b"})


def test_config_and_hf_config_together_is_an_error():
    with pytest.raises(SimbatchError, match=r"^model: give config .* or hf_config .*not both"):
        get_model({"config": "x/config.json", "hf_config": LLAMA_8B})


def test_unknown_architecture_names_the_field():
    bad = {**LLAMA_8B, "architectures": ["MambaForCausalLM"]}
    with pytest.raises(SimbatchError, match=r"^model\.hf_config\.architectures: 'MambaForCausalLM' is not "
                                            r"read; known: LlamaForCausalLM"):
        get_model({"hf_config": bad})
    no_arch = {k: v for k, v in LLAMA_8B.items() if k not in ("architectures", "model_type")}
    with pytest.raises(SimbatchError, match=r"^model\.hf_config\.architectures: missing"):
        get_model({"hf_config": no_arch})


def test_family_from_model_type_without_architectures():
    # EasyDeL's copy of opt-66b has no architectures key: model_type picks the family.
    assert "architectures" not in read("opt-66b")
    assert spec_from_hf({**LLAMA_8B, "architectures": None}, "x", "m") == spec_from_hf(LLAMA_8B, "x", "m")


def test_missing_field_names_it_and_the_family(tmp_path):
    config = {k: v for k, v in LLAMA_8B.items() if k != "hidden_size"}
    with pytest.raises(SimbatchError) as info:
        get_model({"hf_config": config})
    assert str(info.value) == "model.hf_config.hidden_size: missing; needed for LlamaForCausalLM"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SimbatchError, match=r"^scenario\.model\.config\.hidden_size: missing; needed for "
                                            r"LlamaForCausalLM \(in .*config\.json\)$"):
        get_model({"config": str(path)}, "scenario.model")


@pytest.mark.parametrize("field,value,fragment", [
    ("hidden_size", "4096", "expected a positive integer, got '4096'"),
    ("num_hidden_layers", True, "expected a positive integer, got True"),
    ("num_attention_heads", 0, "expected a positive integer, got 0"),
    ("tie_word_embeddings", "no", "expected true or false"),
    ("torch_dtype", "int8", "'int8' is not read"),
    ("architectures", "LlamaForCausalLM", "expected a list of class names"),
])
def test_wrong_types_name_the_field(field, value, fragment):
    with pytest.raises(SimbatchError, match=rf"^model\.hf_config\.{field}: .*{fragment}"):
        get_model({"hf_config": {**LLAMA_8B, field: value}})


def test_head_dim_and_defaults():
    gemma = read("gemma-2-9b")
    assert "tie_word_embeddings" not in gemma  # Gemma's default: tied
    spec = spec_from_hf(gemma, "g", "m")
    assert spec.head_dim == 256 != spec.hidden_size // spec.num_heads and spec.tied_embeddings
    no_kv = {k: v for k, v in LLAMA_8B.items() if k != "num_key_value_heads"}
    assert spec_from_hf(no_kv, "x", "m").num_kv_heads == 32  # defaults to the attention heads
    assert spec_from_hf({**LLAMA_8B, "torch_dtype": "float32"}, "x", "m").dtype_bytes == 4
    opt = spec_from_hf(read("opt-66b"), "o", "m")
    assert not opt.gated_mlp and opt.tied_embeddings and opt.intermediate_size == 36864


def test_qwen_moe_layouts_outside_the_model_are_refused():
    qwen = read("qwen3-30b-a3b")
    with pytest.raises(SimbatchError, match=r"^m\.decoder_sparse_step: only 1"):
        spec_from_hf({**qwen, "decoder_sparse_step": 2}, "q", "m")
    with pytest.raises(SimbatchError, match=r"^m\.mlp_only_layers: only an empty list"):
        spec_from_hf({**qwen, "mlp_only_layers": [0, 1]}, "q", "m")
    qwen2 = {**qwen, "architectures": ["Qwen2MoeForCausalLM"], "shared_expert_intermediate_size": 5632}
    assert spec_from_hf(qwen2, "q", "m").shared_expert_intermediate_size == 5632
    with pytest.raises(SimbatchError, match=r"^m\.shared_expert_intermediate_size: missing; needed for "
                                            r"Qwen2MoeForCausalLM"):
        spec_from_hf({**qwen, "architectures": ["Qwen2MoeForCausalLM"]}, "q", "m")


def test_quantization_config():
    gptq = {**LLAMA_8B, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}
    assert spec_from_hf(gptq, "x", "m").weight_quant == "int4"
    bnb = {**LLAMA_8B, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}
    with pytest.raises(SimbatchError, match=r"^model\.hf_config\.quantization_config\.quant_method: "
                                            r"'bitsandbytes' is not read; give the format in the scenario"):
        get_model({"hf_config": bnb})
    # A format given in the scenario wins, and the checkpoint's is not read.
    assert get_model({"hf_config": bnb, "weight_quant": "int4"}).weight_quant == "int4"
    assert get_model({"config": "deepseek-v3.json", "weight_quant": "none"},
                     base_dir=CONFIGS).weight_quant == "none"


def test_opt_embedding_projection_is_refused():
    with pytest.raises(SimbatchError, match=r"^m\.word_embed_proj_dim: 512 differs from hidden_size"):
        spec_from_hf({**read("opt-66b"), "word_embed_proj_dim": 512}, "o", "m")


def test_invalid_json_names_the_file_and_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "hidden_size": 4096,\n  "num_hidden_layers": 32,,\n}\n')
    with pytest.raises(SimbatchError) as info:
        get_model({"config": str(path)})
    message = str(info.value)
    assert message.startswith("model.config: ") and str(path) in message and "line 3" in message
    assert "\n" not in message


@pytest.mark.parametrize("content,fragment", [
    (b"\xff\xfe{}", "not UTF-8 text"),
    (b"[1, 2]", "holds a JSON list, expected an object"),
])
def test_unreadable_configs_are_one_line_errors(tmp_path, content, fragment):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(SimbatchError, match=fragment) as info:
        read_hf_config(path, "model.config")
    assert str(path) in str(info.value)
    with pytest.raises(SimbatchError, match=r"^model\.config: .*nope\.json: config\.json not found"):
        get_model({"config": "nope.json"}, base_dir=tmp_path)


def test_importing_simbatch_does_not_read_configs():
    code = "import sys, simbatch, simbatch.catalog.models; print('simbatch.catalog.hf_config' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr


def test_the_configs_are_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = data["simbatch.catalog"]
    for path in CONFIGS.iterdir():
        relative = path.relative_to(ROOT / "simbatch" / "catalog").as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative


# --- Llama 4 Scout (RedHatAI's FP8-dynamic checkpoint) ------------------------------------------

SCOUT = "llama-4-scout-17b-16e-fp8"


def _vision_tower_params() -> int:
    """Llama-4-Scout's vision tower and projector (transformers' Llama4VisionModel and
    Llama4MultiModalProjector) from the real vision_config (hidden 1408, 34 layers, MLP 5632,
    image 336, patch 14, projector 4096, text hidden 5120), which the shipped file leaves out."""
    h, mlp, layers, patches = 1408, 5632, 34, (336 // 14) ** 2
    layer = 4 * (h * h + h) + (h * mlp + mlp) + (mlp * h + h) + 4 * h  # attention, fc1, fc2, 2 LayerNorms
    stem = 3 * 14 * 14 * h + h + (patches + 1) * h + 4 * h  # patch linear, class token, positions, 2 norms
    adapter = mlp * 4096 + 4096 * 4096  # the pixel-shuffle MLP: fc1 5632 -> 4096, fc2 4096 -> 4096
    return stem + layers * layer + adapter + 4096 * 5120  # the projector onto the text model


def test_llama4_scout_reads_its_text_model():
    spec = spec_from_hf(read(SCOUT), SCOUT, "model")
    assert (spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim) == \
        (48, 5120, 40, 8, 128)
    assert (spec.num_experts, spec.experts_per_token, spec.num_moe_layers, spec.num_dense_layers) == (16, 1, 48, 0)
    # One shared expert as wide as a routed one (vLLM's Llama4MoE); 16384 is the (unused) dense width.
    assert spec.moe_intermediate_size == spec.shared_expert_intermediate_size == 8192
    assert spec.intermediate_size == 16384 and spec.vocab_size == 202048 and not spec.tied_embeddings
    assert spec.kv_bytes_per_token == 48 * 2 * 8 * 128 * 2
    assert spec.max_context == 10485760  # the Instruct model's 10M positions


def test_llama4_scout_counts_against_published_totals():
    # Meta's model card: 17B activated, 109B total (that total counts the vision tower too).
    spec = get_model(SCOUT)
    assert spec.num_params == 107_769_861_120  # the text model: 48 x 2.2 B of layers, 2.07 B of embeddings
    assert spec.num_params + _vision_tower_params() == pytest.approx(109e9, rel=0.01)  # 108.64 B
    # "17B" is rounded to the billion; simbatch's 17.17 B also counts the whole input embedding
    # table (1.03 B, of which a token reads one row).
    assert spec.active_params == pytest.approx(17e9, rel=0.02)


def test_compressed_tensors_fp8_with_attention_kept_16bit():
    spec = get_model({"config": f"{SCOUT}.json"}, base_dir=CONFIGS)
    assert spec.weight_quant == "fp8" and spec.attention_16bit
    # The attention projections stay at 2 bytes a weight: 48 x 62.9 M of them, one byte more each.
    attention = 48 * (5120 * (5120 + 2 * 1024) + 5120 * 5120)
    assert spec.attention_kept_bytes() == attention
    assert spec.weight_bytes == replace(spec, attention_16bit=False).weight_bytes + attention
    assert spec.attention_kept_bytes(4) == attention / 4
    assert replace(spec, weight_quant="none").attention_kept_bytes() == 0.0  # 16-bit anyway
    # Without self_attn in the ignore list every linear layer is FP8.
    quant = read(SCOUT)["quantization_config"]
    ignore = [e for e in quant["ignore"] if "self_attn" not in e]
    fp8 = spec_from_hf({**read(SCOUT), "quantization_config": {**quant, "ignore": ignore}}, "s", "m")
    assert fp8.weight_quant == "fp8" and not fp8.attention_16bit
    # Module names spelled out, as the Hub file lists them, read the same as the patterns.
    names = ["language_model.lm_head", "language_model.model.layers.0.self_attn.q_proj",
             "language_model.model.layers.0.feed_forward.router", "vision_model.patch_embedding.linear",
             "multi_modal_projector.linear_1"]
    spelled = spec_from_hf({**read(SCOUT), "quantization_config": {**quant, "ignore": names}}, "s", "m")
    assert spelled.attention_16bit
    # A format in the model entry skips quantization_config, and the 16-bit attention with it.
    assert not get_model({"config": f"{SCOUT}.json", "weight_quant": "fp8"}, base_dir=CONFIGS).attention_16bit


def _with_group(change: dict, path: tuple = ()) -> dict:
    """The Scout config with its one scheme's ``path`` (a key chain under group_0) updated."""
    config = json.loads(json.dumps(read(SCOUT)))
    target = config["quantization_config"]["config_groups"]["group_0"]
    for key in path:
        target = target[key]
    target.update(change)
    return config


@pytest.mark.parametrize("config,field,fragment", [
    (_with_group({"type": "int"}, ("weights",)), "config_groups.group_0.weights.type", "'int' is not read"),
    (_with_group({"num_bits": 4}, ("weights",)), "config_groups.group_0.weights.num_bits", "4 is not read"),
    (_with_group({"input_activations": None}), "config_groups.group_0.input_activations",
     r"missing \(weight-only FP8 is not modelled\)"),
    (_with_group({"weights": [8]}), "config_groups.group_0.weights", "expected a mapping, got \\[8\\]"),
])
def test_other_compressed_tensors_schemes_are_refused(config, field, fragment):
    with pytest.raises(SimbatchError, match=rf"^model\.hf_config\.quantization_config\.{field}: {fragment}") as info:
        get_model({"hf_config": config})
    assert "\n" not in str(info.value)


def test_compressed_tensors_groups_and_ignore_lists_outside_the_model_are_refused():
    config = read(SCOUT)
    quant = config["quantization_config"]
    two = {**quant, "config_groups": {"a": quant["config_groups"]["group_0"], "b": {}}}
    with pytest.raises(SimbatchError, match=r"^m\.quantization_config\.config_groups: expected one "
                                            r"quantisation scheme, got 2 groups"):
        spec_from_hf({**config, "quantization_config": two}, "s", "m")
    shared = {**quant, "ignore": quant["ignore"] + ["re:.*shared_expert"]}
    with pytest.raises(SimbatchError, match=r"^m\.quantization_config\.ignore: 're:\.\*shared_expert' keeps "
                                            r"layers in 16 bits that would be priced quantised"):
        spec_from_hf({**config, "quantization_config": shared}, "s", "m")
    with pytest.raises(SimbatchError, match=r"^m\.quantization_config\.ignore: expected a list"):
        spec_from_hf({**config, "quantization_config": {**quant, "ignore": "lm_head"}}, "s", "m")


@pytest.mark.parametrize("edit,field,fragment", [
    (lambda c: c.pop("text_config"), "text_config",
     "missing; needed for Llama4ForConditionalGeneration \\(its text model's shapes\\)"),
    (lambda c: c.update(text_config=[5120, 48]), "text_config",
     "expected a mapping \\(the text model's config\\), got list"),
    (lambda c: c["text_config"].update(num_local_experts=[16]), "text_config.num_local_experts",
     "expected a positive integer, got \\[16\\]"),
    (lambda c: c["text_config"].update(hidden_size=[5120]), "text_config.hidden_size",
     "expected a positive integer, got \\[5120\\]"),
    (lambda c: c["text_config"].pop("intermediate_size_mlp"), "text_config.intermediate_size_mlp",
     "missing; needed for Llama4ForConditionalGeneration"),
    (lambda c: c["text_config"].update(interleave_moe_layer_step=2), "text_config.interleave_moe_layer_step",
     "only 1 \\(a mixture of experts in every layer, as in Scout\\) is supported"),
    (lambda c: c["text_config"].update(moe_layers=[1, 3, 5]), "text_config.moe_layers",
     "only every layer \\(0 to 47\\) is supported, got \\[1, 3, 5\\]"),
])
def test_hostile_llama4_copies_name_the_file_and_field(tmp_path, edit, field, fragment):
    config = json.loads(json.dumps(read(SCOUT)))
    edit(config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SimbatchError) as info:
        get_model({"config": str(path)})
    message = str(info.value)
    assert re.match(rf"^model\.config\.{re.escape(field)}: {fragment} \(in {re.escape(str(path))}\)$", message), \
        message
    assert "\n" not in message


def test_llama4_every_layer_listed_and_model_type_read():
    config = read(SCOUT)
    every = {**config, "text_config": {**config["text_config"], "moe_layers": list(range(48))}}
    assert spec_from_hf(every, SCOUT, "m") == MODEL_PRESETS[SCOUT]
    no_arch = {k: v for k, v in config.items() if k != "architectures"}
    assert spec_from_hf(no_arch, SCOUT, "m") == MODEL_PRESETS[SCOUT]  # model_type llama4
    # The text model on its own (Llama4ForCausalLM, model_type llama4_text): its fields at the top.
    text = {**config["text_config"], "architectures": ["Llama4ForCausalLM"],
            "quantization_config": config["quantization_config"]}
    assert spec_from_hf(text, SCOUT, "m") == MODEL_PRESETS[SCOUT]


def test_attention_16bit_prices_the_attention_at_16_bits():
    from simbatch.core.plan import StepPlan
    from simbatch.costmodel.roofline import RooflineCostModel

    spec = get_model(SCOUT)
    kept, quantised = (RooflineCostModel(s, "h100-sxm", 4) for s in (spec, replace(spec, attention_16bit=False)))
    assert kept._lin_weight_bytes - quantised._lin_weight_bytes == spec.attention_kept_bytes(4)
    prompt = StepPlan(request_ids=[0], num_new_tokens=[4096], num_context_tokens=[0], num_decode_slots=0)
    decode = StepPlan(request_ids=list(range(8)), num_new_tokens=[1] * 8, num_context_tokens=[1000] * 8,
                      num_decode_slots=8)
    for plan in (prompt, decode):
        assert kept.step_cost(plan).seconds > quantised.step_cost(plan).seconds
    # A 16-bit model is unchanged by the flag (bit for bit).
    dense = get_model("llama-3.1-8b")
    assert RooflineCostModel(replace(dense, attention_16bit=True), "h100-sxm", 1).step_cost(prompt).seconds == \
        RooflineCostModel(dense, "h100-sxm", 1).step_cost(prompt).seconds

