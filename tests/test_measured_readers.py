"""Readers of measured serving-run logs: real DistServe files, synthetic vLLM /
genai-perf / generic files with known values, and malformed input of every kind."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simbatch.errors import SimbatchError
from simbatch.measured import (MeasuredRun, detect_measured_format, read_distserve, read_generic_run,
                               read_genai_perf, read_measured, read_vllm)

MEASURED = Path(__file__).resolve().parents[1].parent / "shared" / "measured"
DISTSERVE = MEASURED / "distserve-opt13b-a100"


def exp_files():
    return sorted(DISTSERVE.glob("*.exp")) if DISTSERVE.is_dir() else []


@pytest.fixture
def real():
    if not DISTSERVE.is_dir():
        pytest.skip("../shared/measured is absent: the DistServe logs live beside the repo")


# --- real DistServe logs ---------------------------------------------------------

@pytest.mark.parametrize("name", [p.name for p in exp_files()] or ["none"])
def test_every_real_exp_file_matches_its_own_latency_columns(real, name):
    path = DISTSERVE / name
    rows = ast.literal_eval(path.read_text().splitlines()[0])
    run = read_measured(path)
    assert run.system == name.split("-")[0]
    assert len(run) == len(rows) == int(name.split("-")[-2])
    assert run.arrival_s[0] == 0.0 and (np.diff(run.arrival_s) >= 0).all()
    rows = sorted(rows, key=lambda r: r["issue_time"])  # stable, as the reader sorts
    assert run.prompt_tokens.tolist() == [r["prompt_len"] for r in rows]
    assert run.output_tokens.tolist() == [r["output_len"] for r in rows]
    df = run.requests()
    for ours, theirs in (("ttft_ms", "ttft_ms"), ("e2el_ms", "latency_ms")):
        np.testing.assert_allclose(df[ours], [r[theirs] for r in rows], rtol=1e-6)
    # TPOT is undefined for a one-token output (vLLM's definition, docs/metrics.md), where
    # DistServe writes 0 (distserve-c21d12-600-6 has one such request).
    many = df["output_tokens"].to_numpy() > 1
    np.testing.assert_allclose(df["tpot_ms"][many], [r["tpot_ms"] for r, m in zip(rows, many) if m], rtol=1e-6)
    assert df["tpot_ms"][~many].isna().all() and all(r["tpot_ms"] == 0 for r, m in zip(rows, many) if not m)
    assert df["completed"].all() and run.ok is None


@pytest.mark.parametrize("name, ttft_p50, tpot_p50", [("vllm-100-1.exp", 146, 31), ("vllm-300-3.exp", 230, 96)])
def test_readme_orientation_figures(real, name, ttft_p50, tpot_p50):
    df = read_distserve(DISTSERVE / name).requests()
    assert round(df["ttft_ms"].median()) == ttft_p50
    assert round(df["tpot_ms"].median()) == tpot_p50


def test_real_exp_workload_keeps_arrivals_and_lengths(real):
    run = read_measured(DISTSERVE / "vllm-100-1.exp")
    w = run.workload()
    np.testing.assert_array_equal(w.arrival_s, run.arrival_s)
    np.testing.assert_array_equal(w.prompt_tokens, run.prompt_tokens)
    np.testing.assert_array_equal(w.output_tokens, run.output_tokens)
    assert len(w) == 100 and abs(run.offered_rate - 1.0) < 0.05


def test_core_imports_without_torch():
    code = "import sys, simbatch.measured; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- DistServe synthetic ------------------------------------------------------

def exp_row(issue, first, done, prompt=10, out=3):
    return {"prompt_len": prompt, "output_len": out, "issue_time": issue, "first_token_time": first,
            "complete_time": done, "ttft_ms": (first - issue) * 1e3,
            "tpot_ms": (done - first) * 1e3 / max(out - 1, 1), "latency_ms": (done - issue) * 1e3}


def write_exp(tmp_path, rows, name="vllm-2-1.exp", tail="\n{\n\tnum_requests: 2\n}\n"):
    p = tmp_path / name
    p.write_text((rows if isinstance(rows, str) else repr(rows)) + tail)
    return p


def test_exp_sorted_by_issue_time_and_rebased(tmp_path):
    rows = [exp_row(105.0, 105.5, 107.0, prompt=20), exp_row(100.0, 100.2, 101.0, prompt=10, out=5)]
    run = read_measured(write_exp(tmp_path, rows))
    assert run.arrival_s.tolist() == [0.0, 5.0]
    assert run.prompt_tokens.tolist() == [10, 20]
    np.testing.assert_allclose(run.first_token_s, [0.2, 5.5])
    np.testing.assert_allclose(run.requests()["tpot_ms"], [200.0, 750.0])
    assert any("sorted" in n for n in run.notes)


# --- vLLM --save-result -------------------------------------------------------

def vllm_doc(**over):
    doc = {"date": "20250101-000000", "backend": "vllm", "request_rate": 2.0, "burstiness": 1.0,
           "max_concurrency": None, "duration": 3.0, "completed": 2,
           "input_lens": [100, 50, 70], "output_lens": [3, 2, 0],
           "ttfts": [0.1, 0.2, 0.0], "itls": [[0.05, 0.07], [0.03], []],
           "errors": ["", "", "Connection reset"], "start_times": [1000.5, 1000.0, 1001.0]}
    doc.update(over)
    return doc


def write_json(tmp_path, doc, name="run.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_vllm_round_trip_with_start_times(tmp_path):
    run = read_measured(write_json(tmp_path, vllm_doc()))
    assert run.system == "vllm"
    assert run.arrival_s.tolist() == [0.0, 0.5, 1.0]  # sorted by start_times
    assert run.prompt_tokens.tolist() == [50, 100, 70]
    assert run.output_tokens.tolist() == [2, 3, 1]  # the failure keeps a 1-token placeholder
    assert run.ok.tolist() == [True, True, False]
    np.testing.assert_allclose(run.first_token_s[:2], [0.2, 0.6])
    np.testing.assert_allclose(run.finish_s[:2], [0.23, 0.72])
    assert np.isnan(run.first_token_s[2]) and np.isnan(run.finish_s[2])
    np.testing.assert_allclose(run.token_times[1], [0.6, 0.65, 0.72])
    df = run.requests()
    np.testing.assert_allclose(df["ttft_ms"][:2], [200.0, 100.0])
    np.testing.assert_allclose(df["tpot_ms"][:2], [30.0, 60.0])
    assert any("failed" in n for n in run.notes)


def test_vllm_without_start_times_at_infinite_rate_arrives_at_zero(tmp_path):
    doc = vllm_doc(request_rate="inf")
    del doc["start_times"]
    run = read_vllm(write_json(tmp_path, doc))
    assert run.arrival_s.tolist() == [0.0, 0.0, 0.0]
    assert any("inf" in n for n in run.notes)


def test_vllm_without_start_times_needs_arrivals(tmp_path):
    doc = vllm_doc()
    del doc["start_times"]
    p = write_json(tmp_path, doc)
    with pytest.raises(SimbatchError, match="arrivals cannot be rebuilt") as e:
        read_vllm(p)
    assert e.value.where == str(p)
    run = read_measured(p, arrivals=[0.0, 1.0, 2.0])
    assert run.arrival_s.tolist() == [0.0, 1.0, 2.0] and run.prompt_tokens.tolist() == [100, 50, 70]


def test_vllm_chunks_carrying_several_tokens_are_noted(tmp_path):
    run = read_vllm(write_json(tmp_path, vllm_doc(output_lens=[10, 2, 0])))
    assert any("one time per chunk" in n for n in run.notes)


# --- genai-perf profile_export.json -------------------------------------------

def sse(content=None, usage=None):
    delta = {} if content is None else {"content": content}
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    if usage:
        body = {"object": "chat.completion.chunk", "choices": [], "usage": usage}
    return {"response": f"data: {json.dumps(body)}\n\n"}


def genai_doc(requests, experiments=1):
    exp = {"experiment": {"mode": "request_rate", "value": 2.0}, "requests": requests}
    return {"service_kind": "openai", "endpoint": "v1/chat/completions", "experiments": [exp] * experiments}


BASE = 1_700_000_000_000_000_000  # ns since the epoch: beyond float64's exact integers


def openai_request(sent, stamps, contents, usage=None):
    outs = [sse(c) for c in contents] + [{"response": "data: [DONE]\n\n"}]
    times = [BASE + t for t in stamps] + [BASE + stamps[-1] + 1]
    if usage:
        outs.insert(-1, sse(usage=usage))
        times.insert(-1, BASE + stamps[-1] + 1)
    return {"timestamp": BASE + sent, "request_inputs": {"payload": "{}"},
            "response_timestamps": times, "response_outputs": outs}


def test_genai_perf_round_trip_with_usage(tmp_path):
    reqs = [openai_request(0, [1_000_000, 100_000_000, 150_000_000, 200_000_000], [None, "I", " like", " dogs"],
                           usage={"prompt_tokens": 12, "completion_tokens": 3}),
            openai_request(500_000_000, [600_000_000, 700_000_000], ["a", "b"],
                           usage={"prompt_tokens": 7, "completion_tokens": 2})]
    run = read_measured(write_json(tmp_path, genai_doc(reqs), "profile_export.json"))
    assert run.arrival_s.tolist() == [0.0, 0.5]
    assert run.prompt_tokens.tolist() == [12, 7] and run.output_tokens.tolist() == [3, 2]
    np.testing.assert_allclose(run.first_token_s, [0.1, 0.6])  # the role-only chunk carries no text
    np.testing.assert_allclose(run.finish_s, [0.2, 0.7])
    np.testing.assert_allclose(run.requests()["tpot_ms"], [50.0, 100.0])
    assert len(run.token_times[0]) == 3 and run.ok is None and not run.notes


def test_genai_perf_triton_counts_chunks_and_takes_prompt_lengths(tmp_path):
    reqs = [{"timestamp": 1, "request_inputs": {"text_input": "This is test"},
             "response_timestamps": [3, 5, 8],
             "response_outputs": [{"text_output": t} for t in ("I", " like", " dogs")]},
            {"timestamp": 2, "request_inputs": {"text_input": "x"}, "response_timestamps": [],
             "response_outputs": []}]
    doc = genai_doc(reqs) | {"service_kind": "triton"}
    p = write_json(tmp_path, doc)
    with pytest.raises(SimbatchError, match="prompt_tokens=") as e:
        read_genai_perf(p)
    assert e.value.where == f"{p}: entry 1"
    run = read_genai_perf(p, prompt_tokens=[4, 5])
    assert run.system == "triton" and run.prompt_tokens.tolist() == [4, 5]
    assert run.output_tokens.tolist() == [3, 1] and run.ok.tolist() == [True, False]
    np.testing.assert_allclose(run.first_token_s[0], 2e-9)
    assert any("responses carrying text" in n for n in run.notes)
    assert read_measured(p, prompt_tokens=9).prompt_tokens.tolist() == [9, 9]


def test_genai_perf_several_experiments_need_a_choice(tmp_path):
    reqs = [{"timestamp": 1, "response_timestamps": [3], "response_outputs": [{"text_output": "a"}]}]
    p = write_json(tmp_path, genai_doc(reqs, experiments=2))
    with pytest.raises(SimbatchError, match="experiment=0..1"):
        read_genai_perf(p, prompt_tokens=3)
    assert len(read_genai_perf(p, experiment=1, prompt_tokens=3)) == 1


# --- generic CSV / JSONL ------------------------------------------------------

def test_generic_csv_absolute_times_in_ms(tmp_path):
    p = tmp_path / "run.csv"
    p.write_text("t,p,o,ft,done\n2000,30,4,2100,2400\n1000,20,2,1050,1100\n")
    cols = {"arrival": "t", "prompt": "p", "output": "o", "first_token": "ft", "finish": "done", "time_unit": "ms"}
    run = read_measured(p, columns=cols)
    assert run.arrival_s.tolist() == [0.0, 1.0] and run.prompt_tokens.tolist() == [20, 30]
    df = run.requests()
    np.testing.assert_allclose(df["ttft_ms"], [50.0, 100.0])
    np.testing.assert_allclose(df["tpot_ms"], [50.0, 100.0])
    np.testing.assert_allclose(df["e2el_ms"], [100.0, 400.0])


def test_generic_jsonl_with_durations(tmp_path):
    p = tmp_path / "run.jsonl"
    p.write_text('{"at": 5.0, "in": 8, "out": 3, "ttft": 0.25, "e2el": 1.25}\n'
                 '{"at": 6.5, "in": 9, "out": 1, "ttft": 0.5, "e2el": 0.5}\n')
    run = read_generic_run(p, {"arrival": "at", "prompt": "in", "output": "out", "ttft": "ttft", "e2el": "e2el"},
                           system="sglang")
    assert run.system == "sglang" and run.arrival_s.tolist() == [0.0, 1.5]
    df = run.requests()
    np.testing.assert_allclose(df["tpot_ms"][0], 500.0)
    assert np.isnan(df["tpot_ms"][1])
    w = run.workload()
    assert w.arrival_s.tolist() == [0.0, 1.5] and w.output_tokens.tolist() == [3, 1]


# --- format inference ----------------------------------------------------------

def test_detection(tmp_path):
    assert detect_measured_format(write_exp(tmp_path, [exp_row(0, 1, 2)])) == "distserve"
    assert detect_measured_format(write_exp(tmp_path, [exp_row(0, 1, 2)], name="log.txt")) == "distserve"
    assert detect_measured_format(write_json(tmp_path, vllm_doc())) == "vllm"
    assert detect_measured_format(write_json(tmp_path, genai_doc([]), "g.json")) == "genai-perf"
    assert detect_measured_format(write_json(tmp_path, {"x": 1}, "x.csv")) == "generic"
    with pytest.raises(SimbatchError, match="format="):
        detect_measured_format(write_json(tmp_path, {"x": 1}, "x.json"))


def test_explicit_format_wins(tmp_path):
    p = write_exp(tmp_path, [exp_row(0, 1, 2)], name="distserve-odd.json")
    assert read_measured(p, format="distserve").system == "distserve"
    with pytest.raises(SimbatchError, match="unknown format"):
        read_measured(p, format="sarathi")
    with pytest.raises(SimbatchError, match="only allowed with format 'generic'"):
        read_measured(p, format="distserve", columns={"arrival": "a"})
    with pytest.raises(SimbatchError, match="unknown option"):
        read_measured(p, format="distserve", arrivals=[0.0])


# --- malformed input: one SimbatchError naming the file and entry ----------------

def entry(i):
    return f": entry {i}"


POSITIVE = {"ttft_ms": 1.0, "tpot_ms": 1.0, "latency_ms": 1.0}  # so only the times' order is wrong
BAD_EXP = [
    ("[{'prompt_len': 1,", ":1", "not a Python literal"),
    ("[__import__('os').system('true')]", ":1", "not a plain Python literal"),
    ("{'prompt_len': 1}", ":1", "expected a list"),
    ("[]", ":1", "no requests"),
    ("[1]", entry(1), "expected a dict"),
    ([exp_row(0, 1, 2), {k: v for k, v in exp_row(0, 1, 2).items() if k != "ttft_ms"}], entry(2),
     "missing key 'ttft_ms'"),
    ([exp_row(0, 1, 2) | {"issue_time": float("inf")}], entry(1), "issue_time: expected a finite number"),
    ([exp_row(0, 1, 2) | {"prompt_len": "12"}], entry(1), "prompt_len: expected a whole number, got '12'"),
    ([exp_row(0, 1, 2) | {"output_len": 0}], entry(1), "output_len: expected a whole number >= 1, got 0"),
    ([exp_row(0, 1, 2) | {"prompt_len": True}], entry(1), "prompt_len: expected a whole number"),
    ([exp_row(0, 1, 2) | {"tpot_ms": -1.0}], entry(1), "tpot_ms: expected a number >= 0.0, got -1.0"),
    ([exp_row(0, 1, 2), exp_row(5, 4, 6) | POSITIVE], entry(2), "first_token_time 4.0 is before issue_time 5.0"),
    ([exp_row(5, 6, 5.5) | POSITIVE], entry(1), "complete_time 5.5 is before first_token_time 6.0"),
]


@pytest.mark.parametrize("rows, where, cause", BAD_EXP)
def test_bad_exp(tmp_path, rows, where, cause):
    text = rows if isinstance(rows, str) else repr(rows).replace("inf", "1e999")
    p = write_exp(tmp_path, text)
    with pytest.raises(SimbatchError) as e:
        read_measured(p)
    assert e.value.where == f"{p}{where}"
    assert cause in e.value.cause and "\n" not in str(e.value)


def test_bad_files(tmp_path):
    cases = {"missing.exp": (None, "log file not found", ""), "dir.exp": ("dir", "is a folder", ""),
             "empty.exp": (b"  \n", "file is empty", ""),
             "latin.exp": (b"[{'a': '\xe9'}]", r"not UTF-8 text \(byte 0xe9", ":1")}
    for name, (content, cause, line) in cases.items():
        p = tmp_path / name
        if content == "dir":
            p.mkdir()
        elif content is not None:
            p.write_bytes(content)
        with pytest.raises(SimbatchError, match=cause) as e:
            read_measured(p)
        assert e.value.where == f"{p}{line}"
    deep = tmp_path / "deep.exp"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SimbatchError, match=r"deep|literal"):
        read_distserve(deep)


BAD_VLLM = [
    ([1, 2], "", "expected a JSON object"),
    (vllm_doc(ttfts=None), "", "'ttfts': expected a list"),
    ({k: v for k, v in vllm_doc().items() if k != "itls"}, "", "missing key 'itls'"),
    (vllm_doc(input_lens=[1, 2]), "", "'input_lens' has 2 entries but 'ttfts' has 3"),
    (vllm_doc(input_lens=[], output_lens=[], ttfts=[], itls=[], errors=[], start_times=[]), "", "no requests"),
    (vllm_doc(input_lens=[100, 0, 70]), entry(2), "input_lens: expected a whole number >= 1, got 0"),
    (vllm_doc(ttfts=[0.1, -0.2, 0.0]), entry(2), "ttfts: expected a number >= 0.0, got -0.2"),
    (vllm_doc(ttfts=[0.1, "x", 0.0]), entry(2), "ttfts: expected a number, got 'x'"),
    (vllm_doc(itls=[[0.05, None], [0.03], []]), entry(1), "itls[1]: expected a number, got None"),
    (vllm_doc(itls=[[0.05], 0.03, []]), entry(2), "itls: expected a list of numbers"),
    (vllm_doc(errors=["", 3, ""]), entry(2), "errors: expected a string"),
    (vllm_doc(start_times=[0.0, "later", 1.0]), entry(2), "start_times: expected a number"),
    (vllm_doc(start_times=[0.0]), "", "'start_times': expected a list of 3 numbers"),
]


@pytest.mark.parametrize("doc, where, cause", BAD_VLLM)
def test_bad_vllm(tmp_path, doc, where, cause):
    p = write_json(tmp_path, doc)
    with pytest.raises(SimbatchError) as e:
        read_measured(p, format="vllm")
    assert e.value.where == f"{p}{where}" and cause in e.value.cause


def test_bad_json_names_the_line(tmp_path):
    p = tmp_path / "run.json"
    p.write_text('{"ttfts": [0.1,\n 0.2,,]}')
    with pytest.raises(SimbatchError, match="invalid JSON") as e:
        read_vllm(p)
    assert e.value.where == f"{p}:2"
    p.write_text('{"ttfts": [NaN], "input_lens": [1], "output_lens": [1], "itls": [[]], "start_times": [0]}')
    with pytest.raises(SimbatchError, match="ttfts: expected a finite number, got nan"):
        read_vllm(p)


def genai_ok(**over):
    return {"timestamp": 10, "response_timestamps": [20, 30], "response_outputs": [{"text_output": "a"},
                                                                                 {"text_output": "b"}]} | over


BAD_GENAI = [
    ({"experiments": {}}, "", "'experiments' list"),
    ({"experiments": []}, "", "'experiments' is empty"),
    ({"experiments": [{"requests": []}]}, "", "non-empty 'requests' list"),
    (genai_doc([genai_ok(), 5]), entry(2), "expected an object, got 5"),
    (genai_doc([{k: v for k, v in genai_ok().items() if k != "timestamp"}]), entry(1), "missing key 'timestamp'"),
    (genai_doc([genai_ok(timestamp=-1)]), entry(1), "timestamp: expected a number >= 0, got -1"),
    (genai_doc([genai_ok(response_timestamps=[20])]), entry(1), "two lists of one length"),
    (genai_doc([genai_ok(response_timestamps=[30, 20])]), entry(1), "before the previous response"),
    (genai_doc([genai_ok(timestamp=25)]), entry(1), "first response 20 is before timestamp 25"),
    (genai_doc([genai_ok(response_outputs=[{"text_output": "a"}, "b"])]), entry(1),
     "response_outputs[1]: expected an object"),
    (genai_doc([genai_ok(response_outputs=[{"text_output": "a"}, {"response": "data: {oops"}])]), entry(1),
     "response_outputs[1]: not JSON"),
    (genai_doc([genai_ok(response_outputs=[{"text_output": "a"}, sse(usage={"prompt_tokens": 0})])]), entry(1),
     "usage.prompt_tokens: expected a whole number >= 1, got 0"),
]


@pytest.mark.parametrize("doc, where, cause", BAD_GENAI)
def test_bad_genai_perf(tmp_path, doc, where, cause):
    p = write_json(tmp_path, doc)
    with pytest.raises(SimbatchError) as e:
        read_measured(p, format="genai-perf", prompt_tokens=5)
    assert e.value.where == f"{p}{where}" and cause in e.value.cause


def test_bad_genai_options(tmp_path):
    p = write_json(tmp_path, genai_doc([genai_ok()]))
    for kwargs, cause in (({"prompt_tokens": [1, 2]}, "expected 1 values"), ({"prompt_tokens": 0}, ">= 1"),
                          ({"prompt_tokens": 3, "experiment": 4}, "expected an index 0..0")):
        with pytest.raises(SimbatchError, match=cause):
            read_genai_perf(p, **kwargs)


GENERIC = {"arrival": "t", "prompt": "p", "output": "o", "first_token": "ft", "finish": "done"}
BAD_GENERIC = [
    ("t,p,o,ft,done\n0,1,1,0.1,0.2\n1,1,1,x,2\n", GENERIC, ":3", "ft: expected a finite number, got 'x'"),
    ("t,p,o,ft,done\n0,1,0,0.1,0.2\n", GENERIC, ":2", "o: expected a positive integer"),
    ("t,p,o,ft,done\n0,1,1,0.1,0.2\n1,1,1,0.5,2\n", GENERIC, ":3", "ft 0.5 is before t 1.0"),
    ("t,p,o,ft,done\n0,1,1,0.3,0.2\n", GENERIC, ":2", "done 0.2 is before ft 0.3"),
    ("t,p,o,ft\n0,1,1,0.3\n", GENERIC, ":1", "missing column 'done'"),
    ("t,p,o,ft,done\n", GENERIC, "", "no requests"),
    ("t,p,o,ttft,e2el\n0,1,1,0.3,-1\n", {**GENERIC, "first_token": None, "finish": None, "ttft": "ttft",
                                         "e2el": "e2el"}, ":2", "e2el: expected a finite number >= 0"),
]


@pytest.mark.parametrize("text, cols, where, cause", BAD_GENERIC)
def test_bad_generic(tmp_path, text, cols, where, cause):
    p = tmp_path / "run.csv"
    p.write_text(text)
    cols = {k: v for k, v in cols.items() if v is not None}
    with pytest.raises(SimbatchError) as e:
        read_measured(p, columns=cols)
    assert e.value.where == f"{p}{where}" and cause in e.value.cause


@pytest.mark.parametrize("cols, cause", [
    ("t", "expected a mapping"), ({**GENERIC, "colour": "c"}, "unknown key"),
    ({k: v for k, v in GENERIC.items() if k != "prompt"}, "missing"),
    ({**GENERIC, "ttft": "x"}, "exactly one of 'first_token'"),
    ({**GENERIC, "time_unit": "h"}, "expected one of s, ms, us"), ({**GENERIC, "prompt": 3}, "expected a column name"),
])
def test_bad_generic_mapping(tmp_path, cols, cause):
    p = tmp_path / "run.csv"
    p.write_text("t,p,o,ft,done\n0,1,1,0.1,0.2\n")
    with pytest.raises(SimbatchError, match=cause):
        read_measured(p, columns=cols)


def test_generic_needs_columns(tmp_path):
    p = tmp_path / "run.csv"
    p.write_text("t,p\n0,1\n")
    with pytest.raises(SimbatchError, match="required") as e:
        read_measured(p)
    assert e.value.where == "columns"


def test_measured_run_is_the_dataclass(tmp_path):
    assert isinstance(read_measured(write_exp(tmp_path, [exp_row(0, 1, 2)])), MeasuredRun)
