"""How fast a measured server's steps ran, read from per-request timestamps alone.

A per-request log (arrival, first token, last token, lengths) records no step
times, but every decoding request is a probe. Between its first and its last
token the server ran ``output - 1`` decode steps that included it, and, in an
engine that stops decoding for a prompt step (vLLM's v0 engine, any
prefill-first scheduler), every prompt step that came in between. Over that
window the log also says who else was decoding (the requests whose own
windows overlap it) and which prompts were prefilled (the other requests whose
first token came inside it). Each request therefore gives one equation::

    window = steps x (a + b x mean batch + c x mean context / 1000)
             + d x prompt steps + e x prompt tokens prefilled

where the means are over the window, a request's context grows linearly
from its prompt to prompt + output, and the first tokens of several requests
at one instant count as one prompt step. Least squares over all the requests
of some logs gives a step-cost model of the server that ran them (the same
shapes Vidur and DistServe's simulator fit from kernel timings).

Its use is a **consistency check before a fit**: a model fitted on the other
logs predicts each log's windows, and :func:`relative_speed` says how much
longer (positive) or shorter the log's windows were. Logs of one server under
one set of conditions agree within a few percent whatever their load, since
the model is given each log's own batches and prompts. A log well off the
others ran on a slower or faster server (a later start, other clocks, other
work on the machine): a difference that no engine parameter fitted across the
logs can represent, and that bounds how closely one parameter set can match
them all. The coefficients themselves are not identified well (batch and
context move together); only the predictions are used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbatch.measured.run import MeasuredRun

FEATURES = ("steps", "steps x batch", "steps x kcontext", "prompt steps", "prompt tokens")
MIN_OUTPUT = 3  # a window of one step is one step's jitter; two or more steps average it
MAX_PROBES = 2000  # evenly spaced probes per log at most: enough for a fit, and bounded time on big logs
SAME_STEP_S = 1e-3  # first tokens this close together came out of one prompt step


@dataclass(frozen=True)
class Windows:
    """One row of :data:`FEATURES` per probe request, and its decode window in seconds."""

    features: np.ndarray  # (n, 5)
    seconds: np.ndarray  # (n,)


def decode_windows(run: MeasuredRun) -> Windows:
    """The equations (module docstring) of the completed requests with at least
    :data:`MIN_OUTPUT` output tokens (at most :data:`MAX_PROBES` of them, evenly spaced)."""
    ok = run.succeeded & np.isfinite(run.first_token_s) & np.isfinite(run.finish_s)
    order = np.argsort(run.first_token_s[ok], kind="stable")  # neighbours sorted by first token
    first, last = run.first_token_s[ok][order], run.finish_s[ok][order]
    prompt = run.prompt_tokens[ok][order].astype(np.float64)
    output = run.output_tokens[ok][order].astype(np.float64)
    span = np.maximum(last - first, 1e-9)
    longest = float(span.max()) if span.size else 0.0
    probes = np.flatnonzero((output >= MIN_OUTPUT) & (last > first))
    if len(probes) > MAX_PROBES:
        probes = probes[np.linspace(0, len(probes) - 1, MAX_PROBES).round().astype(int)]
    rows, seconds = [], []
    for i in probes:
        lo, hi = first[i], last[i]
        # Only requests whose first token came before hi and at most the longest window before
        # lo can overlap [lo, hi]: a slice of the sorted neighbours, not the whole log.
        near = slice(np.searchsorted(first, lo - longest, "left"), np.searchsorted(first, hi, "left"))
        f, c, p, o, w = first[near], last[near], prompt[near], output[near], span[near]
        start, end = np.maximum(f, lo), np.minimum(c, hi)
        overlap = np.clip(end - start, 0.0, None)
        # Each neighbour's context at the middle of its overlap (linear growth over its window).
        context = p + np.clip(((start + end) / 2 - f) / w, 0.0, 1.0) * o
        width = hi - lo
        inside = (f > lo) & (f < hi)
        steps = output[i] - 1
        rows.append((steps, steps * overlap.sum() / width, steps * (overlap * context).sum() / width / 1e3,
                     _distinct(f[inside]), p[inside].sum()))
        seconds.append(width)
    return Windows(np.asarray(rows, np.float64).reshape(-1, len(FEATURES)), np.asarray(seconds, np.float64))


def _distinct(times: np.ndarray) -> int:
    """How many prompt steps produced these first tokens (one per cluster of instants)."""
    if times.size == 0:
        return 0
    t = np.sort(times)
    return int(1 + (np.diff(t) > SAME_STEP_S).sum())


def fit_steps(windows: list[Windows]) -> np.ndarray:
    """Least-squares coefficients of :data:`FEATURES` (seconds) over the windows of some logs."""
    x = np.vstack([w.features for w in windows])
    y = np.concatenate([w.seconds for w in windows])
    if len(y) < len(FEATURES):
        raise ValueError(f"{len(y)} decode windows cannot fit {len(FEATURES)} terms")
    return np.linalg.lstsq(x, y, rcond=None)[0]


def relative_speed(runs: list[MeasuredRun]) -> list[float]:
    """For each run: its decode windows' total over what a step model fitted on the other runs
    predicts, minus 1 (+0.12: that server's steps took 12 % longer than the others'). NaN
    for a run with no probe request, or where the others have too few."""
    return _relative(_windows(runs))


def _windows(runs: list[MeasuredRun]) -> list[Windows]:
    """Every run's windows; two runs or more, since each is compared with the others."""
    if len(runs) < 2:
        raise ValueError("relative speed needs two runs or more")
    return [decode_windows(r) for r in runs]


