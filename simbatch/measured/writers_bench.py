"""Writers of a simbatch run's requests in the two benchmark harnesses' formats.

The inverse of :mod:`simbatch.measured.readers_bench`: :func:`write_lmbench` and
:func:`write_llmservingsim` turn the per-request table ``simbatch run`` produces
(``RunResult.requests`` / ``requests.csv``: ``arrival_s``, ``prompt_tokens``,
``output_tokens``, ``first_token_s``, ``finish_s``, ``completed``, and
``first_scheduled_s`` where present) into the file those harnesses write, so a
simulated run can go through any tool that reads them, and read back by simbatch
it gives the run's own latencies (docs/measured.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from simbatch.errors import SimbatchError
from simbatch.measured.readers_bench import ENGINE_TIMES

REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens", "first_token_s", "finish_s", "completed")


def write_lmbench(requests: pd.DataFrame, path: str | Path, epoch_s: float = 0.0) -> Path:
    """Write ``requests`` as an LMBench client CSV at ``path``; returns the path.

    One row per completed request (LMBench keeps no failed ones), in send order:
    ``launch_time`` = ``epoch_s`` + arrival, ``ttft`` = first token - arrival,
    ``generation_time`` = finish - first token, ``finish_time`` = ``epoch_s`` + finish.
    With ``epoch_s`` 0 the times read back exactly; a real epoch (1.7e9) rounds the
    send times to about 0.2 us.
    """
    df = _completed(requests)
    out = pd.DataFrame({
        "prompt_tokens": df["prompt_tokens"].astype(np.int64),
        "generation_tokens": df["output_tokens"].astype(np.int64),
        "ttft": df["first_token_s"] - df["arrival_s"],
        "generation_time": df["finish_s"] - df["first_token_s"],
        "launch_time": epoch_s + df["arrival_s"],
        "finish_time": epoch_s + df["finish_s"],
    })
    p = Path(path)
    out.to_csv(p, index=False)
    return p


def write_llmservingsim(requests: pd.DataFrame, path: str | Path, epoch_s: float = 0.0,
                        monotonic_s: float = 0.0) -> Path:
    """Write ``requests`` as LLMServingSim's vLLM bench ``requests.jsonl`` at ``path``; returns the path.

    One object per request, in send order: ``arrival_time`` = ``epoch_s`` + arrival
    (the front end's epoch clock); on the engine's clock (``monotonic_s`` + time)
    ``queued_ts`` = arrival (so the TTFT read back is simbatch's, from the send),
    ``scheduled_ts`` = first scheduled (the first token where the table lacks it),
    ``first_token_ts`` and ``last_token_ts``. A request that did not complete gets
    null times, as the bench writes a request it got no metrics for.
    """
    df = _checked(requests).sort_values("arrival_s", kind="stable")
    p = Path(path)
    p.write_text("".join(json.dumps(r) + "\n" for r in _records(df, epoch_s, monotonic_s)), encoding="utf-8")
    return p


def _records(df: pd.DataFrame, epoch_s: float, monotonic_s: float) -> list[dict]:
    """One requests.jsonl object per row of ``df`` (already in send order)."""
    done = df["completed"].astype(bool).to_numpy()
    ids = df["id"].to_numpy() if "id" in df else np.arange(len(df))
    scheduled = df["first_scheduled_s"] if "first_scheduled_s" in df else df["first_token_s"]
    engine = {"queued_ts": df["arrival_s"], "scheduled_ts": scheduled, "first_token_ts": df["first_token_s"],
              "last_token_ts": df["finish_s"]}
    engine = {k: v.to_numpy(np.float64) for k, v in engine.items()}
    arrival, prompt, output = (df[c].to_numpy() for c in ("arrival_s", "prompt_tokens", "output_tokens"))
    records = []
    for j in range(len(df)):
        record = {"request_id": f"sim-{ids[j]}", "input_toks": int(prompt[j]), "output_toks": int(output[j]),
                  "arrival_time": _stamp(epoch_s, arrival[j], done[j])}
        records.append(record | {k: _stamp(monotonic_s, engine[k][j], done[j]) for k in ENGINE_TIMES})
    return records


def _stamp(origin: float, t: float, done: bool) -> float | None:
    """``origin + t`` as a JSON number, or None (null) for a request that did not complete."""
    return float(origin + t) if done and math.isfinite(t) else None


def _checked(requests: pd.DataFrame) -> pd.DataFrame:
    """``requests`` when it has every :data:`REQUIRED` column and at least one row."""
    missing = [c for c in REQUIRED if c not in requests.columns]
    if missing:
        raise SimbatchError("requests", f"missing column(s) {', '.join(missing)}: expected the per-request "
                            "table simbatch run writes (requests.csv)")
    if len(requests) == 0:
        raise SimbatchError("requests", "no requests to write")
    return requests


def _completed(requests: pd.DataFrame) -> pd.DataFrame:
    """The completed requests of ``requests``, in send order; an error when none completed."""
    df = _checked(requests)
    df = df[df["completed"].astype(bool)].sort_values("arrival_s", kind="stable")
    if len(df) == 0:
        raise SimbatchError("requests", "no request completed: an LMBench CSV holds completed requests only")
    return df
