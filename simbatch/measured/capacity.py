"""The KV capacity a measured log implies: the most tokens the server held while requests waited.

A server that makes requests wait while it holds T tokens of KV had no room for
the next prompt at T: its pool is at most a prompt (and a block per sequence)
above T, and at least T. So the peak of the tokens in flight *while some
request waits* is a lower bound on the engine's KV capacity, close to it when
the log saturates, and says nothing when nothing ever waited.

Tokens in flight at time t: every request admitted and not finished holds its
prompt plus the tokens it has generated (one at its first token, rising evenly
to its output length at its finish). A request is admitted when the engine
scheduled it where the log says so (vLLM's ``scheduled_ts``), else at its first
token (later than the truth by its prefill, so the count is, if anything, low).
It waits from its arrival until it is admitted; only waits longer than
``wait_s`` count, so a prompt whose own prefill takes a moment is not taken for
a queue. The in-flight count is piecewise linear between events, so its
maximum is found exactly at them.

A request the server preempted (its blocks freed, to be recomputed later)
still counts as holding its tokens: a log records no preemption, so on a
server that preempted the figure overstates what it held (the RTX 4090 run of
vLLM 0.19: 57k tokens "held" in a 41k-token pool). Where the bench recorded
the engine's own pool and its use (LLMServingSim's ``meta.json`` and
``timeseries.csv`` beside the log), :func:`engine_record` reads those instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WAIT_S = 1.0  # a wait this long is queueing, not the request's own prefill (TTFT SLOs are ~0.2-2 s)


@dataclass(frozen=True)
class ImpliedCapacity:
    """What a log says of its server's KV capacity (tokens)."""

    peak_tokens: int  # the most tokens in flight at any moment
    peak_while_waiting: int | None  # the most while some request waited > wait_s; None: none waited
    waited_s: float  # seconds during which some request waited > wait_s

    @property
    def saturates(self) -> bool:
        """Whether requests queued at all (else the log bounds nothing)."""
        return self.peak_while_waiting is not None

    def verdict(self, budget_tokens: int | None = None) -> str:
        """One phrase: the implied capacity beside ``budget_tokens`` (a scenario's KV pool)."""
        if not self.saturates:
            near = f" ({self.peak_tokens / budget_tokens:.0%} of the budget)" if budget_tokens else ""
            return f"never queued: peak {self.peak_tokens:,} tokens in flight{near}, bounds nothing"
        text = f"held {self.peak_while_waiting:,} tokens while requests waited ({self.waited_s:.0f} s)"
        if budget_tokens:
            text += f"; the scenario's pool is {budget_tokens:,} ({budget_tokens / self.peak_while_waiting - 1:+.0%})"
        if budget_tokens and self.peak_while_waiting > budget_tokens:
            text += " (more than a pool holds: preempted requests count as held, module docstring)"
        return text

    def describe(self) -> dict:
        """For ``validation.json``."""
        return {"peak_tokens": self.peak_tokens, "peak_while_waiting": self.peak_while_waiting,
                "waited_s": round(self.waited_s, 3), "saturates": self.saturates}


def implied_capacity(run, wait_s: float = WAIT_S) -> ImpliedCapacity:
    """The in-flight token peaks of a :class:`~simbatch.measured.run.MeasuredRun` (module docstring)."""
    ok = run.succeeded & np.isfinite(run.first_token_s) & np.isfinite(run.finish_s)
    admitted = getattr(run, "scheduled_s", None)
    admitted = (run.first_token_s if admitted is None else admitted)[ok]
    first, finish = run.first_token_s[ok], run.finish_s[ok]
    prompt, out, arrival = run.prompt_tokens[ok], run.output_tokens[ok], run.arrival_s[ok]
    if not ok.any():
        return ImpliedCapacity(0, None, 0.0)
    admitted = np.minimum(admitted, first)  # a log's admission after its first token: at the token
    times, level = _inflight(admitted, first, np.maximum(finish, first), prompt, out)
    waiting = _waiting(arrival + wait_s, admitted, times)
    peak_waiting = level[waiting].max() if waiting.any() else None
    return ImpliedCapacity(int(level.max()), None if peak_waiting is None else int(peak_waiting),
                           _waited(arrival + wait_s, admitted))


def _inflight(admitted, first, finish, prompt, out) -> tuple[np.ndarray, np.ndarray]:
    """(event times, tokens in flight just before each): a request holds ``prompt`` from its
    admission, then ``prompt + 1 + (out - 1) x (t - first) / (finish - first)`` up to its finish.
    Each piece is ``a + b t``; running sums of a and b over the events give the level."""
    span = finish - first
    slope = np.where(span > 0, (out - 1) / np.where(span > 0, span, 1), 0.0)
    # Piece 1 (admitted -> first): prompt. Piece 2 (first -> finish): prompt + 1 + slope (t - first).
    starts = np.concatenate([admitted, first])
    ends = np.concatenate([first, finish])
    a = np.concatenate([prompt.astype(float), prompt + 1 - slope * first])
    b = np.concatenate([np.zeros_like(slope), slope])
    times = np.concatenate([starts, ends])
    da = np.concatenate([a, -a])
    db = np.concatenate([b, -b])
    order = np.lexsort((np.r_[np.ones(len(starts)), np.zeros(len(ends))], times))  # ends first at a tie
    t, ca, cb = times[order], np.cumsum(da[order]), np.cumsum(db[order])
    # The level just before event k is the sums after event k-1, evaluated at t_k.
    prev_a, prev_b = np.r_[0.0, ca[:-1]], np.r_[0.0, cb[:-1]]
    return t, np.maximum(prev_a + prev_b * t, 0.0)


def _waiting(wait_from, admitted, times) -> np.ndarray:
    """Whether some request had waited ``wait_s`` and was not yet admitted just before each time."""
    late = wait_from < admitted
    starts, ends = np.sort(wait_from[late]), np.sort(admitted[late])
    return (np.searchsorted(starts, times, "left") - np.searchsorted(ends, times, "left")) > 0


def _waited(wait_from, admitted) -> float:
    """Seconds during which at least one request had waited past ``wait_s``."""
    late = wait_from < admitted
    if not late.any():
        return 0.0
    order = np.argsort(wait_from[late])
    s, e = wait_from[late][order], admitted[late][order]
    total, cur_s, cur_e = 0.0, s[0], e[0]
    for lo, hi in zip(s[1:], e[1:]):
        if lo > cur_e:
            total, cur_s, cur_e = total + cur_e - cur_s, lo, hi
        else:
            cur_e = max(cur_e, hi)
    return float(total + cur_e - cur_s)


def engine_record(path) -> dict:
    """The engine's own KV figures where its bench wrote them beside the log at ``path``:
    ``engine_tokens`` (vLLM's num_gpu_blocks x block size, meta.json) and ``used_peak_pct``
    (the stat logger's peak KV use, timeseries.csv); {} where neither is there."""
    from simbatch.measured.readers_bench import bench_companions, read_engine_meta, read_timeseries

    found, out = bench_companions(path), {}
    if "meta" in found:
        out["engine_tokens"] = read_engine_meta(found["meta"]).kv_tokens
    if "timeseries" in found:
        out["used_peak_pct"] = float(read_timeseries(found["timeseries"])["kv_cache_pct"].max())
    return {k: v for k, v in out.items() if v is not None}

