"""``pipeline_schedule: round_robin`` (DistServe's decode instance, issue 32 item 6): one batch
per stage, each an engine step of its own, whose CPU-side overhead runs on the first stage
ahead of its kernels. Hand-computed steps, the disaggregated decode pool it prices, the
fast path, the field, and the shipped c21d12 scenario against DistServe's two logs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simbatch.api import run
from simbatch.costmodel.pipeline import PipelineCostModel
from simbatch.costmodel.work import decode_work
from simbatch.engine.disaggregation.build import run_pools
from simbatch.catalog.hardware import get_gpu
from simbatch.catalog.models import get_model
from simbatch.scenario.spec import from_dict, load_scenario
from tests.logkit import assert_same_disaggregated_logs

from test_disaggregation import scenario_data
from test_disaggregation_pipeline import decode_steps, one_request

LLAMA = get_model("llama-2-7b")  # 32 layers: two stages of 16
STEP, PER_SEQ, PER_TOKEN = 5e-3, 2e-4, 1e-5  # the engine's per-step, per-sequence, per-token seconds
ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT.parent / "shared" / "measured" / "distserve-opt13b-a100"


def pipeline(schedule: str, micro: int = 0) -> PipelineCostModel:
    return PipelineCostModel(LLAMA, get_gpu("a100-80gb"), 1, 2, micro, schedule, step_overhead_s=STEP,
                             per_seq_overhead_s=PER_SEQ, per_token_overhead_s=PER_TOKEN)


@pytest.mark.parametrize("n, context", [(1, 900), (8, 8 * 700), (64, 64 * 1500)])
def test_two_stages_pay_the_engine_step_once_per_micro_batch_on_the_first_stage(n, context):
    work = decode_work(n, context)
    rr, overlap = pipeline("round_robin"), pipeline("overlap")
    t0, t1 = rr.stage_seconds(work)  # one of two equal micro-batches, on each stage
    # Each micro-batch's engine step: the fixed time, and half the batch's sequences and tokens.
    o = STEP + (PER_SEQ * n + PER_TOKEN * n) / 2
    assert t0 + o > t1  # the first stage, with the engine step in front, sets the pace
    step = rr.price(work, work, n)
    assert step.seconds == pytest.approx(2 * (t0 + o), rel=1e-12)
    # overlap: the same kernels, the whole step's overhead once, after the pipeline's span
    whole = STEP + PER_SEQ * n + PER_TOKEN * n
    assert overlap.price(work, work, n).seconds == pytest.approx(max(2 * t1, t0 + t1) + whole, rel=1e-12)
    # The difference is one more fixed step time, less the last stage's extra work (the LM head),
    # which now hides behind the first stage's engine step.
    assert step.seconds - overlap.price(work, work, n).seconds == pytest.approx(STEP + 2 * (t0 - t1), rel=1e-9)
    # Breakdown: the stages' mean kernel time, then the engine steps (what of them no kernel
    # time covers: the last stage's LM head runs meanwhile), then the bubble; they add up.
    bd = step.breakdown
    assert bd["stages"] == pytest.approx(t0 + t1, rel=1e-12)
    assert bd["overhead"] == pytest.approx(min(2 * o, step.seconds - (t0 + t1)), rel=1e-12)
    assert bd["bubble"] >= 0 and sum(bd.values()) == pytest.approx(step.seconds, rel=1e-12)


def test_more_micro_batches_pay_more_engine_steps():
    work = decode_work(32, 32 * 1000)
    two, four = pipeline("round_robin", 2), pipeline("round_robin", 4)
    t0 = four.stage_seconds(work)[0]
    o = STEP + (PER_SEQ + PER_TOKEN) * 32 / 4
    assert four.price(work, work, 32).seconds == pytest.approx(4 * (t0 + o), rel=1e-12)
    assert four.price(work, work, 32).seconds > two.price(work, work, 32).seconds + STEP


def test_a_round_robin_decode_pool_spaces_its_tokens_by_the_hand_computed_step():
    # Four requests reach a two-stage decode replica together; after the step that takes
    # them in, each step gives every one a token, so its duration is their TPOT's spacing.
    reqs = [{"prompt": 600, "output": 30, "arrival_s": 0.0} for _ in range(4)]
    data = scenario_data(reqs, link="infiniband", transfer="pull", prefill={"replicas": 1},
                         decode={"replicas": 1, "pipeline_parallel": 2, "pipeline_schedule": "round_robin"})
    data["engine"] = {"step_s": STEP, "per_seq_s": PER_SEQ, "per_token_s": PER_TOKEN}
    sc = from_dict(data)
    _, replicas = run_pools(sc)
    out = run(sc)
    steps = out.steps[out.steps["replica"] == replicas[1].index]
    steady = steps[(steps["num_seqs"] == 4) & (steps["prefill_tokens"] == 0)]
    assert len(steady) > 20
    cm = replicas[1].backend
    for k, seconds in enumerate(steady["duration_s"]):
        context = 4 * (600 + 1 + k)  # the prompt, the token its admission computed, one a step since
        t0 = cm.stage_seconds(decode_work(4, context))[0]
        assert seconds == pytest.approx(2 * (t0 + STEP + 2 * (PER_SEQ + PER_TOKEN)), rel=1e-9)
    # Against the default schedule, every steady step is about one engine step longer.
    flat = run(from_dict({**data, "disaggregation": {**data["disaggregation"], "decode": {
        "replicas": 1, "pipeline_parallel": 2}}}))
    gap = decode_steps(out, 1)[-len(steady):] - decode_steps(flat, 1)[-len(steady):]
    assert np.all(gap > 0.8 * STEP) and np.all(gap < 1.2 * STEP)


@pytest.mark.parametrize("transfer", ["push", "pull"])
def test_the_fast_path_gives_identical_results_under_round_robin(transfer):
    from simbatch.engine.simulation import simulate

    data = scenario_data(prefill={"replicas": 1}, decode={"replicas": 2, "pipeline_parallel": 2,
                                                          "pipeline_schedule": "round_robin"}, transfer=transfer)
    data["engine"] = {"step_s": STEP, "per_seq_s": PER_SEQ}
    sc = from_dict(data)
    assert_same_disaggregated_logs(simulate(sc).log, simulate(sc, fast_forward=False).log)


@pytest.mark.skipif(not MEASURED.is_dir(), reason="needs ../shared/measured beside the repository")
def test_the_c21d12_scenario_replays_distserves_two_pipeline_logs_within_15_percent():
    from simbatch.measured import read_measured
    from simbatch.validation.against import validate_runs

    paths = sorted(MEASURED.glob("distserve-c21d12-*.exp"))
    assert len(paths) == 2
    sc = load_scenario(ROOT / "scenarios" / "distserve_opt13b_a100_c21d12.yaml")
    assert sc.disaggregation.pool("decode").pipeline_schedule == "round_robin"
    for v in validate_runs(sc, [read_measured(p) for p in paths]).logs:
        for key in ("ttft_p50_err", "tpot_p50_err", "tpot_p90_err"):
            assert abs(v.errors[key]) < 0.15, (v.name, key, v.errors[key])
