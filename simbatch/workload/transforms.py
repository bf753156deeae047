"""Workload transforms: cut, speed up or clip a workload without re-reading it.

Each returns a new :class:`Workload` (the input is left untouched), keeps
arrival order, and carries the source and notes forward. Arguments are checked
by the caller (``build_workload`` knows the scenario field to blame); here a
bad one raises :class:`SimbatchError` at ``where``.
"""

from __future__ import annotations

import math
from operator import getitem

import numpy as np

from simbatch.errors import SimbatchError
from simbatch.workload.request import Workload


def take(w: Workload, rows: np.ndarray | slice) -> Workload:
    """The workload restricted to ``rows`` (a slice or sorted index array)."""
    idx = np.arange(len(w))[rows]
    return Workload(
        arrival_s=w.arrival_s[idx],
        prompt_tokens=w.prompt_tokens[idx],
        output_tokens=w.output_tokens[idx],
        hash_ids=_pick(w.hash_ids, idx),
        session_id=_pick(w.session_id, idx),
        priority=w.priority[idx] if w.priority is not None else None,
        source=w.source,
        notes=list(w.notes),
    )


def _pick(items: list | None, idx: np.ndarray) -> list | None:
    """``items[i]`` for each ``i`` in ``idx`` (None stays None)."""
    return None if items is None else list(map(items.__getitem__, idx.tolist()))


def first_n(w: Workload, n: int, where: str = "num_requests") -> Workload:
    """The first ``n`` requests (all of them, with a note, when there are fewer)."""
    if n < 1:
        raise SimbatchError(where, f"expected a positive integer, got {n!r}")
    out = take(w, slice(0, n))
    if n > len(w):
        out.notes.append(f"num_requests {n} > {len(w)} available; using all {len(w)}")
    return out


def time_window(w: Workload, start_s: float, end_s: float, where: str = "window") -> Workload:
    """Requests arriving in ``[start_s, end_s)``, with times kept relative to ``start_s``.

    Times are *not* re-based onto the first kept arrival: a quiet stretch at
    the start of the window stays quiet, so load over the window is faithful.
    """
    if not start_s < end_s:
        raise SimbatchError(where, f"expected start < end, got [{start_s}, {end_s}]")
    if np.isnan(w.arrival_s).any():
        raise SimbatchError(where, "the workload has no arrival times to window on")
    lo, hi = np.searchsorted(w.arrival_s, [start_s, end_s], side="left")
    if lo == hi:
        raise SimbatchError(where, f"no request arrives in [{start_s}, {end_s}) "
                                   f"(trace spans 0 .. {w.arrival_s[-1]:.1f} s)")
    out = take(w, slice(lo, hi))
    out.arrival_s = out.arrival_s - start_s
    return out


def scale_rate(w: Workload, k: float, where: str = "rate_scale") -> Workload:
    """Replay at ``k`` times the recorded rate (every arrival time divided by ``k``)."""
    if not (k > 0 and math.isfinite(k)):
        raise SimbatchError(where, f"expected a positive number, got {k!r}")
    out = take(w, slice(None))
    out.arrival_s = out.arrival_s / k
    return out


def clip_total_tokens(w: Workload, max_total: int, where: str = "max_total_tokens",
                      block_tokens: int = 512) -> Workload:
    """Clip requests so that prompt + output <= ``max_total`` (e.g. a model's context).

    The prompt is cut first (the output is what a user waits for); an output
    that alone reaches ``max_total`` becomes ``max_total - 1`` with a 1-token
    prompt. Prefix hashes of a cut prompt are cut to its remaining
    ``block_tokens``-token blocks (512 for Mooncake).
    """
    if max_total < 2:
        raise SimbatchError(where, f"expected an integer >= 2, got {max_total!r}")
    output = np.minimum(w.output_tokens, max_total - 1)
    prompt = np.minimum(w.prompt_tokens, max_total - output)
    clipped = (output != w.output_tokens) | (prompt != w.prompt_tokens)
    out = take(w, slice(None))
    out.prompt_tokens, out.output_tokens = prompt, output
    if out.hash_ids is not None:
        blocks = -(-prompt // block_tokens)  # the cut prompt's blocks, rounded up
        out.hash_ids = list(map(getitem, out.hash_ids, map(slice, blocks.tolist())))
    if clipped.any():
        out.notes.append(f"clipped {int(clipped.sum())} of {len(w)} requests "
                         f"to prompt + output <= {max_total} tokens")
    return out
