"""Build a scenario's ``workload:`` section into a :class:`Workload`.

Exactly one source (``trace``, ``synthetic`` or inline ``requests``), the arrivals of a
``rate_curve`` where one is given (:mod:`simbatch.workload.rate_curve`: traffic that rises
and falls over a day), then the options in a fixed order: ``window`` -> ``num_requests`` ->
``rate_scale`` (with a rate curve: the curve's rates times it) -> ``max_total_tokens``. Windowing first means ``num_requests`` counts requests
inside the window, and scaling after cutting keeps ``window`` in the trace's own
(recorded) seconds, which is how people talk about "minutes 10-20 of the trace".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import simbatch.workload.transforms as transforms
from simbatch.core.horizon import MAX_TIME_S  # simulated time's horizon (1e9 s)
from simbatch.errors import SimbatchError
from simbatch.workload.rate_curve import (
    RateCurve,
    parse_rate_curve,
    poisson_arrivals,
    warp_arrivals,
)
from simbatch.workload.readers import check_trace_format, read_trace
from simbatch.workload.request import Request, Workload
from simbatch.workload.synthetic import (
    check_keys,
    check_number,
    number,
    require_mapping,
    sample_arrivals,
    synthetic_workload,
)
from simbatch.workload.tracepath import trace_path

SOURCES = ("trace", "synthetic", "requests")
OPTIONS = ("rate_curve", "window", "num_requests", "rate_scale", "max_total_tokens")
TRACE_KEYS = ("format", "columns", "arrival")
WORKLOAD_KEYS = (*SOURCES, *TRACE_KEYS, *OPTIONS)
REQUEST_KEYS = ("prompt", "output", "arrival_s", "priority", "session_id", "hash_ids")


def build_workload(spec: dict, *, base_dir: Path, seed: int, where: str) -> Workload:
    """The workload a scenario's ``workload:`` section describes.

    ``base_dir`` resolves relative trace paths; ``seed`` makes the single RNG
    (``np.random.default_rng(seed)``) behind every random draw; ``where`` is the
    dotted field path used in error messages (e.g. ``"chat.yaml: workload"``).
    """
    check_keys(require_mapping(spec, where), WORKLOAD_KEYS, where)
    sources = [k for k in SOURCES if k in spec]
    if len(sources) != 1:
        got = ", ".join(sources) if sources else "none"
        raise SimbatchError(where, f"expected exactly one source of {', '.join(SOURCES)}; got {got}")
    if sources[0] != "trace":
        for key in TRACE_KEYS:
            if key in spec:
                raise SimbatchError(f"{where}.{key}", "only allowed with 'trace'")
    rng = np.random.default_rng(seed)
    base_dir = Path(base_dir)
    curve = _rate_curve(spec, base_dir, where)
    if curve is not None and "arrival" in spec:
        raise SimbatchError(f"{where}.arrival", "not with rate_curve, which gives the arrivals")
    if "trace" in spec:
        w = _from_trace(spec, rng, base_dir, where, need_arrivals=curve is None or curve.arrivals == "warp")
    elif "synthetic" in spec:
        if curve is not None:
            arrivals = _curve_arrivals(curve, rng, f"{where}.rate_curve")
            w = synthetic_workload(spec["synthetic"], rng, f"{where}.synthetic", base_dir, arrival_s=arrivals)
            w.notes.append(_curve_note(curve, len(w)))
            return check_time_span(_apply_options(w, spec, where), where)
        w = synthetic_workload(spec["synthetic"], rng, f"{where}.synthetic", base_dir)
    else:
        w = _from_requests(spec["requests"], f"{where}.requests")
    if curve is not None:
        w = _follow_curve(w, curve, rng, where)
    return check_time_span(_apply_options(w, spec, where), where)


def _rate_curve(spec: dict, base_dir: Path, where: str) -> RateCurve | None:
    """The section's rate curve (its rates times ``rate_scale``), or None."""
    if "rate_curve" not in spec:
        return None
    curve = parse_rate_curve(spec["rate_curve"], base_dir, f"{where}.rate_curve")
    if "rate_scale" in spec:
        curve = curve.scaled(number(spec, "rate_scale", where, positive=True))
    if curve.arrivals == "warp" and "synthetic" in spec:
        raise SimbatchError(f"{where}.rate_curve.arrivals", "warp time-warps a trace's own arrivals; a "
                                                            "synthetic source has none (use poisson)")
    return curve


def _curve_arrivals(curve: RateCurve, rng: np.random.Generator, where: str) -> np.ndarray:
    arrivals = poisson_arrivals(curve, rng, where)
    if not len(arrivals):
        raise SimbatchError(where, f"the curve expects {curve.expected:.3g} requests and drew none")
    return arrivals


def _follow_curve(w: Workload, curve: RateCurve, rng: np.random.Generator, where: str) -> Workload:
    """A trace's (or inline list's) rows at the curve's arrivals (module docstring)."""
    if curve.arrivals == "warp":
        times, rows = warp_arrivals(curve, w.arrival_s)
    else:
        times = _curve_arrivals(curve, rng, f"{where}.rate_curve")
        rows = np.arange(len(times)) % len(w)
    out = transforms.take(w, rows)
    out.arrival_s = times
    out.notes.append(_curve_note(curve, len(out)))
    if len(out) > len(w):
        out.notes.append(f"rate curve: the trace's {len(w):,} rows reused in file order for "
                         f"{len(out):,} arrivals ({len(out) / len(w):.2f} times each)")
    return out


