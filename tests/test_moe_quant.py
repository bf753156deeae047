"""Mixtures of experts, multi-head latent attention and quantised storage in the model spec,
the roofline and the scenario (issue 17, items 2 and 3)."""

from __future__ import annotations

import pytest

from simbatch.catalog.models import get_model
from simbatch.catalog.parallelism import SLICED, ExpertLayout
from simbatch.core.plan import StepPlan
from simbatch.costmodel import RooflineCostModel, build_cost_model
from simbatch.costmodel.work import decode_work
from simbatch.errors import SimbatchError
from simbatch.scenario.quantization import apply_quantization
from simbatch.scenario.spec import from_dict

# Shapes from each model's Hugging Face config.json (mistralai/Mixtral-8x7B-v0.1,
# deepseek-ai/DeepSeek-V3); given inline so these tests do not depend on the presets.
MIXTRAL = dict(name="mixtral", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
               intermediate_size=14336, vocab_size=32000, gated_mlp=True, max_context=32768,
               num_experts=8, experts_per_token=2, moe_intermediate_size=14336)
DEEPSEEK_V3 = dict(name="dsv3", num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128, head_dim=192,
                   intermediate_size=18432, vocab_size=129280, gated_mlp=True, max_context=163840,
                   num_experts=256, experts_per_token=8, moe_intermediate_size=2048,
                   shared_expert_intermediate_size=2048, num_dense_layers=3, kv_lora_rank=512, q_lora_rank=1536,
                   qk_rope_head_dim=64, v_head_dim=128)


def test_published_parameter_counts():
    # Mixtral's model card: 46.7B parameters, 12.9B used per token; DeepSeek-V3's report:
    # 671B total, 37B activated.
    mix, ds = get_model(MIXTRAL), get_model(DEEPSEEK_V3)
    assert mix.num_params / 1e9 == pytest.approx(46.7, rel=0.01)
    assert mix.active_params / 1e9 == pytest.approx(12.9, rel=0.01)
    assert ds.num_params / 1e9 == pytest.approx(671, rel=0.01)
    assert ds.active_params / 1e9 == pytest.approx(37, rel=0.03)


def test_mla_caches_one_latent_replicated_over_tp():
    ds = get_model(DEEPSEEK_V3)
    # DeepSeek-V2 paper, table 1: MLA caches (d_c + d_h^R) = 512 + 64 elements per token and layer.
    assert ds.kv_bytes_per_token == 61 * (512 + 64) * 2
    assert ds.kv_bytes_per_token_per_gpu(8) == ds.kv_bytes_per_token  # not split by heads
    llama = get_model("llama-3-70b")  # 8 KV heads: split up to TP 8, replicated beyond
    assert llama.kv_bytes_per_token_per_gpu(8) == llama.kv_bytes_per_token / 8
    assert llama.kv_bytes_per_token_per_gpu(16) == llama.kv_bytes_per_token / 8


def _step_bytes(model, gpu: str, tp: int, batch: int, layout: ExpertLayout = SLICED) -> float:
    """HBM bytes of a decode step, all ``tp`` GPUs together."""
    cm = RooflineCostModel(model, gpu, tp, layout=layout)
    w = decode_work(batch, batch)  # one cached token each: the weights dominate
    return cm.price(w, w, batch).useful_bytes * tp


@pytest.mark.parametrize("tp, expert_parallel", [(1, False), (2, False), (2, True), (4, True)])
def test_moe_decode_reads_active_weights_at_batch_one_and_all_of_them_at_large_batches(tp, expert_parallel):
    # Experts sliced over the TP group or held whole by one GPU each (expert parallelism):
    # the GPUs together read the same weights.
    mix, layout = get_model(MIXTRAL), ExpertLayout(expert_parallel=expert_parallel)
    embed = mix.vocab_size * mix.hidden_size  # the input embedding is a lookup, not read whole
    active = (mix.active_params - embed) * 2
    total = (mix.num_params - embed) * 2
    assert _step_bytes(mix, "h100-sxm", tp, 1, layout) == pytest.approx(active, rel=0.01)
    assert _step_bytes(mix, "h100-sxm", tp, 64, layout) == pytest.approx(total, rel=0.01)  # (3/4)^64: all 8 touched
    series = [_step_bytes(mix, "h100-sxm", tp, b, layout) for b in (1, 2, 4, 8, 16)]
    assert series == sorted(series) and series[1] / series[0] > 1.5  # a second expert per layer


