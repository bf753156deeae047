"""Readers of measured serving-run logs: each turns one log into a :class:`MeasuredRun`.

Six formats (docs/measured.md describes each, with what it does when a log
lacks arrivals or lengths):

- ``distserve``: DistServe's ``*.exp`` files (one Python-literal line of
  per-request dicts, then a ``{ ... }`` summary block that is ignored);
- ``vllm``: the JSON written by vLLM's ``benchmarks/benchmark_serving.py
  --save-result`` (``vllm bench serve`` in newer releases);
- ``genai-perf``: genai-perf's / Perf Analyzer's ``profile_export.json``;
- ``generic``: any CSV / JSONL through a column mapping (and the Parquet
  tables ``simbatch run`` writes, :func:`read_generic_run`);
- ``lmbench`` and ``llmservingsim``: the LMCache LMBench client's CSV and
  LLMServingSim's vLLM bench ``requests.jsonl`` (:mod:`simbatch.measured.readers_bench`).

Every reader validates what it reads and raises
``SimbatchError(where, cause)`` for a malformed log, ``where`` being
``"<path>"``, ``"<path>:<line>"`` (CSV / JSONL lines) or ``"<path>: entry N"``
(1-based position in a list format, in file order). Times come back in seconds
on one clock re-based so the first request was sent at 0.0, rows sorted by
arrival (stable).
"""

from __future__ import annotations

import ast
import json
import re
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Callable

import numpy as np

from simbatch.errors import SimbatchError
from simbatch.measured.logcheck import (Fail, _assemble, _check_order, _count, _entry_fail, _existing,
                                        _first_line, _given_times, _is_inf, _json_doc, _len, _number,
                                        _numbers, _parse_json, _raise, _seconds, _show, _text)
from simbatch.measured.readers_bench import BENCH_READERS, bench_format
from simbatch.measured.run import MeasuredRun
from simbatch.workload.readers import TIME_UNITS, _ints, _load, _Table, check_column_mapping

FORMATS = ("distserve", "vllm", "genai-perf", "generic", "lmbench", "llmservingsim")
DISTSERVE_KEYS = ("prompt_len", "output_len", "issue_time", "first_token_time", "complete_time",
                  "ttft_ms", "tpot_ms", "latency_ms")
VLLM_LISTS = ("input_lens", "output_lens", "ttfts", "itls")
GENERIC_RUN_KEYS = ("arrival", "prompt", "output", "first_token", "finish", "ttft", "e2el", "time_unit")
_OPTIONS = {"distserve": (), "vllm": ("arrivals",), "genai-perf": ("experiment", "prompt_tokens"),
            "generic": ("system",), "lmbench": (), "llmservingsim": ()}


# --- the one entry point -------------------------------------------------------

def read_measured(path: str | Path, format: str | None = None, columns: dict | None = None,
                  **options: Any) -> MeasuredRun:
    """Read one measured run in ``format`` (inferred from the file when None).

    ``columns`` is the mapping of the ``generic`` format (giving it implies
    that format). ``options`` go to the format's reader: ``arrivals`` (vllm),
    ``experiment`` and ``prompt_tokens`` (genai-perf), ``system`` (generic).
    """
    if format is None:
        format, doc = ("generic", None) if columns is not None else _detect(_existing(path))
    else:
        doc = None
    if format not in FORMATS:
        raise SimbatchError("format", f"unknown format {format!r}; allowed: {', '.join(FORMATS)}")
    if columns is not None and format != "generic":
        raise SimbatchError("columns", f"only allowed with format 'generic' (this is {format!r})")
    for key in options:
        if key not in _OPTIONS[format]:
            allowed = ", ".join(_OPTIONS[format]) or "none"
            raise SimbatchError("options", f"unknown option {key!r} for format {format!r}; allowed: {allowed}")
    if format == "distserve":
        return read_distserve(path)
    if format in BENCH_READERS:
        return BENCH_READERS[format](path)
    if format == "generic":
        if columns is None and _has_own_columns(path):
            columns = SIMBATCH_COLUMNS  # a requests.csv (or .parquet) that simbatch itself wrote
        if columns is None:
            raise SimbatchError("columns", f"required to read {path} as a generic log (the mapping of its "
                                           "columns: docs/measured.md, Generic CSV / JSONL)")
        return read_generic_run(path, columns, **options)
    doc = _json_doc(_existing(path)) if doc is None else doc
    if format == "vllm":
        return _vllm_run(str(path), doc, options.get("arrivals"))
    return _genai_run(str(path), doc, options.get("experiment"), options.get("prompt_tokens"))


