"""FP8 (and INT8) tensor cores speed up a GEMM's arithmetic, not its memory-bound parts.

roofline.quantized_kept_seconds: the fitted 16-bit linear term includes the GEMMs' output
writes and the layer's elementwise kernels, which keep their time when the weights run on
tensor cores twice as fast (docs/cost_models.md, "Quantised weights").
"""

import pytest

from simbatch.catalog.hardware import get_gpu
from simbatch.catalog.models import get_model
from simbatch.core.plan import StepPlan
from simbatch.costmodel.model_terms import quantized_kept_seconds
from simbatch.costmodel.roofline import RooflineCostModel
from simbatch.costmodel.roofline_params import DEFAULT_PARAMS
from simbatch.costmodel.work import decode_work
from simbatch.scenario.quantization import apply_quantization

BF16 = get_model("llama-2-70b")
FP8 = apply_quantization(BF16, {"weights": "fp8"})


def kept_elements_llama2_70b(tp: int) -> int:
    """Llama-2-70B's memory-bound elements per token per GPU, counted by hand: per layer the
    QKV (q + 2 kv) and O (h) outputs, two RMSNorms, residual adds and RoPE (7 h + 2 (q + kv)),
    gate+up (2 w) and down (h) outputs and SiLU-mul's 2 w in, w out."""
    h, q, kv, w = 8192, 8192 // tp, 1024 // tp, 28672 // tp
    return 80 * ((q + 2 * kv + h) + (7 * h + 2 * (q + kv)) + (2 * w + h) + (2 * w + w))


@pytest.mark.parametrize("gpu,tp", [("h100-sxm", 1), ("h100-sxm", 4), ("h200", 1), ("b200", 2)])
def test_compute_bound_fp8_linear_is_half_the_gemm_plus_half_the_memory_bound_part(gpu, tp):
    g, p = get_gpu(gpu), DEFAULT_PARAMS
    prefill = StepPlan([0], [8192], [0])
    fp8 = RooflineCostModel(FP8, gpu, tp).step_cost(prefill).breakdown["linear"]
    bf16 = RooflineCostModel(BF16, gpu, tp).step_cost(prefill).breakdown["linear"]
    kept = 2 * kept_elements_llama2_70b(tp) / (g.hbm_bandwidth * p["bw_eff"])  # seconds per token
    speedup = g.fp8_flops / g.peak_flops
    assert speedup == pytest.approx(2, rel=1e-3)
    assert fp8 == pytest.approx(bf16 / speedup + 8192 * kept * (1 - 1 / speedup), rel=1e-9)


def test_the_kept_share_grows_with_tensor_parallelism():
    # Norms and residual adds run on the whole hidden state on every GPU; the GEMMs split.
    # (Vidur's A100 Llama-2-70B timings show the same: non-GEMM ops 4.3 / 5.6 / 8.3 / 13.3 %
    # of the layer at TP 1 / 2 / 4 / 8, 1,024-4,096 tokens.)
    shares = []
    for tp in (1, 2, 4, 8):
        cm = RooflineCostModel(FP8, "h100-sxm", tp)
        lin = cm.step_cost(StepPlan([0], [4096], [0])).breakdown["linear"]
        shares.append(4096 * quantized_kept_seconds(FP8, cm.gpu, tp, DEFAULT_PARAMS) / lin)
    assert shares == sorted(shares) and shares[0] > 0.02 and shares[-1] < 0.3


def test_sixteen_bit_and_weight_only_prices_are_unchanged():
    for model, gpu in ((BF16, "h100-sxm"), (FP8, "a100-80gb"),
                       (apply_quantization(BF16, {"weights": "int4"}), "h100-sxm")):
        assert quantized_kept_seconds(model, get_gpu(gpu), 2, DEFAULT_PARAMS) == 0.0
    cm = RooflineCostModel(BF16, "h100-sxm", 2)
    g, p = cm.gpu, DEFAULT_PARAMS
    weights = BF16.dense_layer_params(2)
    tokens = 4096  # compute-bound: tokens plus the ramp's tail, at the 16-bit rate, nothing else
    lin = cm.step_cost(StepPlan([0], [tokens], [0])).breakdown["linear"]
    assert lin == 2 * weights * (tokens + p["gemm_ramp_tokens"]) / (g.peak_flops * p["compute_eff"])


def test_memory_bound_decode_still_reads_half_the_bytes():
    a, b = RooflineCostModel(BF16, "h100-sxm", 2), RooflineCostModel(FP8, "h100-sxm", 2)
    one = decode_work(4, 400)
    assert b.price(one, one, 4).breakdown["linear"] == pytest.approx(
        0.5 * a.price(one, one, 4).breakdown["linear"], rel=0.01)