def test_moe_decode_is_far_cheaper_than_a_dense_model_of_its_size_at_small_batches():
    mix = get_model(MIXTRAL)
    dense = get_model({**MIXTRAL, "name": "dense-47b", "num_experts": 0, "experts_per_token": 0,
                       "moe_intermediate_size": 0, "intermediate_size": 8 * 14336})
    assert dense.num_params == pytest.approx(mix.num_params, rel=0.001)
    moe_cm, dense_cm = RooflineCostModel(mix, "h100-sxm", 2), RooflineCostModel(dense, "h100-sxm", 2)

    def seconds(cm, batch):
        return cm.step_cost(StepPlan(list(range(batch)), [1] * batch, [512] * batch, None, batch)).seconds

    assert seconds(moe_cm, 1) < 0.45 * seconds(dense_cm, 1)
    assert seconds(moe_cm, 256) > 0.85 * seconds(dense_cm, 256)  # every expert is read
    # A prefill's FLOPs follow the active parameters.
    big = StepPlan([0], [4096], [0])
    assert moe_cm.step_cost(big).useful_flops < 0.4 * dense_cm.step_cost(big).useful_flops


def test_moe_breakdown_names_the_experts_and_sums():
    cm = RooflineCostModel(get_model(MIXTRAL), "a100-80gb", 2)
    cost = cm.step_cost(StepPlan([0, 1], [1, 300], [100, 0], None, 1))
    assert cost.breakdown["experts"] > cost.breakdown["linear"] > 0
    assert sum(cost.breakdown.values()) == cost.seconds


def test_fp8_weights_halve_the_weight_bytes_and_double_the_rate_where_the_gpu_has_fp8():
    bf16 = get_model("llama-2-70b")
    fp8 = apply_quantization(bf16, {"weights": "fp8"})
    assert fp8.weight_bytes < 0.52 * bf16.weight_bytes  # embeddings and LM head stay 16-bit
    for gpu in ("h100-sxm", "a100-80gb"):
        a, b = RooflineCostModel(bf16, gpu, 4), RooflineCostModel(fp8, gpu, 4)
        one = decode_work(1, 1)  # memory-bound: the weights' bytes
        assert b.price(one, one, 1).breakdown["linear"] == pytest.approx(
            0.5 * a.price(one, one, 1).breakdown["linear"], rel=0.01)
    prefill = StepPlan([0], [8192], [0])  # compute-bound: the tensor cores' rate
    h100 = RooflineCostModel(fp8, "h100-sxm", 4).step_cost(prefill).breakdown["linear"]
    h100_bf16 = RooflineCostModel(bf16, "h100-sxm", 4).step_cost(prefill).breakdown["linear"]
    a100 = RooflineCostModel(fp8, "a100-80gb", 4).step_cost(prefill).breakdown["linear"]
    a100_bf16 = RooflineCostModel(bf16, "a100-80gb", 4).step_cost(prefill).breakdown["linear"]
    # Twice the rate for the GEMMs' arithmetic; their output writes and the elementwise kernels
    # keep their time (roofline.quantized_kept_seconds; tests/test_fp8_gemm.py checks its size)
    assert 0.52 * h100_bf16 < h100 < 0.6 * h100_bf16
    assert a100 == pytest.approx(a100_bf16, rel=0.01)  # no FP8 tensor cores: dequantised to 16 bits


def test_int4_weights_take_a_quarter_plus_their_group_scales():
    bf16 = get_model("llama-2-7b")
    int4 = apply_quantization(bf16, {"weights": "int4"})
    assert int4.weight_bytes_per_param == 0.5 + 2 / 128
    linear = bf16.linear_params
    assert int4.weight_bytes == pytest.approx(bf16.weight_bytes - linear * (2 - 0.515625))


def test_fp8_kv_cache_doubles_the_kv_capacity():
    data = {"workload": {"synthetic": {"num_requests": 5, "arrival": {"kind": "poisson", "rate": 1.0},
                                       "prompt": {"kind": "constant", "value": 100},
                                       "output": {"kind": "constant", "value": 10}}},
            "model": "llama-3-8b", "hardware": "h100-sxm", "policy": {"kind": "continuous"}}
    from simbatch.engine.setup import kv_blocks_per_replica

    plain = from_dict(dict(data))
    fp8 = from_dict({**data, "quantization": {"kv_cache": "fp8"}})
    assert fp8.model.kv_bytes_per_token == plain.model.kv_bytes_per_token / 2
    blocks = [kv_blocks_per_replica(s, s.model, s.gpu) for s in (plain, fp8)]
    assert blocks[1] == pytest.approx(2 * blocks[0], rel=0.001)


