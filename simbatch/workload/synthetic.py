"""Synthetic workloads: arrival processes and length distributions from one RNG.

Every spec is a small dict with a ``kind`` and that kind's parameters; each is
validated with a dotted ``where`` (``"chat.yaml: workload.synthetic.prompt"``)
so a mistake is reported as ``<where>.<field>: <cause>``. All draws come from
the single ``numpy.random.Generator`` passed in, in a fixed order (arrivals,
then prompt lengths, then output lengths), so one seed fixes the workload.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from simbatch.core.params import MAX_INTEGER
from simbatch.errors import SimbatchError
from simbatch.workload.request import Workload
from simbatch.workload.size import check_fits_in_memory

# kind -> (required params, optional params)
ARRIVAL_KINDS = {
    "poisson": (("rate",), ()),
    "gamma": (("rate", "cv"), ()),
    "constant": (("rate",), ()),
    "burst": ((), ()),
}
LENGTH_KINDS = {
    "constant": (("value",), ()),
    "uniform": (("low", "high"), ()),
    "lognormal": (("median", "sigma"), ("min", "max")),
    "empirical": ((), ("values", "weights", "trace", "column", "format", "columns")),
}
SYNTHETIC_KEYS = ("num_requests", "arrival", "prompt", "output")


def require_mapping(spec, where: str) -> dict:
    """``spec`` itself if it is a dict, else a SimbatchError at ``where``."""
    if not isinstance(spec, dict):
        raise SimbatchError(where, f"expected a mapping, got {spec!r}")
    return spec


def check_keys(spec: dict, allowed, where: str) -> None:
    """Reject any key of ``spec`` not in ``allowed``, naming it and the allowed ones."""
    for key in spec:
        if key not in allowed:
            raise SimbatchError(f"{where}.{key}", f"unknown key; allowed: {', '.join(allowed)}")


def number(spec: dict, key: str, where: str, *, default=None, **rules) -> float:
    """``spec[key]`` checked by :func:`check_number` (``default`` when absent, if given)."""
    if key not in spec:
        if default is not None:
            return default
        raise SimbatchError(f"{where}.{key}", "missing: a number is required")
    return check_number(spec[key], f"{where}.{key}", **rules)


def check_number(v, where: str, *, minimum: float | None = None, positive: bool = False,
                 integer: bool = False) -> float:
    """``v`` as a finite number (an int when ``integer``), else a SimbatchError at ``where``."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if ok and integer:
        # Beyond 2**53 a float no longer holds every integer, and the arrays are int64.
        ok = float(v).is_integer() and abs(v) <= MAX_INTEGER
    what = "an integer" if integer else "a number"
    if ok and positive and v <= 0:
        ok, what = False, f"a positive {what.split()[-1]}"
    if ok and minimum is not None and v < minimum:
        ok, what = False, f"{what} >= {minimum:g}"
    if not ok:
        raise SimbatchError(where, f"expected {what}, got {v!r}")
    return int(v) if integer else float(v)


def _kind(spec, kinds: dict, where: str) -> str:
    """Validate ``spec``'s kind and keys against ``kinds``; return the kind."""
    spec = require_mapping(spec, where)
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in kinds:
        got = "missing" if kind is None else f"unknown kind {kind!r}"
        raise SimbatchError(f"{where}.kind", f"{got}; allowed: {', '.join(kinds)}")
    required, optional = kinds[kind]
    fields = ("kind", *required, *optional)
    others = {k for r, o in kinds.values() for k in (*r, *o)}  # every kind's fields
    stray = [k for k in spec if k not in fields]
    missing = [k for k in required if k not in spec]
    if any(k not in others for k in stray):  # not another kind's field: a typo, named with its line
        check_keys(spec, fields, where)
    if stray or missing:  # named at the first field left over (its line), else the first missing
        raise SimbatchError(f"{where}.{(stray or missing)[0]}",
                            kind_fields_message(spec, kind, kinds, stray, missing, where))
    return kind


