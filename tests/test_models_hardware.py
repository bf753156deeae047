"""Model shapes and GPU specs: preset figures and the get_* front doors."""

from __future__ import annotations

import pytest

from simbatch.catalog.hardware import GPU_PRESETS, GiB, GPUSpec, get_gpu
from simbatch.catalog.models import MODEL_PRESETS, ModelSpec, get_model
from simbatch.errors import SimbatchError

# Published parameter totals (model cards / HF safetensors metadata).
KNOWN_PARAMS = {
    "llama-2-7b": 6.74e9,
    "llama-2-13b": 13.02e9,
    "llama-2-70b": 68.98e9,
    "llama-3-8b": 8.03e9,
    "llama-3-70b": 70.55e9,
    "mistral-7b": 7.24e9,
    "opt-13b": 12.85e9,
    "yi-34b": 34.39e9,  # 01-ai/Yi-34B safetensors total: 34,388,917,248
}


@pytest.mark.parametrize("name,total", sorted(KNOWN_PARAMS.items()))
def test_param_counts_match_published_totals(name, total):
    assert get_model(name).num_params == pytest.approx(total, rel=0.02)


def test_kv_bytes_per_token():
    assert get_model("llama-2-7b").kv_bytes_per_token == 524_288  # 32 x 2 x 32 x 128 x 2
    assert get_model("llama-3-8b").kv_bytes_per_token == 131_072  # GQA: 8 KV heads
    assert get_model("llama-2-70b").kv_bytes_per_token == 327_680


def test_weight_bytes_and_linear_params():
    m = get_model("llama-2-7b")
    assert m.weight_bytes == 2 * m.num_params
    # 4 x 4096^2 (QKV + O) + 3 x 4096 x 11008 (gate, up, down)
    assert m.linear_params_per_layer == 4 * 4096**2 + 3 * 4096 * 11008
    opt = get_model("opt-13b")
    assert opt.linear_params_per_layer == 4 * 5120**2 + 2 * 5120 * 20480  # plain MLP


def test_tiny_presets_are_cpu_sized():
    assert get_model("tiny").num_params < 10e6
    assert get_model("small").num_params < 100e6
    for name in ("tiny", "small"):
        m = get_model(name)
        assert m.num_heads * m.head_dim == m.hidden_size
        assert m.num_heads % m.num_kv_heads == 0


def test_every_preset_is_consistent():
    for name, m in MODEL_PRESETS.items():
        assert m.name == name
        assert m.num_heads % m.num_kv_heads == 0
    for name, g in GPU_PRESETS.items():
        assert g.name == name and g.memory_bytes > 0  # the driver's figure where sourced: test_gpu_presets


def test_get_model_lookups():
    assert get_model("LLaMA-2-7B") is MODEL_PRESETS["llama-2-7b"]
    spec = MODEL_PRESETS["tiny"]
    assert get_model(spec) is spec
    custom = get_model({"base": "llama-3-8b", "max_context": 32768, "name": "llama-3-8b-32k"})
    assert custom.max_context == 32768 and custom.num_kv_heads == 8
    full = get_model({"name": "toy", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
                      "num_kv_heads": 1, "head_dim": 16, "intermediate_size": 128,
                      "vocab_size": 100, "gated_mlp": False, "max_context": 256})
    assert isinstance(full, ModelSpec) and full.dtype_bytes == 2


@pytest.mark.parametrize("bad,fragment", [
    ("gpt-5", "llama-2-7b"),                           # unknown preset: lists presets
    ({"base": "llama-2-7b", "layers": 3}, "layers"),   # unknown field named
    ({"base": "nope"}, "nope"),
    ({"name": "x", "num_layers": 2}, "missing"),
    ({"base": "tiny", "num_layers": 0}, "positive"),
    ({"base": "tiny", "num_layers": 2.5}, "positive"),
    ({"base": "tiny", "gated_mlp": "yes"}, "true or false"),
    ({"base": "tiny", "num_kv_heads": 3}, "divide"),
    (42, "mapping"),
])
def test_get_model_rejects(bad, fragment):
    with pytest.raises(SimbatchError, match=fragment) as info:
        get_model(bad, "scenario.model")
    assert str(info.value).startswith("scenario.model")


def test_gpu_presets_follow_the_datasheets():
    a100 = get_gpu("A100-80GB")
    assert a100.memory_bytes == 79.25 * GiB  # what the driver reports (simbatch/catalog/hardware.py)
    assert a100.hbm_bandwidth == 2039e9 and a100.peak_flops == 312e12
    assert get_gpu("h200").hbm_bandwidth == 4800e9
    assert get_gpu("l4").link_bandwidth < get_gpu("a40").link_bandwidth < a100.link_bandwidth
    assert get_gpu("a100-80gb-pcie").hbm_bandwidth == 1935e9
    assert {"a100-40gb", "a100-80gb", "a100-80gb-pcie", "h100-sxm", "h100-pcie", "h200", "l4",
            "a40"} <= set(GPU_PRESETS)  # every preset's figures and sources: tests/test_gpu_presets.py


def test_get_gpu_custom():
    g = get_gpu({"base": "h100-sxm", "hbm_bandwidth": "3.0e12", "name": "h100-derated"})
    assert g.hbm_bandwidth == 3.0e12 and g.peak_flops == 989e12
    spec = GPUSpec("x", 1 * GiB, 1e11, 1e13, 1e9, 0.0)
    assert get_gpu(spec) is spec
    assert get_gpu({"name": "x", "memory_bytes": GiB, "hbm_bandwidth": 1e11, "peak_flops": 1e13,
                    "link_bandwidth": 1e9, "link_latency_s": 0}).link_latency_s == 0


@pytest.mark.parametrize("bad,fragment", [
    ("tpu-v5", "a100-80gb"),
    ({"base": "h200", "tflops": 1}, "tflops"),
    ({"base": "h200", "peak_flops": 0}, "positive"),
    ({"base": "h200", "hbm_bandwidth": "fast"}, "number"),
    ({"base": "h200", "link_latency_s": -1e-6}, "positive"),
    ({"name": "x"}, "missing"),
    (["h200"], "mapping"),
])
def test_get_gpu_rejects(bad, fragment):
    with pytest.raises(SimbatchError, match=fragment) as info:
        get_gpu(bad, "scenario.gpu")
    assert str(info.value).startswith("scenario.gpu")
