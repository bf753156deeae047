"""The Perfetto / Chrome trace export: it loads as JSON and its events nest correctly."""

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

from simbatch.api import run
from simbatch.cli import main
from simbatch.report.perfetto import PHASES, trace_events, write_trace
from simbatch.scenario.spec import load_scenario

ROOT = Path(__file__).resolve().parents[1]
CLASSROOM = ROOT / "scenarios" / "classroom.yaml"
CHAT = ROOT / "scenarios" / "chat.yaml"
EPS_US = 1e-6  # float slack on sums of 0.1-µs-rounded times


def check_steps(events):
    """Every X event has ts, dur >= 0, and the steps of one track never overlap."""
    tracks = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            assert e["ts"] >= 0 and e["dur"] >= 0, e
            tracks[e["pid"], e["tid"]].append(e)
    for track in tracks.values():
        track.sort(key=lambda e: e["ts"])
        for a, b in pairwise(track):
            assert b["ts"] >= a["ts"] + a["dur"] - EPS_US, (a, b)
    return tracks


def check_async(events, end_us):
    """Every b has its e (same id, cat, pid); phases nest in the request, in order, back to back.

    Events are replayed in timestamp order (a stable sort, as viewers do), so
    the check holds for how a viewer reads them, not only for the file order.
    """
    stacks, pid_of, phases = defaultdict(list), {}, defaultdict(list)
    for e in sorted((e for e in events if e["ph"] in "be"), key=lambda e: e["ts"]):
        key = (e["cat"], e["id"])
        assert pid_of.setdefault(key, e["pid"]) == e["pid"], e  # one request, one process
        stack = stacks[key]
        if e["ph"] == "b":
            assert not stack or stack[-1]["ts"] <= e["ts"], e
            assert len(stack) == (0 if e["name"] == "request" else 1), e  # request > phase, no deeper
            stack.append(e)
            continue
        begin = stack.pop()
        assert begin["name"] == e["name"] and begin["ts"] <= e["ts"] <= end_us + 0.05 + EPS_US, (begin, e)
        if e["name"] != "request":
            phases[key].append((e["name"], begin["ts"], e["ts"]))
        else:
            spans = phases[key]
            assert [p[0] for p in spans] == list(PHASES[: len(spans)]) and spans, (key, spans)
            assert spans[0][1] == begin["ts"] and spans[-1][2] == e["ts"], (key, spans)
            assert all(a[2] == b[1] for a, b in pairwise(spans)), (key, spans)
    assert not any(stacks.values()), "unclosed async events"
    return pid_of


