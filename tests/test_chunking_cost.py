"""Chunked prefill's cost: the GEMM efficiency ramp, KV re-reads, and Sarathi-Serve's figure 9."""

from __future__ import annotations

from pathlib import Path

import pytest

from simbatch.costmodel import RooflineCostModel
from simbatch.costmodel.base import chunked_prefill_seconds
from simbatch.costmodel.roofline_params import DEFAULT_PARAMS
from simbatch.core.plan import StepPlan
from scriptkit import load_script

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SARATHI = SHARED / "measured" / "sarathi-serve-a100"
VIDUR = SHARED / "reference" / "gpu_profiles"



@pytest.fixture(scope="module")
def yi():
    return RooflineCostModel("yi-34b", "a100-80gb-pcie", tensor_parallel=2)


chunked = chunked_prefill_seconds


def test_smaller_chunks_cost_more_in_total(yi):
    for length in (2048, 4096, 8192):
        times = [chunked(yi, length, c) for c in (length, 2048, 1024, 512, 256) if c <= length]
        times = sorted(set(times), key=times.index)  # chunk == length is the unchunked step
        assert all(a < b for a, b in zip(times, times[1:])), (length, times)
    # The ramp alone (no per-step overhead, no attention) still makes chunking cost.
    bare = RooflineCostModel("yi-34b", "a100-80gb-pcie", tensor_parallel=2, step_overhead_s=0)
    one = bare.step_cost(StepPlan([0], [4096], [0])).breakdown["linear"]
    eight = sum(bare.step_cost(StepPlan([0], [512], [512 * i])).breakdown["linear"] for i in range(8))
    assert eight / one == pytest.approx(8 * (512 + 64) / (4096 + 64), rel=1e-6)


def test_chunk_attention_rereads_earlier_kv(yi):
    """A chunk over ctx earlier tokens scores c*ctx + c(c+1)/2 pairs and reads ctx + c tokens of KV."""
    from simbatch.costmodel.work import attn_sums
    assert attn_sums([512], [1536]) == (512 * 1536 + 512 * 513 // 2, 2048, 512)
    pieces = [yi.step_cost(StepPlan([0], [512], [512 * i])).breakdown["attn_prefill"] for i in range(4)]
    assert all(a < b for a, b in zip(pieces, pieces[1:]))
    # Summed causal pairs are the same chunked or not, so KV re-reads only add time.
    assert sum(pieces) >= yi.step_cost(StepPlan([0], [2048], [0])).breakdown["attn_prefill"]


def test_efficiency_ramp_is_monotone_and_saturates(yi):
    ramp = DEFAULT_PARAMS["gemm_ramp_tokens"]
    assert ramp > 0
    per_token = []
    for m in range(128, 16385, 128):  # compute-bound, tile-aligned sizes
        lin = yi.step_cost(StepPlan([0], [m], [0])).breakdown["linear"]
        per_token.append(lin / m)
    assert all(a >= b for a, b in zip(per_token, per_token[1:]))
    eff = [per_token[-1] / p for p in per_token]  # relative to 16k tokens
    assert eff[-1] == 1.0 and eff[0] < 0.75
    assert eff[(8192 // 128) - 1] > 0.995  # saturated by 8k tokens
    # Padding still rules below a tile: 1..64 tokens cost like 128 on the compute side.
    assert yi._gemm_tokens(1) == yi._gemm_tokens(64) == 128
    assert yi._gemm_tokens(512) == 512 + ramp


def test_ramp_keeps_fast_prices_identical(yi):
    plan = StepPlan([1, 2, 0], [1, 1, 700], [300, 500, 100], num_decode_slots=2)
    assert yi.mixed_cost(2, 800, [700], [100]) == yi.step_cost(plan)


@pytest.mark.skipif(not VIDUR.is_dir(), reason="shared/reference/gpu_profiles is absent")
def test_vidur_fit_reproduces_shipped_values():
    fit = load_script(REPO / "calibration" / "fit_roofline_vidur.py", "fit_roofline_vidur")
    for csv, model in fit.CHECKS:
        measured = fit.measured_per_layer_ms(VIDUR / csv)
        new = fit.errors(model, measured)
        old = fit.errors(model, measured, **fit.BEFORE)
        assert abs(new).max() < 0.2
        if model == "llama-2-70b":  # where Vidur shows the ramp: closer than before
            assert (new ** 2).mean() < (old ** 2).mean()


@pytest.mark.skipif(not SARATHI.is_dir(), reason="shared/measured/sarathi-serve-a100 is absent")
def test_benchmark_targets_on_sarathi():
    bench = load_script(REPO / "benchmarks" / "bench_fidelity.py", "bench_fidelity")
    cm = bench.cost_model()
    f9, t2 = bench.figure9(SARATHI, cm), bench.table2(SARATHI, cm)
    met = bench.targets(f9, t2)
    # Met: chunks of 512 come within ~6 pp of Sarathi's overhead on 2k-8k prompts,
    # chunked prompts always cost more than unchunked ones up to 8k.
    rows = f9[(f9.chunk_size == 512) & f9.prefill_length.isin(bench.TARGET_LENGTHS)]
    assert (rows.err_pp.abs() <= 6.0).all(), rows
    assert (f9[f9.chunk_size == 512].pred_rel > 1.1).all()
    # Known misses (see docs/cost_models.md): the ramp is smooth, Sarathi's 1024-token
    # chunks are as slow per token as 512 (a kernel-selection step Vidur shows only
    # faintly), and its engine's per-step costs are not modelled by default.
    assert not met["figure 9, chunk 1024, 2k-8k: relative overhead within 5 pp"]
    rows = f9[(f9.chunk_size == 1024) & f9.prefill_length.isin(bench.TARGET_LENGTHS)]
    assert (rows.err_pp.abs() <= 16.0).all(), rows
    prefill = t2[t2.batch_num_decode_tokens == 0].err.iloc[0]
    assert abs(prefill) < 0.2