def applies_to(scenario) -> bool:
    """Whether the check's equation describes the scenario's server: a colocated one. A
    disaggregated decode window also holds the hand-over from the prefill instance, which the
    equation does not price."""
    return not scenario.is_disaggregated


def _relative(windows: list[Windows]) -> list[float]:
    """:func:`relative_speed` of runs already read into their windows."""
    out = []
    for i, w in enumerate(windows):
        others = [v for j, v in enumerate(windows) if j != i]
        if not len(w.seconds) or sum(len(v.seconds) for v in others) < len(FEATURES):
            out.append(float("nan"))
            continue
        predicted = float((w.features @ fit_steps(others)).sum())
        out.append(float(w.seconds.sum()) / predicted - 1.0 if predicted > 0 else float("nan"))
    return out


def speed_table(runs: list[MeasuredRun]) -> str:
    """One line per run: its clock at the first send (where the log has one), how many probe
    requests it has, and :func:`relative_speed`."""
    windows = _windows(runs)
    speeds = _relative(windows)
    clocks = {r.clock_start_s for r in runs if np.isfinite(r.clock_start_s)}
    t0 = min(clocks) if len(clocks) > 1 else float("nan")  # one reading for all: logs re-based at 0
    width = max(len(_name(r)) for r in runs)
    batches = [mean_batch(w) for w in windows]
    inside = _inside(batches)
    lines = [f"{'log':<{width}}  {'logged at':>10}  {'probes':>6}  {'batch':>5}  steps vs the other logs"]
    for i, (run, w, speed) in enumerate(zip(runs, windows, speeds)):
        at = f"+{run.clock_start_s - t0:,.0f} s" if np.isfinite(run.clock_start_s) and np.isfinite(t0) else "-"
        shown = "n/a" if not np.isfinite(speed) else f"{speed * 100:+.1f} %"
        if np.isfinite(speed) and not inside[i]:
            shown += "  (load outside the others': extrapolated)"
        lines.append(f"{_name(run):<{width}}  {at:>10}  {len(w.seconds):>6}  {batches[i]:>5.1f}  {shown}")
    return "\n".join(lines)


def comparable_speeds(runs: list[MeasuredRun]) -> list[float]:
    """:func:`relative_speed`, NaN for a run whose mean batch lies outside the other runs'
    (its figure would extrapolate the others' step model, not compare with it)."""
    windows = _windows(runs)
    inside = _inside([mean_batch(w) for w in windows])
    return [s if ok else float("nan") for s, ok in zip(_relative(windows), inside)]


def _inside(batches: list[float]) -> list[bool]:
    """Whether each run's mean batch lies within the other runs' range."""
    out = []
    for i, b in enumerate(batches):
        others = [x for j, x in enumerate(batches) if j != i and np.isfinite(x)]
        out.append(bool(others) and np.isfinite(b) and min(others) <= b <= max(others))
    return out


def mean_batch(windows: Windows) -> float:
    """The requests decoding beside a probe, averaged over all the probes' steps (NaN: none)."""
    steps = windows.features[:, 0].sum()
    return float(windows.features[:, 1].sum() / steps) if steps > 0 else float("nan")


def _name(run: MeasuredRun) -> str:
    return run.source.replace("\\", "/").rsplit("/", 1)[-1]