def kind_fields_message(spec: dict, kind: str, kinds: dict, stray: list, missing: list, where: str) -> str:
    """Why ``spec``'s fields do not fit its ``kind`` (fields of another kind left behind, as when
    ``--set ...arrival.kind=burst`` switches a poisson arrival and leaves its ``rate``, or the
    kind's own fields missing), what the kind takes, and the ``--set`` that gives it."""
    required, optional = kinds[kind]
    if required:
        takes = f"needs {_and(required)}" + (f" (optional: {', '.join(optional)})" if optional else "")
    else:
        takes = f"takes {_and(optional)}" if optional else "takes no field besides kind"
    said = [f"kind {kind!r} {takes}"]
    if stray:
        said.append(f"{_and(stray)} {'belongs' if len(stray) == 1 else 'belong'} to other kinds")
    if missing:
        said.append(f"{_and(missing)} {'is' if len(missing) == 1 else 'are'} missing")
    field = where.rpartition(": ")[2]  # the dotted field, without the scenario file before it
    if stray:  # a --set cannot remove a field: the whole spec, as one value, replaces the old one
        kept = {k: v for k, v in spec.items() if k in (*required, *optional)}
        values = [f"kind: {kind}"] + [f"{k}: {_flow(kept[k]) if k in kept else '<number>'}"
                                      for k in (*required, *[o for o in optional if o in kept])]
        if not required and optional and not kept:
            values.append(f"{optional[0]}: ...")
        fix = f"give the whole spec at once: --set '{field}={{{', '.join(values)}}}'"
    else:
        fix = "add " + " ".join(f"--set {field}.{k}=<number>" for k in missing)
    return "; ".join(said) + "; " + fix


def _and(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _flow(value) -> str:
    """``value`` as YAML flow text (JSON is YAML), for a --set line."""
    import json

    return json.dumps(value)


def sample_arrivals(spec: dict, n: int, rng: np.random.Generator, where: str) -> np.ndarray:
    """``n`` arrival times (s) for an arrival-process spec.

    Arrivals are the cumulative sum of ``n - 1`` inter-arrival gaps starting at
    0.0, so the first request always arrives at t = 0 (as in trace replays) and
    the mean rate over the span is ``rate``. ``gamma`` gaps have shape
    ``1/cv**2`` (cv = 1 is Poisson; larger is burstier); ``burst`` puts every
    request at t = 0 (an offline batch job).
    """
    kind = _kind(spec, ARRIVAL_KINDS, where)
    if kind == "burst":
        return np.zeros(max(n, 0))
    rate = number(spec, "rate", where, positive=True)
    shape = 1.0 / number(spec, "cv", where, positive=True) ** 2 if kind == "gamma" else 1.0
    if n <= 1:
        return np.zeros(max(n, 0))
    if kind == "poisson":
        gaps = rng.exponential(1.0 / rate, n - 1)
    elif kind == "gamma":
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n - 1)
    else:  # constant
        gaps = np.full(n - 1, 1.0 / rate)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def sample_lengths(spec: dict, n: int, rng: np.random.Generator, where: str,
                   base_dir: Path | str = ".") -> np.ndarray:
    """``n`` token counts (int64, all >= 1) for a length-distribution spec."""
    kind = _kind(spec, LENGTH_KINDS, where)
    if kind == "constant":
        return np.full(n, number(spec, "value", where, integer=True, minimum=1), dtype=np.int64)
    if kind == "uniform":
        low = number(spec, "low", where, integer=True, minimum=1)
        high = number(spec, "high", where, integer=True, minimum=low)
        return rng.integers(low, high, size=n, endpoint=True, dtype=np.int64)
    if kind == "lognormal":
        return _lognormal(spec, n, rng, where)
    values, weights = _empirical_values(spec, where, Path(base_dir))
    return rng.choice(values, size=n, p=weights).astype(np.int64)