def _curve_note(curve: RateCurve, n: int) -> str:
    return (f"rate curve: {curve.label} ({curve.arrivals} arrivals): {n:,} requests over "
            f"{curve.duration_s:,.0f} s, expected {curve.expected:,.0f}, peak {float(curve.rates.max()):.3g} req/s")


def check_time_span(w: Workload, where: str) -> Workload:
    """Refuse arrivals so far apart that simulated time would lose sub-microsecond precision."""
    if len(w) and float(np.max(w.arrival_s)) > MAX_TIME_S:
        raise SimbatchError(where, f"the last request arrives at {float(np.max(w.arrival_s)):.3g} s, beyond "
                                   f"{MAX_TIME_S:.0e} s, where simulated time cannot resolve a microsecond; "
                                   f"raise the arrival rate or shorten the trace")
    return w


def _from_trace(spec: dict, rng: np.random.Generator, base_dir: Path, where: str,
                need_arrivals: bool = True) -> Workload:
    trace = spec["trace"]
    if not isinstance(trace, str) or not trace:
        raise SimbatchError(f"{where}.trace", f"expected a file path, got {trace!r}")
    check_trace_format(spec.get("format"), where)  # a bad field before a missing file: both are the user's
    w = read_trace(trace_path(base_dir, trace, where), spec.get("format"), spec.get("columns"), where)
    has_arrivals = not np.isnan(w.arrival_s).any()
    if "arrival" in spec:
        # An arrival process replaces (or supplies) the trace's arrival times
        # while keeping its lengths in file order: "these requests, at this load".
        w.arrival_s = sample_arrivals(spec["arrival"], len(w), rng, f"{where}.arrival")
        if has_arrivals:
            w.notes.append(f"{trace}: recorded arrivals replaced by a {spec['arrival']['kind']} process")
    elif not has_arrivals and need_arrivals:
        raise SimbatchError(f"{where}.arrival", f"required: {trace} has no arrival times; "
                                                "give a process such as {kind: poisson, rate: 5}")
    return w


def _from_requests(items, where: str) -> Workload:
    if not isinstance(items, list) or not items:
        raise SimbatchError(where, "expected a non-empty list of {prompt, output, arrival_s} entries")
    reqs = [_inline_request(i, item, f"{where}[{i}]") for i, item in enumerate(items)]
    w = Workload.from_requests(reqs, source="inline")
    if any(b.arrival_s < a.arrival_s for a, b in zip(reqs, reqs[1:])):
        w.notes.append(f"{where}: arrivals not in time order; sorted {len(reqs)} rows")
    return w


def _inline_request(i: int, item, where: str) -> Request:
    check_keys(require_mapping(item, where), REQUEST_KEYS, where)
    session, hashes = item.get("session_id"), item.get("hash_ids")
    if hashes is not None and not (isinstance(hashes, list) and all(type(h) is int for h in hashes)):
        raise SimbatchError(f"{where}.hash_ids", f"expected a list of integers, got {hashes!r}")
    return Request(
        id=i,
        arrival_s=number(item, "arrival_s", where, default=0.0, minimum=0),
        prompt_tokens=number(item, "prompt", where, integer=True, minimum=1),
        output_tokens=number(item, "output", where, integer=True, minimum=1),
        hash_ids=tuple(hashes) if hashes is not None else None,
        session_id=None if session is None else str(session),
        priority=number(item, "priority", where, default=0, integer=True),
    )


def _apply_options(w: Workload, spec: dict, where: str) -> Workload:
    if "window" in spec:
        win = spec["window"]
        if not isinstance(win, list) or len(win) != 2:
            raise SimbatchError(f"{where}.window", f"expected [start_s, end_s], got {win!r}")
        start = check_number(win[0], f"{where}.window[0]", minimum=0)
        end = check_number(win[1], f"{where}.window[1]", minimum=0)
        w = transforms.time_window(w, start, end, f"{where}.window")
    if "num_requests" in spec:
        n = number(spec, "num_requests", where, integer=True, minimum=1)
        w = transforms.first_n(w, n, f"{where}.num_requests")
    if "rate_scale" in spec and "rate_curve" not in spec:  # a curve took it as a factor on its rates
        w = transforms.scale_rate(w, number(spec, "rate_scale", where, positive=True))
    if "max_total_tokens" in spec:
        m = number(spec, "max_total_tokens", where, integer=True, minimum=2)
        w = transforms.clip_total_tokens(w, m, f"{where}.max_total_tokens")
    return w


def describe_workload(w: Workload) -> dict:
    """Headline numbers of a workload, flat and JSON-ready, for reports.

    ``rate`` is (n - 1) / span in req/s (None when every request arrives at
    once); percentiles use linear interpolation, as in the traces' README.
    """
    n = len(w)
    duration = float(w.arrival_s[-1] - w.arrival_s[0]) if n else 0.0
    out = {
        "source": w.source,
        "num_requests": n,
        "duration_s": duration,
        "rate": (n - 1) / duration if duration > 0 else None,
    }
    for name, col in (("prompt", w.prompt_tokens), ("output", w.output_tokens)):
        out[f"{name}_mean"] = float(np.mean(col)) if n else 0.0
        out[f"{name}_p50"] = float(np.percentile(col, 50)) if n else 0.0
        out[f"{name}_p99"] = float(np.percentile(col, 99)) if n else 0.0
        out[f"{name}_total"] = int(np.sum(col))
    out["notes"] = list(w.notes)
    return out
