"""Traffic over time: an arrival rate that rises and falls, and arrivals that follow it.

``workload.rate_curve`` (issue 36) gives the rate as a step function of time, from one of:

- ``csv: FILE``: rows ``t_s,rate`` (a header line naming those two columns, then one row per
  interval: the interval starts at ``t_s`` and lasts until the next row's ``t_s``). The last
  interval lasts as long as the one before it, or until ``duration_s`` when that is given
  (a one-row file needs it). Times start at 0 or later and increase; rates are >= 0 req/s.
- ``shape: diurnal``: ``mean_rate`` (req/s over the whole curve), ``peak_to_trough`` (the
  highest rate of a day over its lowest, default 4), ``peak_hour`` (0-24, default 14),
  ``weekend_factor`` (days 6 and 7 of each week, counted from t = 0 as Monday 00:00, run at
  this share of the weekday rate; default 1), ``duration_s`` (default 86,400: one day) and
  ``interval_s`` (the step, default 60 s). The day is a cosine, ``1 + a cos(2 pi (h -
  peak_hour) / 24)`` with ``a = (r - 1) / (r + 1)`` for ratio ``r``, taken at each
  interval's midpoint and scaled so that the curve's mean is ``mean_rate``.

The lengths come from the workload's source and the arrivals from the curve:

- ``arrivals: poisson`` (the default): a non-homogeneous Poisson process with that rate,
  drawn by inversion (a Poisson count of the curve's expected requests, placed by the
  inverse of its cumulative rate) from the scenario's one RNG. A synthetic source draws as
  many lengths as there are arrivals; a trace lends its rows in file order, from the top
  again when the curve asks for more than it holds (noted).
- ``arrivals: warp`` (traces with arrival times): the trace's own arrivals, and so its
  burstiness, time-warped: the trace is repeated end to end until it holds the curve's
  expected count, and each arrival's place in that operational time (its share of the
  whole span) is mapped through the curve's cumulative rate. No random draw.

``rate_scale`` multiplies the curve's rates ("this day at 1.5x") instead of compressing time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simbatch.errors import SimbatchError
from simbatch.files.textfile import read_text
from simbatch.workload.size import check_fits_in_memory
from simbatch.workload.synthetic import check_keys, number, require_mapping

CURVE_KEYS = ("csv", "shape", "duration_s", "interval_s", "mean_rate", "peak_to_trough", "peak_hour",
              "weekend_factor", "arrivals")
SHAPES = ("diurnal",)
ARRIVALS = ("poisson", "warp")
DIURNAL_KEYS = ("mean_rate", "peak_to_trough", "peak_hour", "weekend_factor", "interval_s")
DAY_S, WEEK_DAYS = 86400.0, 7


@dataclass(frozen=True)
class RateCurve:
    """A step function of time: ``rates[i]`` req/s over ``[edges[i], edges[i + 1])``."""

    edges: np.ndarray  # float64, increasing, len(rates) + 1
    rates: np.ndarray  # float64, >= 0
    label: str  # what it is, for notes ("diurnal 4:1, peak at 14:00", "traffic.csv")
    arrivals: str = "poisson"

    @property
    def duration_s(self) -> float:
        """From the curve's first edge to its last."""
        return float(self.edges[-1] - self.edges[0])

    def cumulative(self) -> np.ndarray:
        """Expected requests up to each edge (0 at the first)."""
        return np.concatenate(([0.0], np.cumsum(self.rates * np.diff(self.edges))))

    @property
    def expected(self) -> float:
        """Expected requests over the whole curve."""
        return float(self.cumulative()[-1])

    def scaled(self, k: float) -> RateCurve:
        """The same curve at ``k`` times its rates."""
        return RateCurve(self.edges, self.rates * k, f"{self.label} x{k:g}", self.arrivals)

    def times_at(self, counts: np.ndarray) -> np.ndarray:
        """The times at which the expected count reaches each of ``counts`` (the inverse of the
        cumulative rate, linear within an interval; an interval of rate 0 is skipped)."""
        cum = self.cumulative()
        i = np.clip(np.searchsorted(cum, counts, side="right") - 1, 0, len(self.rates) - 1)
        rate = self.rates[i]
        with np.errstate(divide="ignore", invalid="ignore"):
            offset = np.where(rate > 0, (counts - cum[i]) / rate, 0.0)
        return self.edges[i] + offset


def parse_rate_curve(spec, base_dir: Path, where: str) -> RateCurve:
    """The :class:`RateCurve` a ``rate_curve:`` section describes (module docstring)."""
    spec = require_mapping(spec, where)
    check_keys(spec, CURVE_KEYS, where)
    sources = [k for k in ("csv", "shape") if k in spec]
    if len(sources) != 1:
        raise SimbatchError(where, f"expected exactly one of csv (a t_s,rate file) or shape ({', '.join(SHAPES)})"
                                   f"; got {', '.join(sources) or 'none'}")
    arrivals = spec.get("arrivals", "poisson")
    if arrivals not in ARRIVALS:
        raise SimbatchError(f"{where}.arrivals", f"unknown {arrivals!r}; allowed: {', '.join(ARRIVALS)}")
    if "csv" in spec:
        stray = [k for k in DIURNAL_KEYS if k in spec]
        if stray:
            raise SimbatchError(f"{where}.{stray[0]}", "only for shape: diurnal (a CSV gives its own rates)")
        edges, rates, label = _csv_curve(spec, base_dir, where)
    else:
        edges, rates, label = _diurnal(spec, where)
    curve = RateCurve(edges, rates, label, arrivals)
    if not curve.expected > 0:
        raise SimbatchError(where, "the curve's rates are all 0: no request would arrive")
    return curve


