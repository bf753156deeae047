"""The scenario ``workload:`` section, transforms, and workload descriptions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbatch.errors import SimbatchError
from simbatch.workload import Workload, build_workload, describe_workload
from simbatch.workload.transforms import clip_total_tokens, first_n, scale_rate, time_window

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
W = "s.yaml: workload"
SYNTH = {"num_requests": 50, "arrival": {"kind": "poisson", "rate": 2},
         "prompt": {"kind": "constant", "value": 100}, "output": {"kind": "uniform", "low": 1, "high": 9}}


@pytest.fixture
def traces() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared/traces not present: real-trace tests need the shared folder beside the repo")
    return SHARED


def build(spec: dict, base_dir: Path = Path("."), seed: int = 0) -> Workload:
    return build_workload(spec, base_dir=base_dir, seed=seed, where=W)


def error_of(spec: dict, base_dir: Path = Path(".")) -> SimbatchError:
    with pytest.raises(SimbatchError) as info:
        build(spec, base_dir)
    return info.value


def workload(arrivals, prompt=None, output=None) -> Workload:
    n = len(arrivals)
    return Workload(np.asarray(arrivals, dtype=float),
                    np.asarray(prompt if prompt is not None else [10] * n, dtype=np.int64),
                    np.asarray(output if output is not None else [5] * n, dtype=np.int64))


def test_trace_options_apply_in_order(traces):
    # window in recorded seconds, then the first N inside it, then faster replay.
    spec = {"trace": "AzureLLMInferenceTrace_conv.csv", "window": [600, 1200],
            "num_requests": 1000, "rate_scale": 2.0, "max_total_tokens": 2048}
    w = build(spec, traces)
    assert len(w) == 1000 and w.arrival_s[0] >= 0 and w.arrival_s[-1] < 300
    assert ((w.prompt_tokens + w.output_tokens) <= 2048).all()
    assert any("clipped" in note for note in w.notes)
    d = describe_workload(w)
    assert d["num_requests"] == 1000 and d["rate"] == pytest.approx(2 * 5.5, rel=0.25)


def test_mooncake_clip_keeps_hash_blocks_consistent(traces):
    w = build({"trace": "mooncake_conversation_trace.jsonl", "num_requests": 500,
               "max_total_tokens": 4096}, traces)
    assert [len(h) for h in w.hash_ids] == [-(-int(p) // 512) for p in w.prompt_tokens]


def test_synthetic_source_is_seeded():
    a, b = build({"synthetic": SYNTH}, seed=1), build({"synthetic": SYNTH}, seed=1)
    c = build({"synthetic": SYNTH}, seed=2)
    assert np.array_equal(a.arrival_s, b.arrival_s) and not np.array_equal(a.arrival_s, c.arrival_s)
    assert len(a) == 50 and a.source == "synthetic"


def test_inline_requests():
    w = build({"requests": [{"prompt": 128, "output": 32, "arrival_s": 1.0, "session_id": "u1"},
                            {"prompt": 64, "output": 8, "priority": 2}]})
    assert w.arrival_s.tolist() == [0.0, 1.0] and w.prompt_tokens.tolist() == [64, 128]
    assert w.request(0).priority == 2 and w.request(1).session_id == "u1"
    assert w.notes and "sorted" in w.notes[0]


def test_lengths_trace_needs_and_gets_an_arrival_process(tmp_path):
    (tmp_path / "l.csv").write_text("num_prefill_tokens,num_decode_tokens\n" + "10,2\n" * 100)
    err = error_of({"trace": "l.csv"}, tmp_path)
    assert err.where == f"{W}.arrival" and "arrival" in err.cause
    w = build({"trace": "l.csv", "arrival": {"kind": "constant", "rate": 10}}, tmp_path)
    assert w.arrival_s[-1] == pytest.approx(9.9) and w.notes == []


def test_generic_trace_through_build(tmp_path):
    (tmp_path / "g.jsonl").write_text('{"t": 2, "p": 3, "o": 4}\n{"t": 1, "p": 5, "o": 6}\n')
    w = build({"trace": "g.jsonl", "format": "generic",
               "columns": {"arrival": "t", "prompt": "p", "output": "o"}}, tmp_path)
    assert w.prompt_tokens.tolist() == [5, 3] and "sorted 2 rows" in w.notes[0]
    err = error_of({"trace": "g.jsonl", "format": "generic"}, tmp_path)
    assert err.where == f"{W}.columns"


@pytest.mark.parametrize("spec, where, word", [
    ({}, W, "exactly one"),
    ({"synthetic": SYNTH, "requests": [{"prompt": 1, "output": 1}]}, W, "synthetic, requests"),
    ({"synthetic": SYNTH, "sed": 1}, f"{W}.sed", "num_requests"),
    ({"synthetic": SYNTH, "format": "azure"}, f"{W}.format", "trace"),
    ({"synthetic": SYNTH, "window": [5, 1]}, f"{W}.window", "start < end"),
    ({"synthetic": SYNTH, "window": [1]}, f"{W}.window", "[start_s, end_s]"),
    ({"synthetic": SYNTH, "window": [1000, 2000]}, f"{W}.window", "no request"),
    ({"synthetic": SYNTH, "rate_scale": -1}, f"{W}.rate_scale", "positive"),
    ({"synthetic": SYNTH, "max_total_tokens": 1}, f"{W}.max_total_tokens", ">= 2"),
    ({"synthetic": {**SYNTH, "prompt": {"kind": "lognormal", "median": 5}}},
     f"{W}.synthetic.prompt.sigma", "missing"),
    ({"requests": [{"prompt": 1, "output": 0}]}, f"{W}.requests[0].output", ">= 1"),
    ({"requests": [{"prompt": 1, "outptu": 3}]}, f"{W}.requests[0].outptu", "output"),
    ({"trace": "x.csv", "format": "parquet"}, f"{W}.format", "azure"),
])
def test_build_errors(spec, where, word):
    err = error_of(spec)
    assert err.where == where and word in err.cause, str(err)


def test_missing_trace_file_names_the_field_and_the_path(tmp_path):
    err = error_of({"trace": "nope.csv"}, tmp_path)
    assert err.where.endswith("workload.trace") and str(tmp_path / "nope.csv") in err.cause


def test_describe_workload():
    d = describe_workload(workload([0.0, 1.0, 2.0, 4.0], prompt=[1, 2, 3, 4], output=[9, 9, 9, 9]))
    assert d["num_requests"] == 4 and d["duration_s"] == 4.0 and d["rate"] == 0.75
    assert d["prompt_mean"] == 2.5 and d["prompt_p50"] == 2.5 and d["output_p99"] == 9
    assert describe_workload(workload([0.0, 0.0]))["rate"] is None


def test_clip_total_tokens_rules():
    w = clip_total_tokens(workload([0, 1, 2], prompt=[100, 5, 50], output=[10, 200, 20]), 64)
    assert w.prompt_tokens.tolist() == [54, 1, 44] and w.output_tokens.tolist() == [10, 63, 20]
    assert w.notes == ["clipped 3 of 3 requests to prompt + output <= 64 tokens"]


sorted_times = st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=40).map(sorted)


@settings(max_examples=80, deadline=None)
@given(times=sorted_times, n=st.integers(1, 60), k=st.floats(0.01, 100),
       start=st.floats(0, 1e4), length=st.floats(1e-3, 1e4))
def test_transforms_keep_order_and_sizes(times, n, k, start, length):
    w = workload(times)
    assert len(first_n(w, n)) == min(n, len(w))
    scaled = scale_rate(w, k)
    assert (np.diff(scaled.arrival_s) >= 0).all() and len(scaled) == len(w)
    expected = sum(start <= t < start + length for t in times)
    if expected == 0:
        with pytest.raises(SimbatchError):
            time_window(w, start, start + length)
        return
    cut = time_window(w, start, start + length)
    assert len(cut) == expected and (np.diff(cut.arrival_s) >= 0).all()
    assert (cut.arrival_s >= 0).all() and (cut.arrival_s <= length).all()


@settings(max_examples=80, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(1, 10**5), st.integers(1, 10**4)), min_size=1,
                      max_size=30), max_total=st.integers(2, 20_000))
def test_clip_bounds_every_request(pairs, max_total):
    prompt, output = zip(*pairs)
    w = clip_total_tokens(workload([0.0] * len(pairs), prompt, output), max_total)
    assert ((w.prompt_tokens + w.output_tokens) <= max_total).all()
    assert (w.prompt_tokens >= 1).all() and (w.output_tokens >= 1).all()
    assert (w.prompt_tokens <= np.array(prompt)).all() and (w.output_tokens <= np.array(output)).all()
