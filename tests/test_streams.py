"""Two streams: a step's decodes and prefill chunks overlap; the cost model's bounds hold."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbatch.api import run
from simbatch.core.plan import StepPlan
from simbatch.costmodel import RooflineCostModel
from simbatch.engine.simulation import simulate
from simbatch.scenario.spec import from_dict

CM = RooflineCostModel("llama-2-7b", "a100-80gb")


def mixed(ctx: list[int], chunks: list[int], streams: int) -> StepPlan:
    n = len(ctx)
    return StepPlan(list(range(n + len(chunks))), [1] * n + chunks, ctx + [0] * len(chunks), None, n, streams)


def test_a_mixed_step_splits_by_phase_and_a_pure_one_stays_whole():
    parts = mixed([100, 200], [300], 2).micro_batches()
    assert [p.request_ids for p in parts] == [[0, 1], [2]]
    assert [p.num_decode_slots for p in parts] == [2, 0]
    assert len(mixed([100, 200], [], 2).micro_batches()) == 1
    assert len(mixed([], [300, 40], 2).micro_batches()) == 1
    with pytest.raises(ValueError):
        mixed([1], [1], 3)


@settings(max_examples=80, deadline=None)
@given(ctx=st.lists(st.integers(1, 4096), min_size=1, max_size=128),
       chunks=st.lists(st.integers(1, 2048), min_size=1, max_size=3))
def test_overlap_is_bounded_by_the_shared_gpu(ctx, chunks):
    one, two = CM.step_cost(mixed(ctx, chunks, 1)), CM.step_cost(mixed(ctx, chunks, 2))
    parts = mixed(ctx, chunks, 2).micro_batches()
    alone = [CM.step_cost(p) for p in parts]
    fixed = two.breakdown["overhead"] + two.breakdown["allreduce"]
    kernels = two.seconds - fixed
    # never faster than either micro-batch alone, nor than the summed compute or memory time
    assert kernels >= max(a.seconds - a.breakdown["overhead"] for a in alone) - 1e-12
    from simbatch.costmodel.work import plan_work

    c = sum(CM.bounds(plan_work(p)[0])[0] for p in parts)
    m = sum(CM.bounds(plan_work(p)[0])[1] for p in parts)
    assert kernels >= max(c, m) - 1e-12
    # and never slower than running the micro-batches one after the other
    assert kernels <= sum(a.seconds - a.breakdown["overhead"] for a in alone) + 1e-12
    assert two.seconds == pytest.approx(sum(two.breakdown.values()), rel=1e-12)
    assert two.breakdown["stream_overlap"] <= 0
    assert two.useful_bytes >= one.useful_bytes  # each micro-batch reads the weights again


def test_overlap_pays_when_decode_meets_prefill():
    # 64 decodes over 1k contexts (memory-bound) beside a 512-token chunk (compute-bound)
    one, two = CM.step_cost(mixed([1000] * 64, [512], 1)), CM.step_cost(mixed([1000] * 64, [512], 2))
    assert two.seconds < 0.85 * one.seconds


def chat(kind: str, streams: int):
    return from_dict({
        "workload": {"synthetic": {"num_requests": 300, "arrival": {"kind": "poisson", "rate": 4.0},
                                   "prompt": {"kind": "lognormal", "median": 760, "sigma": 0.98, "max": 3000},
                                   "output": {"kind": "lognormal", "median": 150, "sigma": 0.86, "max": 900}}},
        "model": "llama-2-7b", "hardware": "a100-80gb", "cost_model": {"kind": "roofline"},
        "policy": {"kind": kind, "max_num_seqs": 128, "streams": streams}, "seed": 3,
    })


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_runs_with_two_streams_serve_everyone_and_the_fast_path_agrees(kind):
    out = run(chat(kind, 2))
    assert out.summary["completed"] == 300
    assert simulate(chat(kind, 2)).log.replica_num_steps == simulate(chat(kind, 2), fast_forward=False).log.replica_num_steps


def test_chunked_prefill_gets_faster_decodes_from_a_second_stream():
    one, two = run(chat("chunked_prefill", 1)).summary, run(chat("chunked_prefill", 2)).summary
    assert two["tpot_ms"]["p99"] < one["tpot_ms"]["p99"]


def test_streams_is_checked():
    from simbatch.errors import SimbatchError

    with pytest.raises(SimbatchError, match="policy.streams"):
        chat("continuous", 3)


def test_a_profile_cost_model_prices_streams_within_the_same_bounds():
    from simbatch.costmodel import build_cost_model

    profile = build_cost_model(None, "llama-2-7b", "a100-80gb")  # the shipped A100 measurements
    one = profile.step_cost(mixed([1000] * 64, [512], 1))
    two = profile.step_cost(mixed([1000] * 64, [512], 2))
    alone = [profile.step_cost(p) for p in mixed([1000] * 64, [512], 2).micro_batches()]
    kernels = two.seconds - two.breakdown["overhead"] - two.breakdown["allreduce"]
    assert max(a.seconds - a.breakdown["overhead"] for a in alone) <= kernels + 1e-12
    assert two.seconds < one.seconds


def test_a_two_stream_step_pays_the_whole_steps_overhead_once():
    # The per-sequence and per-token overheads (an engine preset's) count every sequence
    # and token of the step, whichever stream runs it (they used to drop the tokens).
    cm = RooflineCostModel("llama-2-7b", "a100-80gb", step_overhead_s=2e-3, per_seq_overhead_s=1e-4,
                           per_token_overhead_s=1e-5)
    plan = mixed([100] * 8, [512, 40], 2)
    two = cm.step_cost(plan)
    assert two.breakdown["overhead"] == pytest.approx(2e-3 + 1e-4 * 10 + 1e-5 * (8 + 552))
    assert two.breakdown["overhead"] == cm.step_cost(mixed([100] * 8, [512, 40], 1)).breakdown["overhead"]


@pytest.mark.parametrize("model", ["roofline", "profile"])
def test_fast_path_prices_are_the_plans_prices_bit_for_bit(model):
    from simbatch.costmodel import build_cost_model

    cm = CM if model == "roofline" else build_cost_model(None, "llama-2-7b", "a100-80gb")
    ctx, chunks, chunk_ctx = [700, 30, 1999], [512, 7], [1024, 0]
    plan = StepPlan(list(range(5)), [1, 1, 1] + chunks, ctx + chunk_ctx, None, 3, 2)
    fast = cm.mixed_cost(3, sum(ctx), chunks, chunk_ctx, streams=2)
    slow = cm.step_cost(plan)
    assert (fast.seconds, fast.useful_flops, fast.useful_bytes) == (slow.seconds, slow.useful_flops, slow.useful_bytes)
    # a step of one phase is not split: the same price on one stream or two
    decodes = mixed(ctx, [], 2)
    assert cm.step_cost(decodes).seconds == cm.step_cost(mixed(ctx, [], 1)).seconds == cm.decode_cost(3, sum(ctx)).seconds
