"""Issue 14 item 9: a trace that matches no format is told what is wrong with it.

Before, an empty file, an unknown header, a tab-separated file and a one-line
JSONL all got the same "workload.columns: required ... as a generic trace".
Each now gets one line saying what the file holds, through the CLI's entry
point, with exit code 2 and no output folder.
"""

from __future__ import annotations

import pytest

from simbatch.cli import main

SCENARIO = """name: t
workload:
  trace: {trace}
model: llama-2-7b
hardware: a100-80gb
policy: {{kind: continuous}}
"""
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize("name, text, expected", [
    ("empty.csv", "", "t.yaml:2: workload.columns: {p} is empty"),
    ("blank.jsonl", "\n\n", "t.yaml:2: workload.columns: {p} is empty"),
    ("hdr.csv", "a,b,c\n1,2,3\n", "t.yaml:2: workload.columns: {p} has fields a, b, c, which match no known format"),
    ("tabs.csv", AZURE.replace(",", "\t"), "(tab-separated? traces are comma-separated)"),
    ("list.jsonl", "[1, 2]\n", "t.yaml:2: workload.columns: {p} has fields list, which match no known format"),
    ("bad.jsonl", "{not json\n", "t.yaml:2: workload.columns: {p}: its first line is not JSON"),
    # Mooncake's fields but one missing: the row is named, not the format
    ("one.jsonl", '{"timestamp": 1, "input_length": 10, "output_length": 5}\n',
     "{p}:1: missing column 'hash_ids'"),
])
def test_unrecognised_trace_says_what_it_holds(tmp_path, capsys, name, text, expected):
    trace = tmp_path / name
    trace.write_text(text)
    scenario = tmp_path / "t.yaml"
    scenario.write_text(SCENARIO.format(trace=name))
    out = tmp_path / "out"
    assert main(["run", str(scenario), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("simbatch: error: ") and "\n" not in err and "Traceback" not in err
    assert expected.format(p=trace) in err
    assert "as a generic trace" not in err
    assert not out.exists()
