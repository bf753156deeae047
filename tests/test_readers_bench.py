"""Readers of the LMBench CSV and LLMServingSim's vLLM bench files: the real logs, hostile copies of
them (one-line errors naming file and line), and simbatch's own runs written in each format and read
back, which validate with errors of zero."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simbatch import load_scenario, run
from simbatch.cli import main
from simbatch.errors import SimbatchError
from simbatch.measured import (FORMATS, bench_companions, detect_measured_format, read_engine_meta,
                               read_llmservingsim, read_lmbench, read_measured, read_timeseries,
                               write_llmservingsim, write_lmbench)
from simbatch.measured.readers_bench import LMBENCH_COLUMNS, TIMESERIES_COLUMNS
from simbatch.validation.against import ERROR_KEYS, validate_against

MEASURED = Path(__file__).resolve().parents[1].parent / "shared" / "measured"
LLMD = MEASURED / "llmd-vllm-2025"
BENCH = MEASURED / "llmservingsim-vllm0.19" / "RTX4090" / "Llama-3.1-8B" / "vllm"
SMALL = ["workload.synthetic.num_requests=150"]


def lmbench_files():
    return sorted(LLMD.glob("exp-*/LMBench_sharegpt_output_*.csv")) if LLMD.is_dir() else []


@pytest.fixture
def llmd():
    if not LLMD.is_dir():
        pytest.skip(f"../shared/measured is absent: the LMBench logs live beside the repo ({LLMD})")


@pytest.fixture
def bench():
    if not BENCH.is_dir():
        pytest.skip(f"../shared/measured is absent: LLMServingSim's vLLM bench files live beside the repo ({BENCH})")


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- the real LMBench CSVs ------------------------------------------------------------

@pytest.mark.parametrize("name", [str(p.relative_to(LLMD)) for p in lmbench_files()] or ["none"])
def test_every_real_lmbench_csv(llmd, name):
    path = LLMD / name
    raw = pd.read_csv(path)
    assert detect_measured_format(path) == "lmbench"
    run_ = read_measured(path)
    assert len(run_) == len(raw) == 252 and run_.system == "" and run_.ok is None
    assert run_.arrival_s[0] == 0.0 and (np.diff(run_.arrival_s) >= 0).all()
    assert run_.clock_start_s == raw["launch_time"].min()
    raw = raw.sort_values("launch_time", kind="stable")
    assert run_.prompt_tokens.tolist() == raw["prompt_tokens"].tolist()
    assert run_.output_tokens.tolist() == raw["generation_tokens"].tolist()
    df = run_.requests()
    np.testing.assert_allclose(df["ttft_ms"], raw["ttft"] * 1e3, rtol=1e-12)
    tpot = np.where(raw["generation_tokens"] > 1,
                    raw["generation_time"] / (raw["generation_tokens"] - 1).clip(lower=1) * 1e3, np.nan)
    np.testing.assert_allclose(df["tpot_ms"], tpot, rtol=1e-9)
    # Sent at a constant interval of 1/QPS (the data README): the rate is the file name's.
    assert run_.offered_rate == pytest.approx(float(path.stem.rsplit("_", 1)[1]), rel=1e-3)


def test_first_lmbench_request_against_the_raw_line(llmd):
    path = LLMD / "exp-0-llama-3.1-70b-a100-tp2" / "LMBench_sharegpt_output_0.5.csv"
    first = path.read_text().splitlines()[1].split(",")  # 689,275,0.176...,14.677...,1746153890.49...,...
    prompt, gen, ttft, gen_time = int(first[0]), int(first[1]), float(first[2]), float(first[3])
    row = read_lmbench(path).requests().iloc[0]
    assert (row["prompt_tokens"], row["output_tokens"]) == (prompt, gen) == (689, 275)
    assert row["ttft_ms"] == pytest.approx(ttft * 1e3, rel=1e-12)
    assert row["tpot_ms"] == pytest.approx(gen_time / (gen - 1) * 1e3, rel=1e-12)
    assert row["e2el_ms"] == pytest.approx((ttft + gen_time) * 1e3, rel=1e-12)


# --- the real LLMServingSim vLLM bench files ------------------------------------------

def test_real_requests_jsonl(bench):
    path = BENCH / "requests.jsonl"
    raw = jsonl(path)
    assert detect_measured_format(path) == "llmservingsim"
    run_ = read_measured(path)
    assert len(run_) == len(raw) == 300 and run_.system == "vllm" and run_.ok is None
    assert run_.clock_start_s == min(r["queued_ts"] for r in raw)
    first = raw[0]  # bench-0: queued first
    row = run_.requests().iloc[0]
    assert (row["prompt_tokens"], row["output_tokens"]) == (first["input_toks"], first["output_toks"])
    assert row["ttft_ms"] == pytest.approx((first["first_token_ts"] - first["queued_ts"]) * 1e3, rel=1e-12)
    assert row["tpot_ms"] == pytest.approx((first["last_token_ts"] - first["first_token_ts"])
                                           / (first["output_toks"] - 1) * 1e3, rel=1e-12)
    df = run_.requests()
    # The harness's own summary (bench/examples/RTX4090/Llama-3.1-8B/validation/summary.txt at
    # LLMServingSim 5daddb21): TTFT mean 65456.6 / median 60110.9 ms, TPOT mean 32.4 / median 30.8 ms.
    assert (round(df["ttft_ms"].mean(), 1), round(df["ttft_ms"].median(), 1)) == (65456.6, 60110.9)
    assert (round(df["tpot_ms"].mean(), 1), round(df["tpot_ms"].median(), 1)) == (32.4, 30.8)
    (note,) = run_.notes
    assert "front end before it is not in the log" in note and "200.7 ms" in note


def test_real_timeseries_and_meta(bench):
    found = bench_companions(BENCH / "requests.jsonl")
    assert set(found) == {"meta", "timeseries"}
    ts = read_timeseries(found["timeseries"])
    assert tuple(ts.columns) == TIMESERIES_COLUMNS and len(ts) == 184
    assert ts.iloc[0].tolist() == [1.0, 3392.0, 2.0, 5, 2, 13.22]
    assert ts["running"].dtype == np.int64 and ts["kv_cache_pct"].max() <= 100
    meta = read_engine_meta(found["meta"])
    assert (meta.num_gpu_blocks, meta.block_size, meta.kv_tokens) == (2588, 16, 41408)
    assert (meta.max_num_seqs, meta.max_num_batched_tokens, meta.gpu_memory_utilization) == (256, 2048, 0.9)
    assert meta.enable_prefix_caching is True and meta.device_total_memory_bytes == 25250627584
    assert (meta.vllm_version, meta.device_name) == ("0.19.0", "NVIDIA GeForce RTX 4090")


# --- hostile copies -------------------------------------------------------------------

LMBENCH_OK = ["689,275,0.17,14.6,1746153890.5,1746153905.27", "543,332,0.18,18.2,1746153892.5,1746153910.88"]


def write_lmbench_rows(tmp_path, rows, header=",".join(LMBENCH_COLUMNS), name="lmbench.csv"):
    p = tmp_path / name
    p.write_text("\n".join([header, *rows]) + "\n")
    return p


def swap(line: str, index: int, value: str) -> str:
    cells = line.split(",")
    cells[index] = value
    return ",".join(cells)


BAD_LMBENCH = [
    ("missing column", ["689,275,0.17,14.6,1746153890.5"], ",".join(LMBENCH_COLUMNS[:-1]), ":1",
     "missing column 'finish_time'"),
    ("non-numeric", [LMBENCH_OK[0], swap(LMBENCH_OK[1], 2, "fast")], None, ":3",
     "ttft: expected a finite number >= 0, got 'fast'"),
    ("negative time", [swap(LMBENCH_OK[0], 3, "-0.5"), LMBENCH_OK[1]], None, ":2",
     "generation_time: expected a finite number >= 0, got '-0.5'"),
    ("no tokens", [LMBENCH_OK[0], swap(LMBENCH_OK[1], 1, "0")], None, ":3",
     "generation_tokens: expected a positive integer, got '0'"),
    ("early finish", [LMBENCH_OK[0], swap(LMBENCH_OK[1], 5, "1746153900.0")], None, ":3",
     "finish_time 1746153900.0 is before launch_time + ttft + generation_time"),
    ("empty", [], None, "", "file is empty: no requests"),
]


@pytest.mark.parametrize("case, rows, header, where, cause", BAD_LMBENCH, ids=[c[0] for c in BAD_LMBENCH])
def test_bad_lmbench(tmp_path, case, rows, header, where, cause):
    p = write_lmbench_rows(tmp_path, rows, **({"header": header} if header else {}))
    with pytest.raises(SimbatchError) as e:
        read_measured(p, format="lmbench")
    assert e.value.where == f"{p}{where}" and cause in e.value.cause
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_lmbench_blank_file_and_detection(tmp_path):
    p = tmp_path / "blank.csv"
    p.write_text("")
    with pytest.raises(SimbatchError, match="file is empty") as e:
        read_measured(p)
    assert e.value.where == str(p)
    ok = write_lmbench_rows(tmp_path, LMBENCH_OK)
    assert detect_measured_format(ok) == "lmbench" and len(read_measured(ok)) == 2
    # Any other header is not LMBench's: a generic log, which needs a column mapping.
    other = write_lmbench_rows(tmp_path, ["1,2,3"], header="a,b,c", name="other.csv")
    assert detect_measured_format(other) == "generic"
    extra = write_lmbench_rows(tmp_path, [LMBENCH_OK[0] + ",x"], header=",".join(LMBENCH_COLUMNS) + ",note",
                               name="extra.csv")
    assert detect_measured_format(extra) == "generic"
    assert {"lmbench", "llmservingsim"} <= set(FORMATS)


def bench_record(i=0, **over):
    base = 27536.0 + i
    return {"request_id": f"bench-{i}", "input_toks": 100, "output_toks": 11, "arrival_time": 1787267980.0 + i,
            "queued_ts": base, "scheduled_ts": base + 0.01, "first_token_ts": base + 0.2,
            "last_token_ts": base + 1.2} | over


def write_records(tmp_path, records, name="requests.jsonl"):
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return p


def drop(record: dict, key: str) -> dict:
    return {k: v for k, v in record.items() if k != key}


BAD_BENCH = [
    ("missing key", [bench_record(0), drop(bench_record(1), "last_token_ts")], ":2",
     "last_token_ts: expected a number, got nothing (key missing)"),
    ("missing everywhere", [drop(bench_record(0), "scheduled_ts")], ":1", "missing column 'scheduled_ts'"),
    ("non-numeric", [bench_record(0), bench_record(1, queued_ts="soon")], ":2",
     "queued_ts: expected a number, got 'soon'"),
    ("boolean", [bench_record(0, output_toks=True)], ":1", "output_toks: expected a positive integer"),
    ("negative time", [bench_record(0), bench_record(1, arrival_time=-5.0)], ":2",
     "arrival_time: expected a finite number >= 0, got -5.0"),
    ("first token before queued", [bench_record(0), bench_record(1, first_token_ts=27536.5)], ":2",
     "first_token_ts 27536.5 is before queued_ts 27537.0"),
    ("scheduled before queued", [bench_record(0, scheduled_ts=27535.0)], ":1",
     "scheduled_ts 27535.0 is before queued_ts 27536.0"),
    ("last before first", [bench_record(0, last_token_ts=27536.1)], ":1",
     "last_token_ts 27536.1 is before first_token_ts 27536.2"),
    ("partly null", [bench_record(0, first_token_ts=None)], ":1", "first_token_ts: expected a number, got None"),
    ("invalid JSON", [bench_record(0), bench_record(1), '{"request_id": "bench-2",'], ":3", "invalid JSON"),
    ("no prompt", [bench_record(0, input_toks=0)], ":1", "input_toks: expected a positive integer, got 0"),
]


@pytest.mark.parametrize("case, records, where, cause", BAD_BENCH, ids=[c[0] for c in BAD_BENCH])
def test_bad_requests_jsonl(tmp_path, case, records, where, cause):
    p = write_records(tmp_path, records)
    with pytest.raises(SimbatchError) as e:
        read_measured(p, format="llmservingsim")
    assert e.value.where == f"{p}{where}" and cause in e.value.cause
    assert "\n" not in str(e.value)


def test_requests_jsonl_empty_and_unstamped(tmp_path):
    empty = write_records(tmp_path, [], name="empty.jsonl")
    empty.write_text("\n")
    with pytest.raises(SimbatchError, match="file is empty") as e:
        read_llmservingsim(empty)
    assert e.value.where == str(empty)
    # A request the bench got no metrics for has null times: left out, with a note.
    blank = bench_record(1) | {k: None for k in ("arrival_time", "queued_ts", "scheduled_ts", "first_token_ts",
                                                 "last_token_ts")}
    p = write_records(tmp_path, [bench_record(0), blank, bench_record(2)])
    run_ = read_measured(p)
    assert len(run_) == 2 and run_.arrival_s.tolist() == [0.0, 2.0]
    assert "1 records have no timestamps" in run_.notes[0]
    with pytest.raises(SimbatchError, match="no record has timestamps"):
        read_llmservingsim(write_records(tmp_path, [blank], name="none.jsonl"))


def test_requests_jsonl_sorted_by_queued_and_rebased(tmp_path):
    p = write_records(tmp_path, [bench_record(3), bench_record(1), bench_record(2)])
    run_ = read_measured(p)
    assert run_.arrival_s.tolist() == [0.0, 1.0, 2.0] and run_.clock_start_s == 27537.0
    assert any("sorted 3 by arrival" in n for n in run_.notes)
    df = run_.requests()
    np.testing.assert_allclose(df["ttft_ms"], 200.0, rtol=1e-9)
    np.testing.assert_allclose(df["tpot_ms"], 100.0, rtol=1e-9)  # 1.0 s over 10 gaps


TS_HEADER = ",".join(TIMESERIES_COLUMNS)
TS_OK = ["1.0,3392.0,2.0,5,2,13.22", "2.0,9045.0,79.0,16,0,39.7"]
BAD_TIMESERIES = [
    ("missing column", "t,prompt_throughput,gen_throughput,running,waiting", ["1.0,1,1,1,1"], ":1",
     "missing column 'kv_cache_pct'"),
    ("non-numeric", TS_HEADER, [TS_OK[0], "2.0,9045.0,79.0,many,0,39.7"], ":3", "running: expected an integer"),
    ("negative", TS_HEADER, [TS_OK[0], "2.0,9045.0,-1.0,16,0,39.7"], ":3", "gen_throughput: expected a finite"),
    ("backwards", TS_HEADER, [TS_OK[1], TS_OK[0]], ":3", "t: expected a time after the previous row's 2.0"),
    ("over 100 %", TS_HEADER, [TS_OK[0], "2.0,9045.0,79.0,16,0,100.5"], ":3", "kv_cache_pct: expected a percentage"),
    ("empty", TS_HEADER, [], "", "file is empty: no requests"),
]


@pytest.mark.parametrize("case, header, rows, where, cause", BAD_TIMESERIES, ids=[c[0] for c in BAD_TIMESERIES])
def test_bad_timeseries(tmp_path, case, header, rows, where, cause):
    p = tmp_path / "timeseries.csv"
    p.write_text("\n".join([header, *rows]) + "\n")
    with pytest.raises(SimbatchError) as e:
        read_timeseries(p)
    assert e.value.where == f"{p}{where}" and cause in e.value.cause


def test_timeseries_keeps_newer_columns(tmp_path):
    p = tmp_path / "timeseries.csv"
    p.write_text(TS_HEADER + ",preempted,prompt_cached_throughput\n" + TS_OK[0] + ",0,12.5\n" + TS_OK[1] + ",2,0\n")
    ts = read_timeseries(p)
    assert ts["preempted"].tolist() == [0, 2] and ts["preempted"].dtype == np.int64
    assert ts["prompt_cached_throughput"].tolist() == [12.5, 0.0]


def test_engine_meta(tmp_path):
    p = tmp_path / "meta.json"
    p.write_text(json.dumps({"vllm_version": "0.19.0", "engine_kwargs": {"max_num_seqs": 128},
                             "kv_cache": {}, "resolved_config": {"cache_config": {"num_gpu_blocks": 100,
                                                                                  "block_size": 32}}}))
    meta = read_engine_meta(p)
    assert (meta.num_gpu_blocks, meta.block_size, meta.kv_tokens, meta.max_num_seqs) == (100, 32, 3200, 128)
    assert meta.max_num_batched_tokens is None and meta.device_total_memory_bytes is None
    p.write_text(json.dumps({"kv_cache": {"num_gpu_blocks": None}}))
    assert read_engine_meta(p).kv_tokens is None
    for doc, cause in (({"kv_cache": {"num_gpu_blocks": "many"}}, "kv_cache.num_gpu_blocks: expected a whole number"),
                       ({"kv_cache": {"gpu_memory_utilization": 1.5}}, "expected a fraction in (0, 1]"),
                       ({"kv_cache": {"enable_prefix_caching": "yes"}}, "expected true or false"),
                       ({"hardware": {"device_total_memory_bytes": -1}}, "expected a whole number >= 1"),
                       ([1, 2], "expected a JSON object")):
        p.write_text(json.dumps(doc))
        with pytest.raises(SimbatchError) as e:
            read_engine_meta(p)
        assert e.value.where == str(p) and cause in e.value.cause
    p.write_text('{"kv_cache":\n {"num_gpu_blocks": 1,,}}')
    with pytest.raises(SimbatchError, match="invalid JSON") as e:
        read_engine_meta(p)
    assert e.value.where == f"{p}:2"


# --- simbatch's own runs, written in each format and read back ---------------------------

WRITERS = {"lmbench": (write_lmbench, "own.csv", {}),
           "llmservingsim": (write_llmservingsim, "own.jsonl", {"epoch_s": 1787267980.08, "monotonic_s": 27536.66})}


@pytest.fixture(scope="module")
def chat_run():
    scenario = load_scenario("chat", SMALL + ["slo.ttft_ms=60", "slo.tpot_ms=18"])
    out = run(scenario)
    assert out.requests["completed"].all()
    return scenario, out.requests


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_own_log_in_each_format_gives_zero_errors(tmp_path, chat_run, fmt):
    scenario, requests = chat_run
    writer, name, kwargs = WRITERS[fmt]
    log = writer(requests, tmp_path / name, **kwargs)
    assert detect_measured_format(log) == fmt
    (v,) = validate_against(scenario, [log]).logs
    for key in ERROR_KEYS:
        assert v.errors[key] == pytest.approx(0.0, abs=1e-9), key
    assert v.errors["attainment_measured"] == v.errors["attainment_predicted"]
    assert 0 < v.errors["attainment_measured"] < 1
    for col in ("ttft_ms", "tpot_ms", "e2el_ms"):
        m, p = v.pairs[f"{col}_measured"].to_numpy(), v.pairs[f"{col}_predicted"].to_numpy()
        assert np.allclose(m, p, rtol=1e-9, atol=1e-9, equal_nan=True), col


def test_own_lmbench_at_a_real_epoch_rounds_the_sends_only(tmp_path, chat_run):
    scenario, requests = chat_run
    log = write_lmbench(requests, tmp_path / "epoch.csv", epoch_s=1746153890.0)
    df = read_lmbench(log).requests()
    np.testing.assert_allclose(df["arrival_s"], requests["arrival_s"], atol=1e-6)  # float64 at 1.7e9 s
    np.testing.assert_allclose(df["ttft_ms"], requests["ttft_ms"], rtol=1e-12)  # durations are the file's
    (v,) = validate_against(scenario, [log]).logs
    for key in ERROR_KEYS:
        assert v.errors[key] == pytest.approx(0.0, abs=1e-5), key


def test_writers_refuse_what_they_cannot_write(tmp_path, chat_run):
    _, requests = chat_run
    with pytest.raises(SimbatchError, match="missing column"):
        write_lmbench(requests.drop(columns=["finish_s"]), tmp_path / "x.csv")
    with pytest.raises(SimbatchError, match="no request completed"):
        write_lmbench(requests.assign(completed=False), tmp_path / "x.csv")
    # A request that did not complete: null times, as the bench writes it; read back, it is left out.
    partial = requests.assign(completed=requests["id"] != 3)
    log = write_llmservingsim(partial, tmp_path / "partial.jsonl")
    assert jsonl(log)[3]["first_token_ts"] is None
    assert len(read_llmservingsim(log)) == len(requests) - 1


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_cli_validate_against_each_format(tmp_path, capsys, chat_run, fmt):
    scenario, requests = chat_run
    writer, name, kwargs = WRITERS[fmt]
    log = writer(requests, tmp_path / name, **kwargs)
    out = tmp_path / "out"
    args = ["validate", "chat", *[a for o in SMALL + ["slo.ttft_ms=60", "slo.tpot_ms=18"] for a in ("--set", o)],
            "--against", str(log), "--out", str(out)]
    assert main(args) == 0  # no --columns: the format is detected
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.startswith("own "))
    assert "+0.0" in row
    doc = json.loads((out / "validation.json").read_text())
    assert doc["against"][0]["num_requests"] == 150 and doc["against"][0]["ttft_p50_err"] == pytest.approx(0, abs=1e-9)


REAL_SCENARIO = """\
name: vllm-v1-llama70b-tp2
workload: {synthetic: {num_requests: 4, arrival: {kind: poisson, rate: 1}, prompt: {kind: fixed, value: 8},
           output: {kind: fixed, value: 8}}}
model: llama-3.1-70b
hardware: a100-80gb
cluster: {replicas: 1, tensor_parallel: 2}
policy: {kind: chunked_prefill, max_num_seqs: 256, max_num_batched_tokens: 2048}
kv_cache: {block_size: 16, gpu_memory_utilization: 0.95}
slo: {ttft_ms: 2000, tpot_ms: 100}
"""


def test_cli_validate_against_a_real_lmbench_log(llmd, tmp_path, capsys):
    scenario = tmp_path / "v1.yaml"
    scenario.write_text(REAL_SCENARIO)
    log = LLMD / "exp-0-llama-3.1-70b-a100-tp2" / "LMBench_sharegpt_output_0.5.csv"
    assert main(["validate", str(scenario), "--against", str(log), "--out", str(tmp_path / "out")]) == 0
    doc = json.loads((tmp_path / "out" / "validation.json").read_text())
    (entry,) = doc["against"]
    assert entry["num_requests"] == 252 and entry["offered_rate"] == pytest.approx(0.5, rel=1e-3)
    assert "LMBench_sharegpt_output_0.5" in capsys.readouterr().out
