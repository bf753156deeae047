"""Trace readers: the real public traces, and every kind of broken file."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from simbatch.errors import SimbatchError
from simbatch.workload import detect_format, read_azure, read_generic, read_lengths, read_mooncake
from simbatch.workload.readers import read_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


@pytest.fixture
def traces() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared/traces not present: real-trace tests need the shared folder beside the repo")
    return SHARED


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode())
    return p


def error_of(fn, *args) -> SimbatchError:
    with pytest.raises(SimbatchError) as info:
        fn(*args)
    return info.value


# --- real traces -------------------------------------------------------------

@pytest.mark.parametrize("name, rows, prompt_total, output_total, span", [
    ("AzureLLMInferenceTrace_code.csv", 8_819, 18_059_974, 245_896, 3435.9),
    ("AzureLLMInferenceTrace_conv.csv", 19_366, 22_361_870, 4_088_665, 3501.7),
    ("mooncake_conversation_trace.jsonl", 12_031, 144_793_823, 4_122_048, 3537.0),
])
def test_real_traces_match_readme(traces, name, rows, prompt_total, output_total, span):
    start = time.perf_counter()
    w = read_trace(traces / name)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"{name} took {elapsed:.2f} s"
    assert len(w) == rows
    assert int(w.prompt_tokens.sum()) == prompt_total
    assert int(w.output_tokens.sum()) == output_total
    assert w.arrival_s[0] == 0.0 and w.arrival_s[-1] == pytest.approx(span, abs=0.05)
    assert (np.diff(w.arrival_s) >= 0).all() and w.notes == []
    assert w.prompt_tokens.dtype == np.int64 and w.output_tokens.min() >= 1


def test_detect_format_on_real_traces(traces):
    assert detect_format(traces / "AzureLLMInferenceTrace_code.csv") == "azure"
    assert detect_format(traces / "mooncake_conversation_trace.jsonl") == "mooncake"


def test_mooncake_hash_ids_are_512_token_blocks(traces):
    w = read_mooncake(traces / "mooncake_conversation_trace.jsonl")
    assert all(isinstance(h, tuple) for h in w.hash_ids)
    assert [len(h) for h in w.hash_ids] == [math.ceil(p / 512) for p in w.prompt_tokens]
    assert all(h[0] == 0 for h in w.hash_ids)  # the shared system-prompt block


def test_azure_conv_first_rows(traces):
    w = read_azure(traces / "AzureLLMInferenceTrace_conv.csv")
    assert w.request(0).prompt_tokens == 374 and w.request(0).output_tokens == 44
    assert w.arrival_s[1] == pytest.approx(4.314579, abs=1e-6)  # 7-digit fractions kept
    assert w.source == "azure:AzureLLMInferenceTrace_conv.csv"


# --- small well-formed files ---------------------------------------------------

def test_azure_crlf_without_trailing_newline(tmp_path):
    p = write(tmp_path, "a.csv", f"{AZURE_HEADER}\r\n2023-11-16 18:17:03.9799600,10,2\r\n"
                                 "2023-11-16 18:17:05.0000000,20,3")
    w = read_azure(p)
    assert w.arrival_s.tolist() == pytest.approx([0.0, 1.02004])
    assert w.prompt_tokens.tolist() == [10, 20]


def test_unsorted_arrivals_are_sorted_stably_with_a_note(tmp_path):
    p = write(tmp_path, "a.csv", f"{AZURE_HEADER}\n2023-11-16 18:00:05,1,1\n"
                                 "2023-11-16 18:00:01,2,1\n2023-11-16 18:00:05,3,1\n")
    w = read_azure(p)
    assert w.prompt_tokens.tolist() == [2, 1, 3]
    assert w.arrival_s.tolist() == [0.0, 4.0, 4.0]
    assert w.notes == [f"{p}: arrivals not in time order; sorted 3 rows"]


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tmp_path):
    p = write(tmp_path, "a.csv", f"{AZURE_HEADER}\n2023-11-16 18:00:00,1,1\n\n2023-11-16 18:00:01,1,0\n")
    assert error_of(read_azure, p).where == f"{p}:4"


def test_read_lengths_with_and_without_arrivals(tmp_path):
    p = write(tmp_path, "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n"
                                 "1.5,100,10\n2.0,200.0,20\n")
    w = read_lengths(p)
    assert w.arrival_s.tolist() == [0.0, 0.5] and w.prompt_tokens.tolist() == [100, 200]
    assert detect_format(p) == "lengths"
    q = write(tmp_path, "l.csv", "num_prefill_tokens,num_decode_tokens\n100,10\n")
    assert np.isnan(read_lengths(q).arrival_s).all()


def test_generic_csv_numeric_ms_with_labels(tmp_path):
    p = write(tmp_path, "g.csv", "t,in,out,sess,prio,blocks\n"
                                 "1000,5,6,a,1,1 2\n3500,7,8,,-1,\"[1, 3]\"\n")
    cols = {"arrival": "t", "prompt": "in", "output": "out", "time_unit": "ms",
            "session_id": "sess", "priority": "prio", "hash_ids": "blocks"}
    w = read_generic(p, cols)
    assert w.arrival_s.tolist() == [0.0, 2.5]
    assert w.session_id == ["a", None] and w.priority.tolist() == [1, -1]
    assert w.hash_ids == [(1, 2), (1, 3)]
    assert detect_format(p) == "generic"


def test_generic_jsonl_with_datetime_arrivals(tmp_path):
    p = write(tmp_path, "g.jsonl", '{"when": "2024-01-01T00:00:00", "p": 3, "o": 4}\n'
                                   '{"when": "2024-01-01T00:00:02.5", "p": 5, "o": 6}\n')
    w = read_generic(p, {"arrival": "when", "prompt": "p", "output": "o"})
    assert w.arrival_s.tolist() == [0.0, 2.5] and w.output_tokens.tolist() == [4, 6]
    assert detect_format(p) == "generic"


# --- broken files ------------------------------------------------------------------

def test_missing_file(tmp_path):
    p = tmp_path / "nope.csv"
    err = error_of(read_azure, p)
    assert err.where == str(p) and "not found" in err.cause


def test_missing_column_is_reported_on_the_header(tmp_path):
    p = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:00:00,1\n")
    err = error_of(read_azure, p)
    assert err.where == f"{p}:1" and "GeneratedTokens" in err.cause


@pytest.mark.parametrize("bad, shown", [("-3", "'-3'"), ("0", "'0'"), ("2.5", "'2.5'"),
                                        ("abc", "'abc'"), ("", "''")])
def test_bad_lengths_name_line_field_and_value(tmp_path, bad, shown):
    p = write(tmp_path, "a.csv", f"{AZURE_HEADER}\n2023-11-16 18:00:00,1,1\n2023-11-16 18:00:01,5,{bad}\n")
    err = error_of(read_azure, p)
    assert err.where == f"{p}:3"
    assert err.cause == f"GeneratedTokens: expected a positive integer, got {shown}"


@pytest.mark.parametrize("value", ["true", "false", str(2**63), "1e12"])
def test_json_booleans_and_counts_beyond_any_context_are_refused(tmp_path, value):
    """JSON true read as a 1-token prompt, and 2**63 wrapped to a negative int64 (issue 14)."""
    p = write(tmp_path, "t.jsonl", f'{{"arrival_s": 0, "prompt": 5, "output": 2}}\n'
                                   f'{{"arrival_s": 1, "prompt": {value}, "output": 2}}\n')
    err = error_of(lambda path: read_generic(path, {"arrival": "arrival_s", "prompt": "prompt",
                                                    "output": "output"}), p)
    assert err.where == f"{p}:2" and err.cause.startswith("prompt: expected a positive integer")


def test_too_many_and_too_few_fields(tmp_path):
    p = write(tmp_path, "a.csv", f"{AZURE_HEADER}\n2023-11-16 18:00:00,1,1\n2023-11-16 18:00:01,1,1,9\n")
    err = error_of(read_azure, p)
    assert (err.where, err.cause) == (f"{p}:3", "expected 3 fields, got 4")
    q = write(tmp_path, "b.csv", f"{AZURE_HEADER}\n2023-11-16 18:00:00,1,1\n2023-11-16 18:00:01,1\n")
    err = error_of(read_azure, q)
    assert (err.where, err.cause) == (f"{q}:3", "expected 3 fields, got 2")


def test_unparseable_timestamp(tmp_path):
    p = write(tmp_path, "a.csv", f"{AZURE_HEADER}\n2023-11-16 18:00:00,1,1\nyesterday,1,1\n")
    err = error_of(read_azure, p)
    assert err.where == f"{p}:3" and err.cause.startswith("TIMESTAMP:") and "'yesterday'" in err.cause


def test_empty_traces(tmp_path):
    header_only = write(tmp_path, "a.csv", AZURE_HEADER + "\n")
    assert error_of(read_azure, header_only).where == str(header_only)
    empty = write(tmp_path, "b.jsonl", "\n")
    assert "empty" in error_of(read_mooncake, empty).cause


def test_mooncake_bad_lines(tmp_path):
    good = '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}\n'
    p = write(tmp_path, "m.jsonl", good + '{"timestamp": 5, "input_length": 6\n')
    err = error_of(read_mooncake, p)
    assert err.where == f"{p}:2" and "invalid JSON" in err.cause
    p = write(tmp_path, "m.jsonl", good + '{"timestamp": 5, "input_length": 6, "hash_ids": [0]}\n')
    err = error_of(read_mooncake, p)
    assert err.where == f"{p}:2" and err.cause.startswith("output_length:")
    p = write(tmp_path, "m.jsonl", good + '{"timestamp": 5, "input_length": 6, "output_length": -1, '
                                          '"hash_ids": [0]}\n')
    assert error_of(read_mooncake, p).cause == "output_length: expected a positive integer, got -1"
    p = write(tmp_path, "m.jsonl", good + '{"timestamp": 5, "input_length": 6, "output_length": 1, '
                                          '"hash_ids": "x"}\n')
    err = error_of(read_mooncake, p)
    assert err.where == f"{p}:2" and err.cause.startswith("hash_ids:")


def test_generic_mapping_errors(tmp_path):
    p = write(tmp_path, "g.csv", "a,b\n1,2\n")
    err = error_of(read_generic, p, {"prompt": "a", "output": "b", "colour": "c"})
    assert err.where == "columns.colour" and "arrival" in err.cause
    assert error_of(read_generic, p, {"prompt": "a"}).where == "columns.output"
    err = error_of(read_generic, p, {"prompt": "a", "output": "b", "time_unit": "h"})
    assert err.where == "columns.time_unit"
    err = error_of(read_generic, p, {"prompt": "a", "output": "zz"})
    assert err.where == f"{p}:1" and "'zz'" in err.cause


def test_a_run_that_cannot_fit_in_memory_is_refused_before_anything_is_built(capsys):
    """--set workload.synthetic.num_requests=1000000000 died in numpy with a MemoryError."""
    from simbatch.cli import main
    from simbatch.workload.size import BYTES_PER_REQUEST, check_fits_in_memory

    check_fits_in_memory(1000, "w", available=1000 * BYTES_PER_REQUEST)  # exactly fits
    with pytest.raises(SimbatchError) as err:
        check_fits_in_memory(1001, "w", available=1000 * BYTES_PER_REQUEST)
    assert err.value.where == "w" and "1,001 requests need at least" in err.value.cause
    assert main(["run", "chat", "--set", "workload.synthetic.num_requests=1000000000000"]) == 2
    err = capsys.readouterr().err
    assert "workload.synthetic.num_requests" in err and "1,000,000,000,000 requests need at least" in err
