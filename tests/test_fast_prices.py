"""The fast path's O(1) prices are bit-identical to pricing the plans they stand for."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbatch.core.plan import StepPlan
from simbatch.costmodel import RooflineCostModel, build_cost_model
from simbatch.costmodel.profile import ProfileCostModel
from simbatch.costmodel.work import PricedByWork

ROOFLINE = RooflineCostModel("llama-2-7b", "a100-80gb")
# The default cost model for a shipped pair is measured (Vidur's A100 profile).
PROFILE = build_cost_model(None, "llama-2-7b", "a100-80gb")


def same(a, b) -> bool:
    return (a.seconds == b.seconds and a.breakdown == b.breakdown
            and a.useful_flops == b.useful_flops and a.useful_bytes == b.useful_bytes)


def test_the_default_model_for_a_shipped_pair_is_a_profile():
    assert isinstance(PROFILE, ProfileCostModel)


@pytest.mark.parametrize("cm", [ROOFLINE, PROFILE], ids=["roofline", "profile"])
@settings(max_examples=60, deadline=None)
@given(ctx=st.lists(st.integers(1, 4096), min_size=1, max_size=160),
       chunks=st.lists(st.tuples(st.integers(1, 512), st.integers(0, 4000)), max_size=3))
def test_mixed_and_decode_costs_equal_step_cost(cm, ctx, chunks):
    n = len(ctx)
    new = [k for k, _ in chunks]
    cctx = [c for _, c in chunks]
    plan = StepPlan(list(range(n + len(chunks))), [1] * n + new, ctx + cctx, None, n)
    assert same(cm.mixed_cost(n, sum(ctx), new, cctx), cm.step_cost(plan))
    if not chunks:
        assert same(cm.decode_cost(n, sum(ctx)), cm.step_cost(plan))


@pytest.mark.parametrize("cm", [ROOFLINE, PROFILE], ids=["roofline", "profile"])
@settings(max_examples=40, deadline=None)
@given(slots=st.integers(1, 64), dead=st.integers(0, 63), context=st.integers(1, 4096))
def test_padded_decode_cost_equals_step_cost(cm, slots, dead, context):
    dead = min(dead, slots - 1)
    live = slots - dead
    plan = StepPlan(list(range(live)) + [-1] * dead, [1] * live + [0] * dead, [context] * slots,
                    [0] * live + [1] * dead, slots)
    assert same(cm.padded_decode_cost(slots, live, context), cm.step_cost(plan))


@pytest.mark.parametrize("overheads", [{}, {"per_seq_overhead_s": 3e-5, "per_token_overhead_s": 1e-5},
                                       {"launch_floor_s": 6e-3}])
@pytest.mark.parametrize("tp", [1, 2])
def test_a_padded_run_priced_at_once_is_each_step_priced_alone(overheads, tp):
    # The fast path prices a padded batch's whole run of decode steps with numpy
    # (RooflineCostModel.padded_decode_costs); every figure must be the per-step price.
    models = [RooflineCostModel("llama-2-7b", "a100-80gb", tensor_parallel=tp, **overheads)]
    if tp == 1 and not overheads:
        models.append(build_cost_model(None, "llama-2-7b", "a100-80gb"))  # the shipped profile (per-step loop)
    contexts = range(0, 6000, 13)
    for cm in models:
        for slots, live in ((1, [1]), (8, [8]), (32, [5]), (32, [32, 20, 20, 7, 1])):
            # live rows per step: a constant, or falling as rows finish (whole stretches of each)
            lives = [live[i * len(live) // len(contexts)] for i in range(len(contexts))]
            seconds, flops, nbytes = cm.padded_decode_costs(slots, lives, contexts)
            alone = [cm.padded_decode_cost(slots, n, c) for n, c in zip(lives, contexts)]
            assert seconds == [c.seconds for c in alone]
            assert flops == [c.useful_flops for c in alone]
            assert nbytes == [c.useful_bytes for c in alone]


# Dense roofline models whose two-stream price takes RooflineCostModel._two_stream_cost (tensor
# parallelism, FP8 weights' kept compute term, per-sequence and per-token overheads, no tiling),
# and an MoE one that keeps the general price_streams.
STREAM_MODELS = [
    ROOFLINE,
    RooflineCostModel("llama-2-70b", "h100-sxm", tensor_parallel=4, per_seq_overhead_s=3e-5,
                      per_token_overhead_s=1e-6),
    RooflineCostModel({"base": "llama-2-70b", "weight_quant": "fp8"}, "h100-sxm", tensor_parallel=2),
    RooflineCostModel("llama-3-8b", "h100-sxm", gemm_tile_tokens=1),
    RooflineCostModel("mixtral-8x7b", "a100-80gb", tensor_parallel=2),
    PROFILE,
    # A launch floor (an eager engine's kernel-issue time) that binds on some steps and not others.
    RooflineCostModel("llama-2-70b", "h100-sxm", tensor_parallel=4, per_seq_overhead_s=3e-5,
                      launch_floor_s=0.03),
    RooflineCostModel("mixtral-8x7b", "a100-80gb", tensor_parallel=2, launch_floor_s=0.03),
    build_cost_model(None, "llama-2-7b", "a100-80gb", overhead={"launch_floor_s": 0.02}),
]
STREAM_IDS = ["7b", "70b-tp4-overheads", "70b-fp8", "8b-untiled", "moe", "profile", "70b-floor", "moe-floor",
              "profile-floor"]


@pytest.mark.parametrize("cm", STREAM_MODELS, ids=STREAM_IDS)
@settings(max_examples=80, deadline=None)
@given(ctx=st.lists(st.integers(1, 4096), min_size=1, max_size=160),
       chunks=st.lists(st.tuples(st.integers(0, 2048), st.integers(0, 4000)), min_size=1, max_size=3))
def test_a_two_stream_mixed_cost_equals_step_cost(cm, ctx, chunks):
    # The fast path prices chunked prefill's two-stream steps with mixed_cost(..., streams=2);
    # every figure, the breakdown included (same keys, same order), must be the plan's price.
    n = len(ctx)
    new, cctx = [k for k, _ in chunks], [c for _, c in chunks]
    plan = StepPlan(list(range(n + len(chunks))), [1] * n + new, ctx + cctx, None, n, 2)
    fast, slow = cm.mixed_cost(n, sum(ctx), new, cctx, 2), cm.step_cost(plan)
    assert same(fast, slow)
    assert list(fast.breakdown) == list(slow.breakdown)


@pytest.mark.parametrize("cm", STREAM_MODELS, ids=STREAM_IDS)
@settings(max_examples=80, deadline=None)
@given(ctx=st.lists(st.integers(0, 4096), min_size=1, max_size=300), prompt=st.integers(1, 8192),
       cached=st.integers(0, 4096))
def test_decode_prompt_and_mixed_shortcuts_equal_the_general_price(cm, ctx, prompt, cached):
    # RooflineCostModel prices a steady decode step (decode_cost), a step of one prompt or
    # chunk alone (step_cost) and chunked prefill's mixed steps (mixed_cost) from its per-count
    # terms; each must be the general path's price (PricedByWork's), breakdown order included.
    n = len(ctx)
    fast, slow = cm.decode_cost(n, sum(ctx)), PricedByWork.decode_cost(cm, n, sum(ctx))
    assert same(fast, slow) and list(fast.breakdown) == list(slow.breakdown)
    plan = StepPlan([7], [prompt], [cached])
    fast, slow = cm.step_cost(plan), PricedByWork.step_cost(cm, plan)
    assert same(fast, slow) and list(fast.breakdown) == list(slow.breakdown)
    # chunked prefill's mixed step, on one stream and on two (an empty chunk included)
    for chunks in ([prompt], [prompt, 0, cached // 3 + 1], [0]):
        cctx = [cached] * len(chunks)
        for streams in (1, 2):
            fast = cm.mixed_cost(n, sum(ctx), chunks, cctx, streams)
            slow = PricedByWork.mixed_cost(cm, n, sum(ctx), chunks, cctx, streams)
            assert same(fast, slow) and list(fast.breakdown) == list(slow.breakdown)


def test_the_fast_prices_are_declared_once_and_offered_by_every_work_priced_model():
    """The engine asks a backend for its fast-path prices by the names the interface declares
    (costmodel.base.FastPrices, issue 34 §4: five methods were found with getattr, undeclared);
    every cost model that prices work has them all, and a name outside the list is an error."""
    import pytest

    from simbatch.costmodel.base import FAST_PRICES, fast_price
    from simbatch.costmodel.work import PricedByWork

    assert FAST_PRICES == ("decode_cost", "mixed_cost", "padded_decode_cost", "padded_decode_costs",
                           "price_streams")
    assert all(callable(getattr(PricedByWork, name)) for name in FAST_PRICES)
    assert fast_price(object(), "decode_cost") is None
    with pytest.raises(ValueError, match="not a fast price"):
        fast_price(object(), "decode_costs")