# The columns of the requests.csv (or requests.parquet) that `simbatch run` writes: such a file
# reads without a mapping.
SIMBATCH_COLUMNS = {"arrival": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens",
                    "first_token": "first_token_s", "finish": "finish_s"}


def _has_own_columns(path: str | Path) -> bool:
    """Whether a CSV's header (a Parquet file's schema) holds every column of :data:`SIMBATCH_COLUMNS`."""
    p = _existing(path)
    if p.suffix.lower() == ".parquet":
        from simbatch.report.parquet_table import parquet_columns

        return set(SIMBATCH_COLUMNS.values()) <= set(parquet_columns(p))
    if p.suffix.lower() != ".csv":
        return False
    header = _text(p).split("\n", 1)[0]
    return set(SIMBATCH_COLUMNS.values()) <= {c.strip() for c in header.split(",")}


def detect_measured_format(path: str | Path) -> str:
    """Guess a log's format: ``.exp`` or a leading Python list of dicts is DistServe;
    a ``.csv`` with exactly LMBench's columns is lmbench, a ``.jsonl`` whose first
    object has ``queued_ts`` / ``first_token_ts`` is llmservingsim, any other
    ``.csv`` / ``.jsonl`` is generic; a JSON object with ``experiments`` is
    genai-perf, one with ``ttfts`` / ``input_lens`` is vLLM."""
    return _detect(_existing(path))[0]


def _detect(p: Path) -> tuple[str, Any]:
    """The format and, for a JSON log, its parsed document (so it is parsed once)."""
    suffix = p.suffix.lower()
    if suffix == ".exp":
        return "distserve", None
    if suffix in (".csv", ".jsonl", ".tsv", ".parquet"):
        return bench_format(p) or "generic", None
    text = _text(p)
    head = text.lstrip()[:4096]
    if head.startswith("[") and "prompt_len" in head:
        return "distserve", None
    if not head.startswith("{"):
        raise SimbatchError(str(p), "cannot tell the log's format; pass format= (one of "
                            f"{', '.join(FORMATS)}; --format on the command line)")
    doc = _parse_json(str(p), text)
    if isinstance(doc, dict) and "experiments" in doc:
        return "genai-perf", doc
    if isinstance(doc, dict) and ("ttfts" in doc or "input_lens" in doc):
        return "vllm", doc
    raise SimbatchError(str(p), "a JSON object with neither 'experiments' (genai-perf) nor 'ttfts' "
                        "(vLLM --save-result): pass format= or columns= (--format or --columns on the command line)")


# --- DistServe .exp -----------------------------------------------------------

def read_distserve(path: str | Path) -> MeasuredRun:
    """Read a DistServe ``*.exp`` log (github.com/LLMServe/DistServe, commit
    20a1633ed6f2be5f456d84d1c283865c3e5112d5, ``simdistserve/benchmarks/alignment/
    data-ground-truth/``; see ../shared/measured/README.md).

    The first non-blank line is a Python literal list of dicts with
    :data:`DISTSERVE_KEYS` (seconds for ``*_time``, one clock per file), in
    completion order; it is parsed with ``ast.literal_eval`` (never ``eval``).
    The lines after it (a ``{ ... }`` summary) are ignored. ``system`` is the
    file name's prefix (``vllm-100-1.exp`` -> ``vllm``).
    """
    p = _existing(path)
    lineno, line = _first_line(p, _text(p))
    where = f"{p}:{lineno}"
    fail = _entry_fail(str(p))
    cols = _distserve_columns(_distserve_rows(where, line), fail)
    if not len(cols["issue_time"]):
        raise SimbatchError(where, "empty list: no requests")
    issue, first, done = cols["issue_time"], cols["first_token_time"], cols["complete_time"]
    _check_order(fail, issue, first, done, None, ("issue_time", "first_token_time", "complete_time"))
    return _assemble(str(p), p.name.split("-")[0].split(".")[0], issue,
                     cols["prompt_len"].astype(np.int64), cols["output_len"].astype(np.int64),
                     first, done)


