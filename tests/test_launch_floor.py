"""An eager engine's launch floor (``launch_floor_s`` / ``engine.launch_s``) and the
``sarathi-serve`` preset fitted on Sarathi-Serve's figure 2 (calibration/fit_sarathi_engine.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simbatch.costmodel import RooflineCostModel, build_cost_model
from simbatch.catalog.servers import PRESETS, parse_engine
from simbatch.errors import SimbatchError
from simbatch.core.plan import StepPlan
from scriptkit import load_script

REPO = Path(__file__).resolve().parents[1]
SARATHI = REPO.parent / "shared" / "measured" / "sarathi-serve-a100"
needs_sarathi = pytest.mark.skipif(not SARATHI.is_dir(),
                                   reason="../shared/measured/sarathi-serve-a100 is absent (Sarathi-Serve's CSVs)")



@pytest.fixture(scope="module")
def fit():
    return load_script(REPO / "calibration" / "fit_sarathi_engine.py", "fit_sarathi_engine")


@pytest.fixture(scope="module")
def bench():
    return load_script(REPO / "benchmarks" / "bench_fidelity.py", "bench_fidelity")


DECODE = StepPlan([1, 2, 3, 4], [1] * 4, [1024] * 4, None, 4)
PREFILL = StepPlan([0], [2048], [0])


def test_a_step_costs_the_larger_of_its_kernels_and_the_floor_plus_its_overhead():
    plain = RooflineCostModel("yi-34b", "a100-80gb-pcie", tensor_parallel=2, step_overhead_s=0.0)
    floored = RooflineCostModel("yi-34b", "a100-80gb-pcie", tensor_parallel=2, step_overhead_s=0.005,
                                launch_floor_s=0.040)
    dec, pre = plain.step_cost(DECODE), plain.step_cost(PREFILL)
    assert dec.seconds < 0.040 < pre.seconds  # decode is issue-bound, a 2048-token prefill is not
    d, p = floored.step_cost(DECODE), floored.step_cost(PREFILL)
    assert d.seconds == pytest.approx(0.040 + 0.005, rel=1e-12)
    assert d.breakdown["launch_wait"] == pytest.approx(0.040 - dec.seconds, rel=1e-12)
    assert p.breakdown["launch_wait"] == 0.0 and p.seconds == pytest.approx(pre.seconds + 0.005, rel=1e-12)
    assert "launch_wait" not in dec.breakdown  # no floor: no new part, prices unchanged
    # Two streams: the whole step's kernels against the floor, once.
    two = StepPlan([1, 2, 0], [1, 1, 64], [500, 500, 0], None, 2, 2)
    c = floored.step_cost(two)
    kernels = sum(v for k, v in c.breakdown.items() if k not in ("overhead", "launch_wait"))
    assert c.breakdown["launch_wait"] == pytest.approx(max(0.0, 0.040 - kernels), abs=1e-15)


def test_the_engine_field_sets_the_floor_and_pipelines_refuse_it():
    e = parse_engine({"preset": "none", "launch_s": 0.02}, "engine")
    assert e.overhead_params() == {"launch_floor_s": 0.02}  # alone: the cost model's own overheads stay
    assert parse_engine("vllm-0.2-ray", "engine").overhead_params().get("launch_floor_s") is None
    with pytest.raises(SimbatchError, match="engine.launch_s"):
        parse_engine({"launch_s": -1}, "engine")
    cm = build_cost_model("roofline", "yi-34b", "a100-80gb-pcie", 2, overhead=e.overhead_params())
    assert cm.params["launch_floor_s"] == 0.02
    with pytest.raises(SimbatchError, match="pipeline"):
        build_cost_model("roofline", "yi-34b", "a100-80gb-pcie", 2, overhead=e.overhead_params(),
                         pipeline=(2, 0, "overlap", None))


def test_a_drafter_does_not_inherit_the_targets_floor():
    from simbatch.costmodel.speculative import build_drafter
    drafter = build_drafter("tiny", "a100-80gb", 1, {"launch_floor_s": 0.04, "compute_eff": 0.7}, 1e-4)
    assert drafter.params["launch_floor_s"] == 0.0 and drafter.params["compute_eff"] == 0.7


def test_the_fit_recovers_known_terms_from_synthetic_steps(fit):
    # Steps on both sides of the floor (issue-bound decodes, long prefills), as figure 2 has them.
    rng = np.random.default_rng(0)
    kernels = np.concatenate([rng.uniform(0.028, 0.046, 8), rng.uniform(0.03, 0.75, 6)])
    seqs = np.concatenate([[1, 2, 4, 8, 16, 32, 64, 128], np.ones(6)])
    known = {"launch_s": 0.0417, "step_s": 0.0064, "per_seq_s": 0.0012}
    measured = fit.predict(kernels, seqs, known)
    got = fit.fit_terms(kernels, seqs, measured)
    assert got["launch_s"] == pytest.approx(known["launch_s"], abs=1e-4)  # the grid's step
    assert got["step_s"] == pytest.approx(known["step_s"], abs=2e-4)
    assert got["per_seq_s"] == pytest.approx(known["per_seq_s"], rel=1e-3)


@needs_sarathi
def test_the_preset_is_what_the_script_fits_on_figure_2(fit):
    terms, rows, _ = fit.fit_figure2(SARATHI)
    assert len(rows) == 13  # 8 decode batches, 5 prefills (warm-up and long-attention rows left out)
    for key in fit.TERMS:  # the preset keeps three significant figures
        assert PRESETS["sarathi-serve"][key] == pytest.approx(terms[key], rel=5e-3), key


@needs_sarathi
def test_held_out_figures_against_the_issues_tolerance(bench):
    """Table 2 and figure 9 are not fitted on. What the preset closes is held to the issue's
    tolerance; what it cannot (docs/cost_models.md, "Sarathi-Serve's step time") to the miss
    it has, so that a change that widens it fails."""
    before, after = bench.cost_model(), bench.cost_model("sarathi-serve")
    t2b, t2a = bench.table2(SARATHI, before), bench.table2(SARATHI, after)
    f9b, f9a = bench.figure9(SARATHI, before), bench.figure9(SARATHI, after)
    err = {(int(r.batch_num_prefill_tokens), int(r.batch_num_decode_tokens)): r.err for _, r in t2a.iterrows()}
    assert abs(err[(1021, 3)]) <= bench.TARGET_TABLE2  # met
    assert abs(err[(1024, 0)]) <= 0.12  # 1024-token steps run ~12 % slower than any smooth model
    assert -0.25 < err[(0, 4)] < 0  # from -55 %: the floor; the rest contradicts figure 2's same step
    assert all(abs(a) < abs(b) for a, b in zip(t2a.err, t2b.err))
    f2 = bench.figure2(SARATHI, after)
    dec4 = float(f2[f2.row == "decode x4"].meas_ms.iloc[0])
    _, bound = bench.same_step_bound(dec4, float(t2a[t2a.batch_num_prefill_tokens == 0].batch_execution_time.iloc[0]))
    assert bound > bench.TARGET_TABLE2  # no model meets 10 % on table 2's decode and figure 2's
    pp = {(int(r.prefill_length), int(r.chunk_size)): r.err_pp for _, r in f9a.iterrows()}
    assert all(abs(pp[(n, 512)]) <= bench.TARGET_PP for n in (2047, 4095))
    assert pp[(8191, 512)] <= 9.0  # the unchunked 8191-token step runs 11 % over: the denominator
    assert all(-13.0 <= pp[(n, 1024)] <= bench.TARGET_PP for n in bench.TARGET_LENGTHS)
    assert all(a >= b for a, b in zip(f9a[f9a.chunk_size == 1024].err_pp, f9b[f9b.chunk_size == 1024].err_pp))
    # Totals: chunks of 512 and 2048 within 5 % on 2k-8k prompts, where the default was up to -10 %.
    for chunk in (512, 2048):
        rows = f9a[(f9a.chunk_size == chunk) & f9a.prefill_length.isin(bench.TARGET_LENGTHS)]
        assert ((rows.pred_ms / rows.prefill_execution_time - 1).abs() <= 0.05).all(), rows
