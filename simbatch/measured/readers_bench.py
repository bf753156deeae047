"""Readers of two benchmark harnesses' logs: LMCache's LMBench CSV and LLMServingSim's vLLM bench.

- ``lmbench``: the per-request CSV of the LMCache LMBench ShareGPT client
  (github.com/LMCache/LMBench, ``3-workloads/sharegpt/workload_execution/
  sharegpt-qa.py``): ``prompt_tokens,generation_tokens,ttft,generation_time,
  launch_time,finish_time``, every time taken by the client with ``time.time()``;
- ``llmservingsim``: the ``requests.jsonl`` of LLMServingSim's vLLM bench
  (github.com/casys-kaist/LLMServingSim, ``bench/core/runner.py`` and
  ``recorder.py``): vLLM's own ``RequestStateStats`` per request, beside which the
  bench writes ``meta.json`` (the engine's resolved configuration and KV cache,
  :func:`read_engine_meta`) and ``timeseries.csv`` (per-second running / waiting /
  KV use, :func:`read_timeseries`).

Validation and errors are :mod:`simbatch.measured.logcheck`'s (and the trace
loader's): ``SimbatchError("<path>:<line>", cause)`` for a bad row, the CSV header
being line 1. Times come back re-based so the first request was sent at 0.0, rows
sorted by arrival (stable). docs/measured.md describes both formats.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from simbatch.core.params import MAX_INTEGER  # 2**53: every integer a float holds
from simbatch.errors import SimbatchError
from simbatch.measured.logcheck import (_assemble, _count, _existing, _first_line, _number, _parse_json,
                                        _raise, _seconds, _show, _text)
from simbatch.measured.run import MeasuredRun
from simbatch.workload.readers import _MISSING, _ints, _load, _Table

LMBENCH_COLUMNS = ("prompt_tokens", "generation_tokens", "ttft", "generation_time", "launch_time", "finish_time")
ENGINE_TIMES = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")  # vLLM's monotonic clock
LLMSERVINGSIM_KEYS = ("input_toks", "output_toks", "arrival_time") + ENGINE_TIMES
TIMESERIES_COLUMNS = ("t", "prompt_throughput", "gen_throughput", "running", "waiting", "kv_cache_pct")
TIMESERIES_COUNTS = ("running", "waiting", "preempted")  # whole numbers; the rest are rates and percents
# LMBench stamps finish_time with a second time.time() call after generation_time's: it may trail
# launch_time + ttft + generation_time by microseconds, never precede it by more than rounding.
FINISH_SLACK_S = 1e-3


# --- detection ---------------------------------------------------------------------

def bench_format(p: Path) -> str | None:
    """``"lmbench"`` for a ``.csv`` whose header is exactly LMBench's columns, ``"llmservingsim"``
    for a ``.jsonl`` whose first object has ``queued_ts`` and ``first_token_ts``, else None."""
    suffix = p.suffix.lower()
    if suffix == ".csv":
        names = [c.strip() for c in _first_line(p, _text(p))[1].split(",")]
        return "lmbench" if sorted(names) == sorted(LMBENCH_COLUMNS) else None
    if suffix == ".jsonl":
        try:
            first = json.loads(_first_line(p, _text(p))[1])
        except (json.JSONDecodeError, RecursionError):
            return None  # the generic reader names the broken line
        return "llmservingsim" if isinstance(first, dict) and {"queued_ts", "first_token_ts"} <= set(first) else None
    return None


# --- LMBench CSV -------------------------------------------------------------------

def read_lmbench(path: str | Path) -> MeasuredRun:
    """Read an LMBench ShareGPT client CSV (one row per completed request).

    Arrival = ``launch_time`` (the client's epoch clock at send); first token =
    arrival + ``ttft``; finish = first token + ``generation_time``, so TPOT =
    generation_time / (generation_tokens - 1), as LMBench reports it. Times are
    re-based before the durations are added, so TTFT and TPOT are the file's own to
    the last bit. ``finish_time`` is checked against that finish (never earlier by
    more than :data:`FINISH_SLACK_S`); ``clock_start_s`` is the first send's epoch time.
    """
    p = _existing(path)
    t = _rows(p)
    prompt = _ints(t, "prompt_tokens", minimum=1)
    output = _ints(t, "generation_tokens", minimum=1)
    ttft, gen = _seconds(t, "ttft", 1.0, 0.0), _seconds(t, "generation_time", 1.0, 0.0)
    launch, done = _seconds(t, "launch_time", 1.0, 0.0), _seconds(t, "finish_time", 1.0, 0.0)
    t0 = float(launch.min())
    arrival = launch - t0
    first = arrival + ttft
    finish = first + gen
    late = done - t0 < finish - FINISH_SLACK_S
    if late.any():
        i = int(np.argmax(late))
        _raise(f"{p}:{t.lines[i]}", f"finish_time {float(done[i])!r} is before launch_time + ttft + "
                                    f"generation_time {float(t0 + finish[i])!r}")
    run = _assemble(str(p), "", arrival, prompt, output, first, finish)
    run.clock_start_s = t0
    return run


def _rows(p: Path) -> _Table:
    """The CSV / JSONL rows of ``p`` (line numbers kept for errors); an error if there are none."""
    t = _load(p, _text(p))
    if len(t.lines) == 0:
        raise SimbatchError(str(p), "file is empty: no requests")
    return t


# --- LLMServingSim requests.jsonl --------------------------------------------------

def read_llmservingsim(path: str | Path) -> MeasuredRun:
    """Read LLMServingSim's vLLM bench ``requests.jsonl``.

    ``arrival_time`` is the front end's epoch clock (``time.time()``); the four
    ``*_ts`` are the engine core's monotonic clock, so latencies are taken within
    that one clock: arrival = ``queued_ts`` (the engine queued the request), first
    token = ``first_token_ts``, finish = ``last_token_ts``; TTFT = first_token_ts -
    queued_ts. What came before ``queued_ts`` (input processing, the hand-over to
    the engine core) is not in the log's latencies; a note gives how much it varied.
    ``arrival_time`` is checked but only used for that note. A record with no time
    at all (the bench got no metrics back) is left out, with a note.
    """
    p = _existing(path)
    t, dropped = _stamped(_rows(p))
    prompt = _ints(t, "input_toks", minimum=1)
    output = _ints(t, "output_toks", minimum=1)
    sent = _json_times(t, "arrival_time", 0.0)
    ts = {name: _json_times(t, name, None) for name in ENGINE_TIMES}
    _engine_order(t, ts)
    notes = [f"{p}: {dropped} records have no timestamps (vLLM returned no metrics): left out"] if dropped else []
    lag = ts["queued_ts"] - sent  # the clocks' offset plus the front end's time
    notes.append(f"{p}: latencies are on vLLM's engine clock from queued_ts; the front end before it is "
                 f"not in the log (arrival_time to queued_ts varied by {(lag.max() - lag.min()) * 1e3:.1f} ms "
                 "across requests)")
    return _assemble(str(p), "vllm", ts["queued_ts"], prompt, output, ts["first_token_ts"],
                     ts["last_token_ts"], notes=notes)


def _stamped(t: _Table) -> tuple[_Table, int]:
    """The rows that carry any time (``LLMSERVINGSIM_KEYS``' times), and how many carry none."""
    names = ("arrival_time",) + ENGINE_TIMES
    for name in names:
        t.cells(name)  # a key no record has: the missing-column error
    blank = np.array([all(t.columns[n][i] in (None, _MISSING) for n in names) for i in range(len(t.lines))])
    if not blank.any():
        return t, 0
    if blank.all():
        raise SimbatchError(t.path, "no record has timestamps: no request to read")
    keep = np.flatnonzero(~blank)
    return _Table(t.path, {k: [v[i] for i in keep] for k, v in t.columns.items()}, t.lines[keep]), int(blank.sum())


def _json_times(t: _Table, name: str, minimum: float | None) -> np.ndarray:
    """A JSONL time field in seconds: JSON numbers only (not strings, booleans or null), finite."""
    for i, v in enumerate(t.cells(name)):
        if type(v) not in (int, float):
            t.fail(i, name, "a number")
    return _seconds(t, name, 1.0, minimum)


def _engine_order(t: _Table, ts: dict[str, np.ndarray]) -> None:
    """vLLM's stamps in their order: queued <= scheduled <= first token <= last token."""
    pairs = (("first_token_ts", "queued_ts"), ("scheduled_ts", "queued_ts"),
             ("first_token_ts", "scheduled_ts"), ("last_token_ts", "first_token_ts"))
    for later, earlier in pairs:
        bad = ts[later] < ts[earlier]
        if bad.any():
            i = int(np.argmax(bad))
            _raise(f"{t.path}:{t.lines[i]}", f"{later} {float(ts[later][i])!r} is before {earlier} "
                                             f"{float(ts[earlier][i])!r}")


# --- LLMServingSim timeseries.csv --------------------------------------------------

def read_timeseries(path: str | Path) -> pd.DataFrame:
    """Read the bench's per-tick ``timeseries.csv`` (vLLM's stat logger, one row a tick).

    Needs :data:`TIMESERIES_COLUMNS`: ``t`` (seconds since the bench's stat logger
    started, increasing), ``prompt_throughput`` and ``gen_throughput`` (tokens/s),
    ``running`` and ``waiting`` (requests), ``kv_cache_pct`` (0-100). Further columns
    (newer benches add ``preempted`` and the prompt throughput's compute / cached split)
    are kept, checked as numbers >= 0 (counts as whole numbers). Returns one column per
    field in file order, ``attrs["source"]`` the path.
    """
    p = _existing(path)
    t = _rows(p)
    for name in TIMESERIES_COLUMNS:
        t.cells(name)  # the missing-column error, naming the header
    out = {name: (_ints(t, name, minimum=0) if name in TIMESERIES_COUNTS else _seconds(t, name, 1.0, 0.0))
           for name in t.columns}
    _timeseries_ranges(t, out)
    df = pd.DataFrame(out)
    df.attrs["source"] = str(p)
    return df


def _timeseries_ranges(t: _Table, cols: dict[str, np.ndarray]) -> None:
    """``t`` strictly increasing and ``kv_cache_pct`` at most 100."""
    back = np.flatnonzero(np.diff(cols["t"]) <= 0)
    if len(back):
        t.fail(int(back[0]) + 1, "t", f"a time after the previous row's {float(cols['t'][back[0]])!r}")
    over = np.flatnonzero(cols["kv_cache_pct"] > 100.0)
    if len(over):
        t.fail(int(over[0]), "kv_cache_pct", "a percentage from 0 to 100")


# --- LLMServingSim meta.json -------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EngineMeta:
    """What one vLLM bench run's ``meta.json`` says about the engine (None: not recorded)."""

    source: str
    vllm_version: str | None
    model: str | None
    num_gpu_blocks: int | None  # what vLLM allocated after its profiling pass
    block_size: int | None
    gpu_memory_utilization: float | None
    enable_prefix_caching: bool | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    max_model_len: int | None
    tensor_parallel_size: int | None
    device_name: str | None
    device_total_memory_bytes: int | None  # torch.cuda.get_device_properties(0).total_memory

    @property
    def kv_tokens(self) -> int | None:
        """The engine's KV cache in tokens (blocks x block size), None where either is unknown."""
        if self.num_gpu_blocks is None or self.block_size is None:
            return None
        return self.num_gpu_blocks * self.block_size


# Each field's places in meta.json, first found wins: the bench's own summaries, then vLLM's
# resolved configuration (recorder.py: kv_cache / hardware may be absent or {}).
_META_FIELDS = {
    "num_gpu_blocks": ("kv_cache.num_gpu_blocks", "resolved_config.cache_config.num_gpu_blocks"),
    "block_size": ("kv_cache.block_size", "resolved_config.cache_config.block_size"),
    "gpu_memory_utilization": ("engine_kwargs.gpu_memory_utilization", "kv_cache.gpu_memory_utilization",
                               "resolved_config.cache_config.gpu_memory_utilization"),
    "enable_prefix_caching": ("engine_kwargs.enable_prefix_caching", "kv_cache.enable_prefix_caching",
                              "resolved_config.cache_config.enable_prefix_caching"),
    "max_num_seqs": ("engine_kwargs.max_num_seqs", "resolved_config.scheduler_config.max_num_seqs"),
    "max_num_batched_tokens": ("engine_kwargs.max_num_batched_tokens",
                               "resolved_config.scheduler_config.max_num_batched_tokens"),
    "max_model_len": ("engine_kwargs.max_model_len", "resolved_config.model_config.max_model_len"),
    "tensor_parallel_size": ("engine_kwargs.tensor_parallel_size",
                             "resolved_config.parallel_config.tensor_parallel_size"),
    "device_total_memory_bytes": ("hardware.device_total_memory_bytes",),
    "vllm_version": ("vllm_version",),
    "model": ("model", "engine_kwargs.model"),
    "device_name": ("hardware.device_name",),
}


def read_engine_meta(path: str | Path) -> EngineMeta:
    """Read a vLLM bench ``meta.json``: the engine's KV cache and the settings that size it.

    ``num_gpu_blocks`` (vLLM's ``cache_config.num_gpu_blocks``) is the number a
    scenario's KV budget is compared with. Each field is looked up where
    :data:`_META_FIELDS` says; a missing or null one is None, a present one is checked
    (counts whole numbers >= 1, utilisation in (0, 1], prefix caching a boolean, names
    strings): ``SimbatchError("<path>", "<key>: expected ...")``.
    """
    p = _existing(path)
    doc = _parse_json(str(p), _text(p))
    if not isinstance(doc, dict):
        raise SimbatchError(str(p), f"expected a JSON object (a vLLM bench meta.json), got {type(doc).__name__}")
    found = {field: _lookup(doc, keys) for field, keys in _META_FIELDS.items()}
    fail = lambda cause: _raise(str(p), cause)  # noqa: E731 - every check names the file
    return EngineMeta(source=str(p), **{field: _meta_value(fail, field, *hit) for field, hit in found.items()})


def _lookup(doc: dict, keys: tuple[str, ...]) -> tuple[str, Any]:
    """The first of the dotted ``keys`` that holds a non-null value, and that value (else the first key, None)."""
    for key in keys:
        node: Any = doc
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return key, node
    return keys[0], None


def _meta_value(fail: Callable[[str], None], field: str, key: str, value: Any) -> Any:
    """One meta.json value checked for its field's kind (None passes)."""
    if value is None:
        return None
    if field == "gpu_memory_utilization":
        value = _number(fail, key, value, 0.0)
        if not 0 < value <= 1:
            fail(f"{key}: expected a fraction in (0, 1], got {_show(value)}")
        return float(value)
    if field == "enable_prefix_caching":
        if not isinstance(value, bool):
            fail(f"{key}: expected true or false, got {_show(value)}")
        return value
    if field in ("vllm_version", "model", "device_name"):
        if not isinstance(value, str):
            fail(f"{key}: expected a string, got {_show(value)}")
        return value
    return _count(fail, key, value, 1, MAX_INTEGER)  # blocks, sizes and bytes, not tokens


# --- the files beside a requests.jsonl -----------------------------------------------

def bench_companions(path: str | Path) -> dict[str, Path]:
    """The ``meta.json`` and ``timeseries.csv`` the bench wrote beside ``requests.jsonl`` at
    ``path``, keyed ``"meta"`` / ``"timeseries"``, those that exist."""
    folder = Path(path).parent
    found = {"meta": folder / "meta.json", "timeseries": folder / "timeseries.csv"}
    return {k: v for k, v in found.items() if v.is_file()}


BENCH_READERS: dict[str, Callable[[str | Path], MeasuredRun]] = {
    "lmbench": read_lmbench, "llmservingsim": read_llmservingsim}