# One request of a DistServe log's list: a dict holding no dict, then the comma before the
# next one or the list's closing bracket.
_FLAT_DICT = re.compile(r"\s*(\{[^{}]*\})\s*(?:,|(\]))")
# Beyond this a line that is not a list of flat dicts is not handed whole to ast.literal_eval,
# whose syntax tree takes some 60 times the text's size (a 1,000,000-request log: 11.7 GB).
LITERAL_BYTES = 16 * 2**20


def _distserve_rows(where: str, line: str) -> Iterator:
    """The per-request dicts of a DistServe log's literal line, one at a time, in bounded memory:
    each flat dict ``{...}`` of the list is read alone (as JSON once its quotes are swapped,
    which is exact for a dict of plain numbers, else by ``ast.literal_eval``). A line that is not
    such a list is read whole by :func:`_literal_rows`, for its messages."""
    start = len(line) - len(line.lstrip())
    if not line.startswith("[", start):
        yield from _literal_rows(where, line)
        return
    pos, rows = start + 1, 0
    while (match := _FLAT_DICT.match(line, pos)) is not None:
        yield _flat_dict(where, match.group(1))
        rows, pos = rows + 1, match.end()
        if match.group(2):  # the list's end: nothing may follow it
            if line[pos:].strip():
                raise SimbatchError(where, f"text after the list's closing bracket: {_show(line[pos:].strip())}")
            return
    if line[pos:].strip() == "]":
        return
    if rows == 0 or len(line) <= LITERAL_BYTES:
        yield from _literal_rows(where, line)[rows:]
        return
    raise SimbatchError(where, f"after request {rows:,} (character {pos:,}): expected a dict of numbers, or "
                        f"the list's end, got {_show(line[pos:pos + 40])}")


def _flat_dict(where: str, text: str):
    """One request's dict literal: JSON once its quotes are swapped (fast, and exact for plain
    numbers), else ``ast.literal_eval`` of the dict alone (its messages; a quote in a string)."""
    if '"' not in text and "\\" not in text:
        try:
            return json.loads(text.replace("'", '"'))
        except (ValueError, RecursionError):
            pass
    return _literal(where, text)


def _literal_rows(where: str, line: str) -> list:
    """The whole line as one literal, which must be a list (small lines only: :data:`LITERAL_BYTES`)."""
    if len(line) > LITERAL_BYTES:
        raise SimbatchError(where, f"expected a list of per-request dicts ('[{{...}}, ...]'), got "
                            f"{_show(line.strip()[:40])}")
    rows = _literal(where, line.strip())
    if not isinstance(rows, list):
        raise SimbatchError(where, f"expected a list of per-request dicts, got {type(rows).__name__}")
    return rows


def _literal(where: str, text: str):
    """``ast.literal_eval(text)``, its failures as one line at ``where`` (never ``eval``)."""
    try:
        return ast.literal_eval(text)
    except SyntaxError as e:
        raise SimbatchError(where, f"not a Python literal ({e.msg})") from None
    except (ValueError, TypeError):
        raise SimbatchError(where, "not a plain Python literal (only lists, dicts, strings and "
                            "numbers are allowed)") from None
    except (RecursionError, MemoryError):
        raise SimbatchError(where, "literal nested too deeply or too large to parse") from None


