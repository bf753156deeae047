"""Synthetic arrivals and lengths, spec validation, and fitting a spec to a trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbatch.errors import SimbatchError
from simbatch.workload import fit_synthetic, read_azure
from simbatch.workload.synthetic import sample_arrivals, sample_lengths, synthetic_workload

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
SPEC = {
    "num_requests": 500,
    "arrival": {"kind": "gamma", "rate": 4.0, "cv": 2.0},
    "prompt": {"kind": "lognormal", "median": 800, "sigma": 1.0, "max": 8000},
    "output": {"kind": "uniform", "low": 10, "high": 300},
}


@pytest.fixture
def traces() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared/traces not present: real-trace tests need the shared folder beside the repo")
    return SHARED


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def error_of(fn, *args) -> SimbatchError:
    with pytest.raises(SimbatchError) as info:
        fn(*args)
    return info.value


def test_same_seed_same_workload_different_seed_different():
    a, b = synthetic_workload(SPEC, rng(7), "w"), synthetic_workload(SPEC, rng(7), "w")
    c = synthetic_workload(SPEC, rng(8), "w")
    for col in ("arrival_s", "prompt_tokens", "output_tokens"):
        assert np.array_equal(getattr(a, col), getattr(b, col))
        assert not np.array_equal(getattr(a, col), getattr(c, col))


@pytest.mark.parametrize("kind, extra", [("poisson", {}), ("gamma", {"cv": 3.0}), ("constant", {})])
def test_arrival_rate_matches(kind, extra):
    t = sample_arrivals({"kind": kind, "rate": 5.0, **extra}, 40_000, rng(), "a")
    assert t[0] == 0.0 and (np.diff(t) >= 0).all()
    assert (len(t) - 1) / t[-1] == pytest.approx(5.0, rel=0.05)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.5])
def test_gamma_cv_close_to_requested(cv):
    gaps = np.diff(sample_arrivals({"kind": "gamma", "rate": 2.0, "cv": cv}, 60_000, rng(), "a"))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_constant_and_burst_arrivals():
    assert sample_arrivals({"kind": "constant", "rate": 4}, 4, rng(), "a").tolist() == [0, 0.25, 0.5, 0.75]
    assert sample_arrivals({"kind": "burst"}, 3, rng(), "a").tolist() == [0.0, 0.0, 0.0]
    assert sample_arrivals({"kind": "poisson", "rate": 1}, 1, rng(), "a").tolist() == [0.0]


def test_length_distributions():
    assert sample_lengths({"kind": "constant", "value": 7}, 3, rng(), "p").tolist() == [7, 7, 7]
    u = sample_lengths({"kind": "uniform", "low": 1, "high": 4}, 20_000, rng(), "p")
    assert set(u.tolist()) == {1, 2, 3, 4} and u.mean() == pytest.approx(2.5, rel=0.03)
    ln = sample_lengths({"kind": "lognormal", "median": 500, "sigma": 0.8}, 40_000, rng(), "p")
    assert np.median(ln) == pytest.approx(500, rel=0.03)
    assert ln.mean() == pytest.approx(500 * np.exp(0.8**2 / 2), rel=0.05)
    clipped = sample_lengths({"kind": "lognormal", "median": 50, "sigma": 3, "min": 10, "max": 90},
                             5_000, rng(), "p")
    assert clipped.min() == 10 and clipped.max() == 90
    e = sample_lengths({"kind": "empirical", "values": [5, 9], "weights": [3, 1]}, 20_000, rng(), "p")
    assert set(e.tolist()) == {5, 9} and (e == 5).mean() == pytest.approx(0.75, abs=0.02)


def test_empirical_from_a_trace_relative_to_base_dir(tmp_path):
    (tmp_path / "t.csv").write_text("num_prefill_tokens,num_decode_tokens\n11,1\n22,2\n")
    spec = {"kind": "empirical", "trace": "t.csv", "column": "prompt"}
    out = sample_lengths(spec, 1_000, rng(), "p", tmp_path)
    assert set(out.tolist()) == {11, 22}


@pytest.mark.parametrize("spec, where, words", [
    ({"kind": "zipf"}, "w.prompt.kind", ["'zipf'", "lognormal", "empirical"]),
    ({"median": 3, "sigma": 1}, "w.prompt.kind", ["missing", "constant"]),
    ({"kind": "lognormal", "median": 3, "sigma": 1, "mu": 2}, "w.prompt.mu", ["median", "sigma"]),
    ({"kind": "lognormal", "median": 3}, "w.prompt.sigma", ["missing"]),
    ({"kind": "lognormal", "median": -3, "sigma": 1}, "w.prompt.median", ["positive", "-3"]),
    ({"kind": "constant", "value": 2.5}, "w.prompt.value", ["integer", "2.5"]),
    ({"kind": "constant", "value": "big"}, "w.prompt.value", ["'big'"]),
    ({"kind": "uniform", "low": 9, "high": 3}, "w.prompt.high", [">= 9"]),
    ({"kind": "empirical", "values": [1, 0]}, "w.prompt.values[1]", [">= 1"]),
    ({"kind": "empirical", "values": [1, 2], "weights": [1]}, "w.prompt.weights", ["2"]),
    ({"kind": "empirical", "trace": "x.csv", "column": "both"}, "w.prompt.column", ["'both'"]),
])
def test_length_spec_errors(spec, where, words):
    err = error_of(sample_lengths, spec, 3, rng(), "w.prompt")
    assert err.where == where
    assert all(word in err.cause for word in words), err.cause


@pytest.mark.parametrize("spec, where", [
    ({"kind": "weibull"}, "w.arrival.kind"),
    ({"kind": "poisson"}, "w.arrival.rate"),
    ({"kind": "poisson", "rate": 0}, "w.arrival.rate"),
    ({"kind": "gamma", "rate": 1, "cv": -1}, "w.arrival.cv"),
    ({"kind": "burst", "rate": 1}, "w.arrival.rate"),
    ("poisson", "w.arrival"),
])
def test_arrival_spec_errors(spec, where):
    assert error_of(sample_arrivals, spec, 10, rng(), "w.arrival").where == where


def test_synthetic_workload_spec_errors():
    assert error_of(synthetic_workload, {**SPEC, "seed": 3}, rng(), "w").where == "w.seed"
    no_output = {k: v for k, v in SPEC.items() if k != "output"}
    assert error_of(synthetic_workload, no_output, rng(), "w").where == "w.output"
    assert error_of(synthetic_workload, {**SPEC, "num_requests": 0}, rng(), "w").where == "w.num_requests"


@settings(max_examples=60, deadline=None)
@given(median=st.floats(0.01, 1e5), sigma=st.floats(0, 4), n=st.integers(0, 50),
       seed=st.integers(0, 2**32 - 1))
def test_lognormal_lengths_are_positive_integers(median, sigma, n, seed):
    out = sample_lengths({"kind": "lognormal", "median": median, "sigma": sigma}, n, rng(seed), "p")
    assert out.dtype == np.int64 and out.shape == (n,) and (out >= 1).all()


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(1e-3, 1e4), cv=st.floats(0.1, 10), n=st.integers(0, 50),
       seed=st.integers(0, 2**32 - 1))
def test_arrivals_start_at_zero_and_are_sorted(rate, cv, n, seed):
    t = sample_arrivals({"kind": "gamma", "rate": rate, "cv": cv}, n, rng(seed), "a")
    assert t.shape == (n,) and (np.diff(t) >= 0).all() and (n == 0 or t[0] == 0.0)


def test_fit_azure_conv_is_poisson_at_its_rate(traces):
    w = read_azure(traces / "AzureLLMInferenceTrace_conv.csv")
    spec = fit_synthetic(w)
    assert spec["num_requests"] == 19_366
    assert spec["arrival"] == {"kind": "poisson", "rate": pytest.approx(5.53, abs=0.01)}
    geo_mean = float(np.exp(np.log(w.prompt_tokens).mean()))
    assert spec["prompt"]["kind"] == "lognormal"
    assert spec["prompt"]["median"] == pytest.approx(geo_mean, rel=0.01)
    assert (spec["prompt"]["min"], spec["prompt"]["max"]) == (2, 14_050)
    synth = synthetic_workload(spec, rng(0), "fit")
    assert synth.prompt_tokens.mean() == pytest.approx(w.prompt_tokens.mean(), rel=0.15)
    assert synth.output_tokens.mean() == pytest.approx(w.output_tokens.mean(), rel=0.15)


def test_fit_azure_code_is_bursty_gamma(traces):
    spec = fit_synthetic(read_azure(traces / "AzureLLMInferenceTrace_code.csv"))
    assert spec["arrival"]["kind"] == "gamma"
    assert spec["arrival"]["rate"] == pytest.approx(2.57, abs=0.01)
    assert spec["arrival"]["cv"] == pytest.approx(13.2, rel=0.02)