def _csv_curve(spec: dict, base_dir: Path, where: str) -> tuple[np.ndarray, np.ndarray, str]:
    name = spec["csv"]
    if not isinstance(name, str) or not name:
        raise SimbatchError(f"{where}.csv", f"expected a file path, got {name!r}")
    path = Path(name) if Path(name).is_absolute() else base_dir / name
    lines = read_text(path, "rate curve").split("\n")
    header = [c.strip() for c in lines[0].split(",")] if lines else []
    if header != ["t_s", "rate"]:
        raise SimbatchError(f"{path}:1", f"expected the header 't_s,rate', got {lines[0][:60]!r}")
    times, rates = [], []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split(",")
        if len(cells) != 2:
            raise SimbatchError(f"{path}:{lineno}", f"expected 2 fields (t_s,rate), got {len(cells)}")
        t, r = (_cell(c, path, lineno, col) for c, col in zip(cells, ("t_s", "rate")))
        if t < 0 or r < 0:
            raise SimbatchError(f"{path}:{lineno}", f"{'t_s' if t < 0 else 'rate'} must be >= 0")
        if times and t <= times[-1]:
            raise SimbatchError(f"{path}:{lineno}", f"t_s {t:g} is not after the row before ({times[-1]:g})")
        times.append(t)
        rates.append(r)
    if not times:
        raise SimbatchError(str(path), "no rows after the header")
    if "duration_s" in spec:
        end = number(spec, "duration_s", where, positive=True)
        if end <= times[-1]:
            raise SimbatchError(f"{where}.duration_s", f"{end:g} s does not reach past the last row's "
                                                      f"t_s ({times[-1]:g})")
    elif len(times) == 1:
        raise SimbatchError(f"{where}.duration_s", f"required: {path} has one row, so its interval has no end")
    else:
        end = times[-1] + (times[-1] - times[-2])  # the last interval as long as the one before
    return np.array([*times, end]), np.array(rates), path.name


def _cell(text: str, path: Path, lineno: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SimbatchError(f"{path}:{lineno}", f"{column}: expected a number, got {text.strip()!r}") from None
    if not math.isfinite(value):
        raise SimbatchError(f"{path}:{lineno}", f"{column}: expected a finite number, got {text.strip()!r}")
    return value


def _diurnal(spec: dict, where: str) -> tuple[np.ndarray, np.ndarray, str]:
    if spec["shape"] not in SHAPES:
        raise SimbatchError(f"{where}.shape", f"unknown {spec['shape']!r}; allowed: {', '.join(SHAPES)}")
    mean = number(spec, "mean_rate", where, positive=True)
    ratio = number(spec, "peak_to_trough", where, default=4.0, minimum=1)
    peak = number(spec, "peak_hour", where, default=14.0, minimum=0)
    if peak > 24:
        raise SimbatchError(f"{where}.peak_hour", f"expected an hour of the day, 0 to 24, got {peak:g}")
    weekend = number(spec, "weekend_factor", where, default=1.0, positive=True)
    duration = number(spec, "duration_s", where, default=DAY_S, positive=True)
    step = number(spec, "interval_s", where, default=60.0, positive=True)
    k = math.ceil(duration / step)
    check_fits_in_memory(k, f"{where}.interval_s")
    edges = np.minimum(np.arange(k + 1) * step, duration)
    mid = (edges[:-1] + edges[1:]) / 2
    a = (ratio - 1) / (ratio + 1)
    shape = 1 + a * np.cos(2 * math.pi * (mid / 3600.0 - peak) / 24)
    day = (mid // DAY_S).astype(np.int64) % WEEK_DAYS
    shape = np.where(day >= 5, shape * weekend, shape)
    widths = np.diff(edges)
    rates = shape * (mean * duration / float(np.sum(shape * widths)))
    label = f"diurnal {ratio:g}:1, peak at {peak:g} h, mean {mean:g} req/s"
    return edges, rates, label


def poisson_arrivals(curve: RateCurve, rng: np.random.Generator, where: str) -> np.ndarray:
    """Sorted arrival times of a non-homogeneous Poisson process with the curve's rate."""
    n = int(rng.poisson(curve.expected))
    check_fits_in_memory(n, where)
    counts = np.sort(rng.uniform(0.0, curve.expected, n))
    return curve.times_at(counts)


def warp_arrivals(curve: RateCurve, arrival_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The trace's arrivals repeated until they hold the curve's expected count, then
    time-warped onto the curve (module docstring): (times, the trace row of each)."""
    m = len(arrival_s)
    n = max(1, round(curve.expected))
    rows = np.arange(n) % m
    span = float(arrival_s[-1] - arrival_s[0]) if m > 1 else 0.0
    gap = span / (m - 1) if m > 1 else 1.0  # a copy starts one mean gap after the last ended
    period = span + gap
    operational = (arrival_s[rows] - arrival_s[0]) + (np.arange(n) // m) * period
    total = operational[-1] + gap  # the repeated trace's whole span, to the next copy's start
    return curve.times_at(operational / total * curve.expected), rows