def _distserve_columns(rows: Iterable, fail: Fail) -> dict[str, np.ndarray]:
    """Validate every row as it comes; return one float64 column per key."""
    out = {k: array("d") for k in DISTSERVE_KEYS}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            fail(i, f"expected a dict, got {type(row).__name__} {_show(row)}")
        for key in DISTSERVE_KEYS:
            if key not in row:
                fail(i, f"missing key '{key}'")
            is_count = key in ("prompt_len", "output_len")
            # Absolute clock readings may be any finite number; lengths and durations may not be negative.
            minimum = 1 if is_count else (0.0 if key.endswith("_ms") else None)
            out[key].append((_count if is_count else _number)(lambda c, i=i: fail(i, c), key, row[key], minimum))
    return {k: np.frombuffer(v, dtype=np.float64) if len(v) else np.empty(0) for k, v in out.items()}


# --- vLLM benchmark_serving.py --save-result ------------------------------------

def read_vllm(path: str | Path, arrivals: Any = None) -> MeasuredRun:
    """Read the JSON of vLLM's ``benchmarks/benchmark_serving.py --save-result``.

    Field names are from vLLM's source: ``benchmarks/benchmark_serving.py`` at
    commit 0049e29c41fd383bda519a3f250e3227713081ef and ``vllm/benchmarks/serve.py``
    at def9ce85ba1079af970a58ed3d42dd861ae35d58 (``vllm bench serve``; newer
    releases need ``--save-detailed`` to keep the per-request lists). Per request,
    in send order: ``input_lens``, ``output_lens`` (0 for a failure), ``ttfts``
    (s), ``itls`` (s, one gap per streamed chunk after the first), ``errors``
    ("" when it succeeded). Some builds also save ``start_times`` (the client's
    ``time.perf_counter()`` at send, ``RequestFuncOutput.start_time``).

    Arrivals: ``arrivals`` if given (seconds, one per request in file order),
    else ``start_times``; else, when ``request_rate`` is ``"inf"`` and there is
    no ``max_concurrency``, every request was sent at once, so all arrive at 0.0
    (a note says so); otherwise a :class:`SimbatchError`.
    """
    p = _existing(path)
    return _vllm_run(str(p), _json_doc(p), arrivals)


def _vllm_run(path: str, doc: Any, arrivals: Any) -> MeasuredRun:
    lists = _vllm_lists(path, doc)
    n = len(lists["ttfts"])
    fail = _entry_fail(path)
    notes: list[str] = []
    prompt = np.empty(n, np.int64)
    output = np.empty(n, np.int64)
    ok = np.ones(n, bool)
    ttft = np.empty(n)
    gaps: list[np.ndarray] = []
    for i in range(n):
        f = lambda c, i=i: fail(i, c)  # noqa: E731 - binds this entry's index
        prompt[i] = _count(f, "input_lens", lists["input_lens"][i], 1)
        output[i] = _count(f, "output_lens", lists["output_lens"][i], 0)
        ttft[i] = _number(f, "ttfts", lists["ttfts"][i], 0.0)
        gaps.append(_numbers(f, "itls", lists["itls"][i]))
        err = lists["errors"][i]
        if err is not None and not isinstance(err, str):
            f(f"errors: expected a string, got {_show(err)}")
        # vLLM marks a failure by a non-empty error, and stores ttft 0 and output_len 0 for it.
        ok[i] = not err and ttft[i] > 0 and output[i] >= 1
    arrival = _vllm_arrivals(path, doc, n, arrivals, notes)
    return _vllm_assemble(path, doc, arrival, prompt, output, ttft, gaps, ok, notes)