@pytest.mark.parametrize("spec, field, text", [
    ({"weights": "fp4"}, "quantization.weights", "unknown format 'fp4'"),
    ({"kv_cache": "int4"}, "quantization.kv_cache", "unknown format 'int4'"),
    ({"activations": "fp8"}, "quantization.activations", "unknown field"),
    ("fp8", "quantization", "expected a mapping"),
])
def test_bad_quantization_sections_name_the_field(spec, field, text):
    data = {"workload": {"synthetic": {"num_requests": 5, "arrival": {"kind": "poisson", "rate": 1.0},
                                       "prompt": {"kind": "constant", "value": 100},
                                       "output": {"kind": "constant", "value": 10}}},
            "model": "llama-3-8b", "hardware": "h100-sxm", "policy": {"kind": "continuous"},
            "quantization": spec}
    with pytest.raises(SimbatchError) as err:
        from_dict(data, "s.yaml")
    assert err.value.where == f"s.yaml: {field}" and text in str(err.value)


@pytest.mark.parametrize("fields, bad", [
    ({"experts_per_token": 9}, "experts_per_token"),
    ({"moe_intermediate_size": 0}, "moe_intermediate_size"),
    ({"num_dense_layers": 32}, "num_dense_layers"),
])
def test_inconsistent_moe_fields_are_one_line_errors(fields, bad):
    with pytest.raises(SimbatchError) as err:
        get_model({**MIXTRAL, **fields})
    assert err.value.where == f"model.{bad}"


def test_mla_and_dense_only_fields_are_checked():
    with pytest.raises(SimbatchError, match="kv_lora_rank"):
        get_model({**MIXTRAL, "v_head_dim": 128})
    with pytest.raises(SimbatchError, match="num_experts"):
        get_model({"base": "llama-2-7b", "experts_per_token": 2})
    with pytest.raises(SimbatchError) as err:
        get_model({**DEEPSEEK_V3, "qk_rope_head_dim": 192})
    assert err.value.where == "model.qk_rope_head_dim"


def test_profile_cost_models_refuse_what_they_did_not_measure_and_auto_picks_the_roofline():
    fp8 = apply_quantization(get_model("llama-2-7b"), {"weights": "fp8"})
    # llama-2-7b on an A100 has shipped measurements, but not in fp8.
    assert build_cost_model(None, "llama-2-7b", "a100-80gb").name == "profile"
    assert build_cost_model(None, fp8, "a100-80gb").name == "roofline"
    with pytest.raises(SimbatchError, match="fp8 weights: use kind roofline"):
        build_cost_model({"kind": "profile"}, fp8, "a100-80gb")
    with pytest.raises(SimbatchError, match="multi-head latent attention and fp8 weights: use kind roofline"):
        build_cost_model({"kind": "profile"}, get_model(DEEPSEEK_V3 | {"weight_quant": "fp8"}), "a100-80gb")
    # A mixture of experts is priced from a profile of its layers (tests/test_profile_moe.py):
    # Mixtral's are Llama-3-8B's, shipped for the A100; auto still picks the roofline.
    assert build_cost_model({"kind": "profile"}, get_model(MIXTRAL), "a100-80gb").name == "profile"
    assert build_cost_model(None, get_model(MIXTRAL), "a100-80gb").name == "roofline"


def test_dense_models_are_priced_as_the_plain_formulas_say():
    # Counts for a dense model come from the same spec methods; check them against the
    # textbook Llama-2-7B figures (6.74B parameters; 2 x 32 x 4096 x 2 bytes of KV a token).
    m = get_model("llama-2-7b")
    assert m.num_params / 1e9 == pytest.approx(6.74, rel=0.005)
    assert m.active_params == m.num_params and not m.is_moe and m.is_dense_standard
    assert m.kv_bytes_per_token_per_gpu(2) == m.kv_bytes_per_token / 2


def test_mfu_of_an_fp8_model_is_relative_to_the_fp8_peak():
    from simbatch.engine.simulation import simulate

    data = {"workload": {"synthetic": {"num_requests": 20, "arrival": {"kind": "poisson", "rate": 50.0},
                                       "prompt": {"kind": "constant", "value": 2000},
                                       "output": {"kind": "constant", "value": 4}}},
            "model": "llama-3-8b", "hardware": "h100-sxm", "policy": {"kind": "continuous"},
            "cost_model": {"kind": "roofline"}}
    fp8 = simulate(from_dict({**data, "quantization": {"weights": "fp8"}}))
    a100 = simulate(from_dict({**data, "hardware": "a100-80gb", "quantization": {"weights": "fp8"}}))
    assert fp8.peak_flops == 1979e12  # the H100's dense FP8 rate
    assert a100.peak_flops == 312e12  # no FP8 tensor cores: weights dequantised to 16 bits