def check_trace(trace: dict) -> dict:
    """Structural checks shared by every test; returns the process names by pid."""
    assert set(trace) == {"traceEvents", "displayTimeUnit", "metadata"}
    events = trace["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    tracks = check_steps(events)
    for pid, tid in tracks:
        assert pid in names and threads[pid, tid] == "engine steps"
    counters = {(e["pid"], e["name"]) for e in events if e["ph"] == "C"}
    for pid, _ in tracks:
        assert (pid, "queue") in counters and (pid, "KV use") in counters
    end_us = trace["metadata"]["run_end_s"] * 1e6
    assert set(check_async(events, end_us).values()) <= set(names)
    return names


def requests_b(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "b" and e["name"] == "request"]


def test_classroom_static_trace_round_trips_and_nests(tmp_path):
    out = run(load_scenario(CLASSROOM))
    path = write_trace(out, tmp_path / "t.json")
    text = path.read_text()
    assert "\n" not in text and ": " not in text  # compact
    trace = json.loads(text)
    names = check_trace(trace)
    assert names == {1: "replica 0 (llama-2-7b on a100-80gb)"}
    steps = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(steps) == len(out.steps)
    assert steps[0]["name"] == "prefill 2" and steps[0]["args"]["padded_tokens"] > 0
    assert steps[1]["name"] == "decode 2"
    assert [e["args"]["status"] for e in requests_b(trace)] == ["finished"] * 4
    assert trace["metadata"]["policy"] == "static" and trace["metadata"]["truncated"] == []


def test_chat_on_two_replicas_puts_each_request_on_its_replica():
    sc = load_scenario(CHAT, ["workload.synthetic.num_requests=200", "cluster.replicas=2"])
    out = run(sc.with_policy("chunked_prefill"))
    trace = trace_events(out)
    names = check_trace(trace)
    assert sorted(names) == [1, 2] and names[2].startswith("replica 1 (")
    replica = dict(zip(out.requests["id"], out.requests["replica"]))
    for e in requests_b(trace):
        assert e["pid"] == replica[e["id"]] + 1
    mixed = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X" and " / " in e["name"]]
    assert mixed and mixed[0].startswith("prefill ")  # chunked prefill mixes prefill and decode
    json.loads(json.dumps(trace, allow_nan=False))


def test_rejected_requests_queue_to_the_end_of_the_run():
    out = run(load_scenario(CLASSROOM, ["policy.kind=continuous", "policy.max_num_batched_tokens=200"]))
    trace = trace_events(out)
    names = check_trace(trace)
    assert names[2] == "rejected requests"
    end_us = trace["metadata"]["run_end_s"] * 1e6
    by_id = {e["id"]: e for e in requests_b(trace)}
    rejected = [i for i, e in by_id.items() if e["args"]["status"] == "rejected"]
    assert rejected and all(by_id[i]["pid"] == 2 for i in rejected)
    for i in rejected:
        mine = [e for e in trace["traceEvents"] if e.get("id") == i and e["ph"] in "be"]
        assert [e["name"] for e in mine] == ["request", "queued", "queued", "request"]
        assert mine[-1]["ts"] == pytest.approx(end_us, abs=0.1)


def test_unfinished_request_keeps_its_phases_up_to_the_end_of_the_run():
    out = run(load_scenario(CLASSROOM))
    log = out.result.log
    log.first_token_s[3] = log.finish_s[3] = float("nan")  # as if the run had stopped mid-prefill
    trace = trace_events(out)
    check_trace(trace)
    mine = [e for e in trace["traceEvents"] if e.get("id") == 3 and e["ph"] in "be"]
    assert [e["name"] for e in mine] == ["request", "queued", "queued", "prefill", "prefill", "request"]
    assert mine[0]["args"]["status"] == "unfinished"
    assert mine[-1]["ts"] == pytest.approx(trace["metadata"]["run_end_s"] * 1e6, abs=0.1)


def test_limits_keep_the_first_steps_and_requests_with_a_note():
    out = run(load_scenario(CHAT, ["workload.synthetic.num_requests=100"]))
    trace = trace_events(out, max_steps=50, max_requests=7)
    check_trace(trace)
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == 50
    assert [e["id"] for e in requests_b(trace)] == list(range(7))
    meta = trace["metadata"]
    assert meta["num_steps"] == len(out.steps) > 50 and meta["num_steps_written"] == 50
    assert meta["num_requests"] == 100 and meta["num_requests_written"] == 7
    assert len(meta["truncated"]) == 2 and "first 50 of" in meta["truncated"][0]


def test_cli_run_writes_the_trace(tmp_path, capsys):
    f = tmp_path / "trace.json"
    assert main(["run", str(CLASSROOM), "--trace-out", str(f)]) == 0
    check_trace(json.loads(f.read_text()))
    assert str(f) in capsys.readouterr().out


def test_cli_bad_trace_path_is_one_line_exit_2_and_no_file(tmp_path, capsys):
    f = tmp_path / "nowhere" / "trace.json"
    out_dir = tmp_path / "out"
    assert main(["run", str(CLASSROOM), "--trace-out", str(f), "--out", str(out_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("simbatch: error: ") and "\n" not in err and "does not exist" in err
    assert not f.parent.exists() and not out_dir.exists()
    assert main(["run", str(CLASSROOM), "--trace-out", str(tmp_path)]) == 2  # a folder, not a file
    assert list(tmp_path.iterdir()) == []


def test_cli_compare_traces_writes_one_per_policy(tmp_path, capsys):
    assert main(["compare", str(CLASSROOM), "--policies", "static,continuous", "--jobs", "1",
                 "--out", str(tmp_path), "--traces"]) == 0
    for kind in ("static", "continuous"):
        trace = json.loads((tmp_path / kind / "trace.json").read_text())
        check_trace(trace)
        assert trace["metadata"]["policy"] == kind
    capsys.readouterr()
    assert main(["compare", str(CLASSROOM), "--traces"]) == 2
    assert "--traces" in capsys.readouterr().err