def _vllm_lists(path: str, doc: Any) -> dict[str, list]:
    if not isinstance(doc, dict):
        raise SimbatchError(path, f"expected a JSON object (vLLM --save-result), got {type(doc).__name__}")
    for key in VLLM_LISTS:
        if key not in doc:
            raise SimbatchError(path, f"missing key '{key}': per-request results are saved by "
                                "benchmark_serving.py --save-result (newer vLLM: add --save-detailed)")
    lists = {key: doc[key] for key in VLLM_LISTS}
    lists["errors"] = doc.get("errors") if doc.get("errors") is not None else [""] * _len(doc["ttfts"])
    for key, value in lists.items():
        if not isinstance(value, list):
            raise SimbatchError(path, f"'{key}': expected a list, got {type(value).__name__}")
    n = len(lists["ttfts"])
    for key, value in lists.items():
        if len(value) != n:
            raise SimbatchError(path, f"'{key}' has {len(value)} entries but 'ttfts' has {n}")
    if n == 0:
        raise SimbatchError(path, "no requests ('ttfts' is empty)")
    return lists


def _vllm_arrivals(path: str, doc: dict, n: int, arrivals: Any, notes: list[str]) -> np.ndarray:
    """Send times in seconds (any origin; re-based later)."""
    if arrivals is not None:
        return _given_times("arrivals", arrivals, n)
    if "start_times" in doc:
        starts = doc["start_times"]
        if not isinstance(starts, list) or len(starts) != n:
            raise SimbatchError(path, f"'start_times': expected a list of {n} numbers, got {_show(starts)}")
        fail = _entry_fail(path)
        return np.array([_number(lambda c, i=i: fail(i, c), "start_times", s, None)
                         for i, s in enumerate(starts)])
    rate, concurrency = doc.get("request_rate"), doc.get("max_concurrency")
    if _is_inf(rate) and concurrency is None:
        # benchmark_serving.py: "If this is inf, then all the requests are sent at time 0."
        notes.append(f"{path}: no start_times; request_rate is inf, so every request arrives at 0.0")
        return np.zeros(n)
    raise SimbatchError(path, f"no per-request send times ('start_times') and request_rate={rate!r}, "
                        f"max_concurrency={concurrency!r}: arrivals cannot be rebuilt; pass arrivals= "
                        "(seconds, one per request in file order; on the command line --log-option arrivals=FILE, "
                        "one number a line)")


def _vllm_assemble(path, doc, arrival, prompt, output, ttft, gaps, ok, notes) -> MeasuredRun:
    n = len(arrival)
    first = np.where(ok, arrival + ttft, np.nan)
    tokens = [arrival[i] + ttft[i] + np.concatenate(([0.0], np.cumsum(gaps[i]))) if ok[i]
              else np.empty(0) for i in range(n)]
    finish = np.array([t[-1] if ok[i] else np.nan for i, t in enumerate(tokens)])
    if (~ok).any():
        notes.append(f"{path}: {int((~ok).sum())} failed requests: times NaN, output length unknown "
                     "(kept as 1 token for replay)")
        output = np.where(ok, output, 1)
    bundled = int(sum(ok[i] and len(gaps[i]) + 1 != output[i] for i in range(n)))
    if bundled:
        notes.append(f"{path}: {bundled} requests streamed a different number of chunks than "
                     "output tokens; token_times holds one time per chunk")
    backend = doc.get("backend")
    return _assemble(path, backend if isinstance(backend, str) else "", arrival, prompt, output,
                     first, finish, ok, tokens, notes)


# --- genai-perf profile_export.json --------------------------------------------