def _lognormal(spec: dict, n: int, rng: np.random.Generator, where: str) -> np.ndarray:
    median = number(spec, "median", where, positive=True)
    sigma = number(spec, "sigma", where, minimum=0)
    low = number(spec, "min", where, default=1, integer=True, minimum=1)
    high = number(spec, "max", where, default=np.iinfo(np.int32).max, integer=True, minimum=low)
    # Round to whole tokens, then clip: the clip bounds are the trace's observed
    # min/max when the spec was fitted, so the tails stay physically plausible.
    draws = np.rint(median * np.exp(sigma * rng.standard_normal(n)))
    return np.clip(draws, low, high).astype(np.int64)


def _empirical_values(spec: dict, where: str, base_dir: Path):
    """The values (and probabilities, or None) an empirical spec resamples from."""
    if ("values" in spec) == ("trace" in spec):
        raise SimbatchError(where, "empirical lengths need exactly one of 'values' or 'trace'")
    if "trace" in spec:
        if "weights" in spec:
            raise SimbatchError(f"{where}.weights", "only allowed with 'values'")
        return _trace_column(spec, where, base_dir), None
    for key in ("column", "format", "columns"):
        if key in spec:
            raise SimbatchError(f"{where}.{key}", "only allowed with 'trace'")
    values = spec["values"]
    if not isinstance(values, list) or not values:
        raise SimbatchError(f"{where}.values", f"expected a non-empty list of integers, got {values!r}")
    ints = np.array([check_number(v, f"{where}.values[{i}]", integer=True, minimum=1)
                     for i, v in enumerate(values)], dtype=np.int64)
    if "weights" not in spec:
        return ints, None
    weights = spec["weights"]
    if not isinstance(weights, list) or len(weights) != len(values):
        raise SimbatchError(f"{where}.weights", f"expected a list of {len(values)} numbers (one per value)")
    w = np.array([check_number(x, f"{where}.weights[{i}]", minimum=0)
                  for i, x in enumerate(weights)])
    if w.sum() <= 0:
        raise SimbatchError(f"{where}.weights", "weights must not all be zero")
    return ints, w / w.sum()


def _trace_column(spec: dict, where: str, base_dir: Path) -> np.ndarray:
    from simbatch.workload.readers import read_trace  # late: readers is the heavier module
    from simbatch.workload.tracepath import trace_path

    column = spec.get("column")
    if column not in ("prompt", "output"):
        raise SimbatchError(f"{where}.column", f"expected 'prompt' or 'output', got {column!r}")
    path = trace_path(base_dir, str(spec["trace"]), where)
    w = read_trace(path, spec.get("format"), spec.get("columns"), where)
    return w.prompt_tokens if column == "prompt" else w.output_tokens


def synthetic_workload(spec: dict, rng: np.random.Generator, where: str,
                       base_dir: Path | str = ".", arrival_s: np.ndarray | None = None) -> Workload:
    """A workload from ``{num_requests, arrival: {...}, prompt: {...}, output: {...}}``; with
    ``arrival_s`` (a rate curve's arrivals), from ``{prompt, output}`` at those times."""
    check_keys(require_mapping(spec, where), SYNTHETIC_KEYS, where)
    if arrival_s is not None:
        for key in ("num_requests", "arrival"):
            if key in spec:
                raise SimbatchError(f"{where}.{key}", "not with workload.rate_curve, which gives the arrivals")
    else:
        n = number(spec, "num_requests", where, integer=True, minimum=1)
        check_fits_in_memory(n, f"{where}.num_requests")
    for key in ("prompt", "output") if arrival_s is not None else ("arrival", "prompt", "output"):
        if key not in spec:
            raise SimbatchError(f"{where}.{key}", "missing: a {kind: ...} spec is required")
    if arrival_s is None:
        arrival = sample_arrivals(spec["arrival"], n, rng, f"{where}.arrival")
    else:
        arrival, n = arrival_s, len(arrival_s)
    prompt = sample_lengths(spec["prompt"], n, rng, f"{where}.prompt", base_dir)
    output = sample_lengths(spec["output"], n, rng, f"{where}.output", base_dir)
    return Workload(arrival, prompt, output, source="synthetic")
