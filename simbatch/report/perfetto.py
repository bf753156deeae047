"""A run as a Chrome trace-event / Perfetto JSON timeline (``--trace-out``).

Open the file in https://ui.perfetto.dev or chrome://tracing. Layout (see
``docs/trace_export.md``): one process per replica holding its engine steps
(``X`` events on one thread), two counters (queue length, KV use) and its
requests' lifetimes as nested async events (``b``/``e``: the whole request,
then ``queued`` -> ``prefill`` -> ``decode``). Times are simulated time in
microseconds, rounded to 0.1 µs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simbatch.files.outpaths import check_out_file
from simbatch.report.outputs import atomic_write, json_safe

DEFAULT_MAX_STEPS = 200_000
DEFAULT_MAX_REQUESTS = 20_000
STEPS_TID = 1  # thread of a replica's engine steps (and its counters)
REQUESTS_TID = 2  # thread chrome://tracing hangs async request events on; Perfetto ignores it
PHASES = ("queued", "prefill", "decode")
TICKS_PER_S = 10_000_000  # 0.1 µs


def _ticks(seconds) -> np.ndarray:
    """Seconds as integer 0.1-µs ticks.

    Rounding each *boundary* (start, end) rather than each duration keeps
    back-to-back steps back to back: rounding is monotone, so a step that
    starts when the previous one ended still does after rounding.
    """
    return np.rint(np.asarray(seconds, dtype=np.float64) * TICKS_PER_S).astype(np.int64)


def _us(ticks: np.ndarray) -> list[float]:
    """Ticks as microseconds (Python floats with one decimal: compact in JSON)."""
    return (ticks / 10).tolist()


def _pid(replica: int) -> int:
    # pid 0 is the idle/swapper process in Perfetto's model; start at 1.
    return replica + 1


def _step_name(num_seqs: int, prefill_tokens: int, decode_tokens: int) -> str:
    """``"prefill 3 / decode 12"``: sequences per kind (a decode slot keeps one token)."""
    num_prefill = max(0, num_seqs - decode_tokens) if prefill_tokens else 0
    if num_prefill and decode_tokens:
        return f"prefill {num_prefill} / decode {decode_tokens}"
    return f"prefill {num_prefill}" if num_prefill else f"decode {decode_tokens}"


def _step_events(steps: dict[str, np.ndarray]) -> list[dict]:
    """One complete (``X``) event per engine step on its replica's step thread."""
    start = _ticks(steps["start_s"])
    end = _ticks(steps["start_s"] + steps["duration_s"])
    cols = [(start / 10).tolist(), ((end - start) / 10).tolist(), steps["replica"].tolist()]
    cols += [steps[c].tolist() for c in ("num_seqs", "prefill_tokens", "decode_tokens",
                                         "padded_tokens", "kv_used_blocks")]
    return [{"ph": "X", "cat": "step", "name": _step_name(n, p, d), "pid": _pid(r), "tid": STEPS_TID,
             "ts": ts, "dur": dur, "args": {"num_seqs": n, "prefill_tokens": p, "decode_tokens": d,
                                            "padded_tokens": pad, "kv_used_blocks": kv}}
            for ts, dur, r, n, p, d, pad, kv in zip(*cols)]


def _counter_events(steps: dict[str, np.ndarray], kv_capacity: list[int]) -> list[dict]:
    """Queue length and KV use % per replica, sampled at step starts, written only when they change."""
    events = []
    replica = steps["replica"]
    for r in np.unique(replica).tolist():
        rows = np.flatnonzero(replica == r)
        ts = _ticks(steps["start_s"][rows])
        kv_pct = np.round(100.0 * steps["kv_used_blocks"][rows] / max(kv_capacity[r], 1), 1)
        # Perfetto names a counter track "<name> <arg>": "queue num_waiting", "KV use %".
        for name, key, values in (("queue", "num_waiting", steps["num_waiting"][rows]), ("KV use", "%", kv_pct)):
            changed = np.ones(len(rows), dtype=bool)
            changed[1:] = values[1:] != values[:-1]
            events += [{"ph": "C", "name": name, "pid": _pid(r), "tid": STEPS_TID, "ts": t, "args": {key: v}}
                       for t, v in zip(_us(ts[changed]), values[changed].tolist())]
    return events


def _request_events(out, num_requests: int, end_tick: int) -> list[dict]:
    """Each request's lifetime with its phases nested inside, as async ``b``/``e`` pairs.

    A phase starts at a recorded timestamp (arrival, first scheduled, first
    token) and ends at the next one; a request that never finished keeps the
    phases it reached and its last one runs to the end of the run.
    """
    log, wl = out.result.log, out.result.workload
    n = num_requests
    stamps = np.stack([log.arrival_s[:n], log.first_scheduled_s[:n], log.first_token_s[:n], log.finish_s[:n]])
    known = ~np.isnan(stamps)
    ticks = np.where(known, _ticks(np.nan_to_num(stamps)), end_tick)
    cols = [(ticks / 10).T.tolist(), known.T.tolist(), log.replica[:n].tolist(), wl.prompt_tokens[:n].tolist(),
            wl.output_tokens[:n].tolist(), log.num_emitted[:n].tolist(), log.num_preemptions[:n].tolist()]
    end_us = end_tick / 10
    events = []
    for i, (times, have, rep, prompt, output, emitted, preempted) in enumerate(zip(*cols)):
        reached = have.index(False) if False in have else 4  # timestamps form a chain: stop at the first gap
        status = "finished" if reached == 4 else ("rejected" if rep < 0 else "unfinished")
        bounds = times[:reached] if reached == 4 else times[:reached] + [end_us]
        # Rejected requests never reach a replica: they go to a process of their own.
        pid = _pid(rep if rep >= 0 else log.num_replicas)
        base = {"cat": "request", "id": i, "pid": pid, "tid": REQUESTS_TID}
        events.append({**base, "ph": "b", "name": "request", "ts": bounds[0], "args": {
            "request_id": i, "status": status, "prompt_tokens": prompt, "output_tokens": output,
            "num_output_tokens": emitted, "preemptions": preempted}})
        for phase, t0, t1 in zip(PHASES, bounds, bounds[1:]):
            events.append({**base, "ph": "b", "name": phase, "ts": t0})
            events.append({**base, "ph": "e", "name": phase, "ts": t1})
        events.append({**base, "ph": "e", "name": "request", "ts": bounds[-1]})
    return events