def read_genai_perf(path: str | Path, experiment: int | None = None,
                    prompt_tokens: Any = None) -> MeasuredRun:
    """Read genai-perf's (Perf Analyzer's) ``profile_export.json``.

    Structure from triton-inference-server/client,
    ``src/c++/perf_analyzer/genai-perf/tests/test_llm_profile_data_parser.py``
    (commit 384bdeee7fba1dad15f9ea452f8df5c27ab8b6f7) and ``docs/files.md``:
    ``{service_kind, endpoint, experiments: [{experiment: {mode, value},
    requests: [{timestamp, request_inputs, response_timestamps,
    response_outputs}]}]}``, times in ns. Responses are ``{"text_output": ...}``
    (Triton) or ``{"response": "data: {...}\\n\\n"}`` (OpenAI SSE chunks).

    The first token is the first response carrying text, the finish the last
    (as genai-perf measures them). The file records no token counts, except an
    OpenAI ``usage`` chunk when the server sent one: ``usage.prompt_tokens`` /
    ``usage.completion_tokens`` are used where present. Otherwise the output
    length is the number of text-carrying responses (a note says so) and the
    prompt length must come from ``prompt_tokens`` (one int for all requests,
    or one per request in file order), else a :class:`SimbatchError`.
    ``experiment`` picks one load level when the file holds several.
    """
    p = _existing(path)
    return _genai_run(str(p), _json_doc(p), experiment, prompt_tokens)


def _genai_run(path: str, doc: Any, experiment: Any, prompt_tokens: Any) -> MeasuredRun:
    requests, label = _genai_requests(path, doc, experiment)
    n = len(requests)
    fail = _entry_fail(path, label)
    given = _given_prompts(prompt_tokens, n)
    stamps = [_genai_request(lambda c, i=i: fail(i, c), r) for i, r in enumerate(requests)]
    t0 = min(s[0] for s in stamps)  # re-base in exact integers: ns since the epoch overflow float precision
    arrival = np.array([(s[0] - t0) / 1e9 for s in stamps])
    tokens = [np.array([(t - t0) / 1e9 for t in s[1]]) for s in stamps]
    ok = np.array([len(t) > 0 for t in tokens])
    prompt, output, counted = _genai_lengths(fail, stamps, given)
    first = np.array([t[0] if len(t) else np.nan for t in tokens])
    finish = np.array([t[-1] if len(t) else np.nan for t in tokens])
    notes = []
    if counted:
        notes.append(f"{path}: {counted} requests have no usage.completion_tokens: output length = "
                     "number of responses carrying text (a response may hold several tokens)")
    if (~ok).any():
        notes.append(f"{path}: {int((~ok).sum())} requests got no text back: failed, times NaN")
    system = "triton" if isinstance(doc, dict) and doc.get("service_kind") == "triton" else ""
    return _assemble(path, system, arrival, prompt, output, first, finish, ok, tokens, notes)


def _genai_requests(path: str, doc: Any, experiment: Any) -> tuple[list, str]:
    if not isinstance(doc, dict) or not isinstance(doc.get("experiments"), list):
        raise SimbatchError(path, "expected a JSON object with an 'experiments' list (genai-perf profile_export.json)")
    exps = doc["experiments"]
    if not exps:
        raise SimbatchError(path, "'experiments' is empty: no requests")
    if experiment is None and len(exps) > 1:
        raise SimbatchError(path, f"{len(exps)} experiments (load levels) in one file: pick one with "
                            f"experiment=0..{len(exps) - 1} (--log-option experiment=K on the command line)")
    k = 0 if experiment is None else experiment
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(exps):
        raise SimbatchError("experiment", f"expected an index 0..{len(exps) - 1}, got {experiment!r}")
    exp = exps[k]
    requests = exp.get("requests") if isinstance(exp, dict) else None
    if not isinstance(requests, list) or not requests:
        raise SimbatchError(path, f"experiment {k}: expected a non-empty 'requests' list, got {_show(requests)}")
    return requests, ("" if len(exps) == 1 else f"experiment {k} ")


def _genai_request(fail: Callable[[str], None], r: Any) -> tuple:
    """(send ns, token-carrying response ns list, usage prompt or None, usage completion or None)."""
    if not isinstance(r, dict):
        fail(f"expected an object, got {_show(r)}")
    for key in ("timestamp", "response_timestamps", "response_outputs"):
        if key not in r:
            fail(f"missing key '{key}'")
    sent = _number(fail, "timestamp", r["timestamp"], 0)
    stamps, outputs = r["response_timestamps"], r["response_outputs"]
    if not isinstance(stamps, list) or not isinstance(outputs, list) or len(stamps) != len(outputs):
        fail(f"response_timestamps and response_outputs: expected two lists of one length, got "
             f"{_show(stamps)} and {_show(outputs)}")
    times, usage = [], {}
    for j, (t, out) in enumerate(zip(stamps, outputs)):
        t = _number(fail, f"response_timestamps[{j}]", t, 0)
        if times and t < times[-1]:
            fail(f"response_timestamps[{j}]: {t!r} is before the previous response")
        if _genai_chunk(fail, j, out, usage):
            times.append(t)
    if times and times[0] < sent:
        fail(f"response_timestamps: first response {times[0]!r} is before timestamp {sent!r}")
    return sent, times, usage.get("prompt_tokens"), usage.get("completion_tokens")


def _genai_chunk(fail: Callable[[str], None], j: int, out: Any, usage: dict) -> bool:
    """Whether one response carries text; records any OpenAI ``usage`` it holds."""
    if not isinstance(out, dict):
        fail(f"response_outputs[{j}]: expected an object, got {_show(out)}")
    if "text_output" in out:  # Triton
        return isinstance(out["text_output"], str) and out["text_output"] != ""
    raw = out.get("response")
    if not isinstance(raw, str):
        fail(f"response_outputs[{j}]: expected 'text_output' or a 'response' string, got {_show(out)}")
    carries = False
    for message in _sse_messages(raw):
        try:
            data = json.loads(message)
        except (json.JSONDecodeError, RecursionError):
            fail(f"response_outputs[{j}]: not JSON after 'data:': {_show(message)}")
        if not isinstance(data, dict):
            continue
        carries |= _has_text(data.get("choices"))
        if isinstance(data.get("usage"), dict):
            usage.update({k: v for k, v in data["usage"].items() if k in ("prompt_tokens", "completion_tokens")})
    return carries


def _sse_messages(raw: str) -> list[str]:
    """JSON payloads of one response: SSE ``data:`` lines (``[DONE]`` dropped), or one plain JSON body."""
    if raw.lstrip().startswith("{"):
        return [raw]
    lines = [ln.strip()[5:].strip() for ln in raw.splitlines() if ln.strip().startswith("data:")]
    return [ln for ln in lines if ln and ln != "[DONE]"]


def _has_text(choices: Any) -> bool:
    """Text in an OpenAI choice: chat ``delta.content`` / ``message.content``, or completions ``text``."""
    if not isinstance(choices, list):
        return False
    for c in choices:
        if not isinstance(c, dict):
            continue
        for part in (c.get("delta"), c.get("message")):
            if isinstance(part, dict) and isinstance(part.get("content"), str) and part["content"]:
                return True
        if isinstance(c.get("text"), str) and c["text"]:
            return True
    return False


def _genai_lengths(fail: Fail, stamps: list, given: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, int]:
    n = len(stamps)
    prompt, output, counted = np.empty(n, np.int64), np.empty(n, np.int64), 0
    for i, (_, times, used_prompt, used_output) in enumerate(stamps):
        f = lambda c, i=i: fail(i, c)  # noqa: E731
        if used_prompt is not None:
            prompt[i] = _count(f, "usage.prompt_tokens", used_prompt, 1)
        elif given is not None:
            prompt[i] = given[i]
        else:
            f("prompt length not recorded (no usage.prompt_tokens in the responses): pass prompt_tokens= "
              "(one int for all requests, or one per request in file order; on the command line "
              "--log-option prompt_tokens=N, or =FILE with one a line)")
        if used_output is not None and times:
            output[i] = _count(f, "usage.completion_tokens", used_output, 1)
        else:
            # Failed requests (no text back) keep 1 token as a replay placeholder.
            output[i], counted = max(len(times), 1), counted + bool(times)
    return prompt, output, counted