def _name_events(out, has_rejected: bool) -> list[dict]:
    """``M`` events naming each replica's process and threads, in replica order."""
    s = out.summary
    tp = s["hardware"]["tensor_parallel"]
    gpu = f"{tp}x {s['hardware']['name']}" if tp > 1 else s["hardware"]["name"]
    names = [(_pid(r), f"replica {r} ({s['model']['name']} on {gpu})") for r in range(out.result.log.num_replicas)]
    if has_rejected:
        names.append((_pid(out.result.log.num_replicas), "rejected requests"))
    events = []
    for pid, name in names:
        events += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
                   {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
                   {"ph": "M", "name": "thread_name", "pid": pid, "tid": STEPS_TID, "args": {"name": "engine steps"}},
                   {"ph": "M", "name": "thread_name", "pid": pid, "tid": REQUESTS_TID, "args": {"name": "requests"}}]
    return events


def _run_end_s(log, step_ends: np.ndarray) -> float:
    """When the run ended: its last step, arrival or finish (simulated seconds)."""
    candidates = [step_ends, log.arrival_s, log.finish_s]
    values = np.concatenate([np.asarray(c, dtype=np.float64).ravel() for c in candidates])
    values = values[~np.isnan(values)]
    return float(values.max()) if values.size else 0.0


def truncation_notes(out, max_steps: int = DEFAULT_MAX_STEPS,
                     max_requests: int = DEFAULT_MAX_REQUESTS) -> list[str]:
    """What a trace of ``out`` under these limits leaves out, one line each (empty: nothing)."""
    log = out.result.log
    totals = {"steps": len(log.steps["start_s"]), "requests": log.num_requests}
    limits = {"steps": max_steps, "requests": max_requests}
    return [f"trace holds the first {limits[k]:,} of {totals[k]:,} {k} (limit max_{k})"
            for k in totals if totals[k] > limits[k]]


def trace_events(out, max_steps: int = DEFAULT_MAX_STEPS, max_requests: int = DEFAULT_MAX_REQUESTS) -> dict:
    """The run ``out`` (a :class:`~simbatch.api.RunOutput`) as a trace-event JSON object.

    Keeps the first ``max_steps`` engine steps (in recording order, so a prefix
    of every replica's steps) and the first ``max_requests`` requests (in
    arrival order); ``metadata["truncated"]`` says what was left out.
    """
    log = out.result.log
    table = {c: np.asarray(v) for c, v in log.step_table().items()}
    num_steps, num_requests = len(table["start_s"]), log.num_requests
    keep_steps, keep_requests = min(num_steps, max_steps), min(num_requests, max_requests)
    steps = {c: v[:keep_steps] for c, v in table.items()}
    end_s = _run_end_s(log, table["start_s"] + table["duration_s"] if num_steps else np.zeros(0))
    has_rejected = bool((log.replica[:keep_requests] < 0).any())
    events = _name_events(out, has_rejected) + _step_events(steps)
    events += _counter_events(steps, log.kv_capacity_blocks)
    events += _request_events(out, keep_requests, int(_ticks(end_s)))
    s = out.summary
    metadata = {
        "generator": f"simbatch {s.get('simbatch_version', '')}".strip(), "scenario": s.get("scenario"),
        "policy": s["policy"]["kind"], "model": s["model"]["name"], "hardware": s["hardware"]["name"],
        "replicas": log.num_replicas, "tensor_parallel": s["hardware"]["tensor_parallel"],
        "kv_capacity_blocks": list(log.kv_capacity_blocks), "time": "simulated, microseconds from t=0",
        "run_end_s": end_s, "num_steps": num_steps, "num_steps_written": keep_steps,
        "num_requests": num_requests, "num_requests_written": keep_requests,
        "truncated": truncation_notes(out, max_steps, max_requests),
    }
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": json_safe(metadata)}


def check_trace_path(path) -> Path:
    """``path`` as a :class:`Path` if a trace can be written there, else a one-line user error."""
    return check_out_file(path, "trace.json")


def write_trace(out, path, max_steps: int = DEFAULT_MAX_STEPS,
                max_requests: int = DEFAULT_MAX_REQUESTS) -> Path:
    """Write :func:`trace_events` of ``out`` to ``path`` (compact JSON, all or nothing); return the path.

    The file is written to a temporary sibling and renamed into place, so a
    failed write never leaves a half trace behind.
    """
    path = check_trace_path(path)
    text = json.dumps(trace_events(out, max_steps, max_requests), separators=(",", ":"), allow_nan=False)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return path