def _given_prompts(prompt_tokens: Any, n: int) -> np.ndarray | None:
    if prompt_tokens is None:
        return None
    values = [prompt_tokens] * n if isinstance(prompt_tokens, (int, np.integer)) else prompt_tokens
    try:
        values = list(values)
    except TypeError:
        raise SimbatchError("prompt_tokens", f"expected an int or a list of ints, got {_show(prompt_tokens)}") from None
    if len(values) != n:
        raise SimbatchError("prompt_tokens", f"expected {n} values (one per request), got {len(values)}")
    return np.array([_count(lambda c, i=i: _raise(f"prompt_tokens[{i}]", c), "prompt_tokens", v, 1)
                     for i, v in enumerate(values)], np.int64)


# --- generic CSV / JSONL ------------------------------------------------------

def read_generic_run(path: str | Path, columns: dict, system: str = "") -> MeasuredRun:
    """Read any CSV / JSONL run log through a column mapping.

    ``columns`` = ``{arrival, prompt, output, first_token | ttft, finish | e2el,
    time_unit: s|ms|us}``: ``arrival``, ``prompt`` and ``output`` are required;
    the first token is an absolute time (``first_token``, same clock as
    ``arrival``) or a duration from arrival (``ttft``), and the finish likewise
    (``finish`` or ``e2el``). Times are numbers in ``time_unit`` (default s).
    Loading and the length checks are :mod:`simbatch.workload.readers`' own, so
    errors read ``<path>:<line>`` (the CSV header is line 1). A ``.parquet``
    file (``simbatch run --format parquet``'s ``requests.parquet``) is read
    too; its errors read ``<path>:<row>``, rows numbered from 1.
    """
    roles = _generic_roles(columns)
    p = _existing(path)
    t = _parquet_table(p, roles) if p.suffix.lower() == ".parquet" else _load(p, _text(p))
    if len(t.lines) == 0:
        raise SimbatchError(str(p), "file is empty: no requests")
    unit = TIME_UNITS[roles.get("time_unit", "s")]
    arrival = _seconds(t, roles["arrival"], unit, None)
    prompt = _ints(t, roles["prompt"], minimum=1)
    output = _ints(t, roles["output"], minimum=1)
    first = (arrival + _seconds(t, roles["ttft"], unit, 0.0) if "ttft" in roles
             else _seconds(t, roles["first_token"], unit, None))
    finish = (arrival + _seconds(t, roles["e2el"], unit, 0.0) if "e2el" in roles
              else _seconds(t, roles["finish"], unit, None))
    names = (roles["arrival"], roles.get("first_token") or roles["ttft"], roles.get("finish") or roles["e2el"])
    _check_order(lambda i, c: _raise(f"{p}:{t.lines[i]}", c), arrival, first, finish, None, names, unit)
    return _assemble(str(p), system, arrival, prompt, output, first, finish)


def _parquet_table(p: Path, roles: dict) -> _Table:
    """The mapped columns of a Parquet file as raw values (numbers; None for a null), rows numbered
    from 1 for errors. Columns it lacks are left out, so the mapping's check names them."""
    import pyarrow.parquet as pq

    from simbatch.report.parquet_table import parquet_columns

    have = set(parquet_columns(p))
    wanted = [c for c in dict.fromkeys(v for k, v in roles.items() if k != "time_unit") if c in have]
    try:
        table = pq.read_table(p, columns=wanted)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise SimbatchError(str(p), f"unreadable Parquet: {exc}".splitlines()[0]) from None
    return _Table(str(p), {name: table.column(name).to_pylist() for name in wanted},
                  np.arange(1, table.num_rows + 1))


def _generic_roles(columns: Any) -> dict:
    where = "columns"
    check_column_mapping(columns, GENERIC_RUN_KEYS, ("arrival", "prompt", "output"), where, "missing: required")
    for absolute, duration in (("first_token", "ttft"), ("finish", "e2el")):
        if (absolute in columns) == (duration in columns):
            raise SimbatchError(where, f"give exactly one of '{absolute}' (a time) or '{duration}' (a duration)")
    return columns
