"""Service-level objectives for a capacity search, and the verdict on one run.

Two kinds of target, both in milliseconds:

* a **percentile** target over the whole run, ``<metric>_<stat>_ms=<limit>``
  (``ttft_p99_ms=500``): metric in ttft, tpot, itl, e2el, queue; stat in p50
  (or median), p90, p99, mean; read from the run's summary;
* a **per-request** target, ``ttft_ms``, ``tpot_ms`` or ``e2el_ms``, which a
  run meets when at least a fraction ``attainment`` of its requests meet every
  such target (the summary's ``slo_attainment``, computed from the scenario's
  ``slo:`` section, which the search sets to these targets).

A run *holds* when every target is met **and** the system keeps up (see
:func:`judge`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from simbatch.errors import SimbatchError
from simbatch.report.table import fmt_duration, fmt_num

METRICS = ("ttft", "tpot", "itl", "e2el", "queue")
# Accepted stat spellings -> the key in the summary's {mean, median, p90, p99}.
STATS = {"p50": "median", "median": "median", "p90": "p90", "p99": "p99", "mean": "mean"}
REPORTED_STATS = ("p50", "p90", "p99", "mean")  # the flat record's spellings
REQUEST_TARGETS = ("ttft_ms", "tpot_ms", "e2el_ms")
# A run keeps up when, over the middle of the run, it completes requests at
# least this fraction of the rate they arrive. Not 1.0: the two rates are
# estimated from a finite run and differ by noise even when it keeps up.
KEEP_UP_FRACTION = 0.9
EXAMPLE = "e.g. ttft_p99_ms=500, tpot_mean_ms=50, or ttft_ms=500 with --attainment"


@dataclass(frozen=True)
class PercentileTarget:
    """``stat`` of ``metric`` over the run's completed requests must be <= ``limit_ms``."""

    metric: str
    stat: str  # one of REPORTED_STATS
    limit_ms: float

    @property
    def key(self) -> str:
        """The flat record's column, e.g. ``ttft_p99_ms``."""
        return f"{self.metric}_{self.stat}_ms"


@dataclass(frozen=True)
class SLOSpec:
    """Everything a run must meet; ``request_targets`` are (name, ms) pairs."""

    percentiles: tuple[PercentileTarget, ...] = ()
    request_targets: tuple[tuple[str, float], ...] = ()
    attainment: float | None = None

    def describe(self) -> str:
        """One line for the terminal, e.g. ``ttft_p99_ms <= 500, tpot_p99_ms <= 50``."""
        parts = [f"{t.key} <= {t.limit_ms:g}" for t in self.percentiles]
        if self.attainment is not None:
            each = " and ".join(f"{k} <= {v:g}" for k, v in self.request_targets)
            parts.append(f">= {100 * self.attainment:g} % of requests with {each}")
        return ", ".join(parts + ["keeps up with the offered rate"])


@dataclass
class Verdict:
    """Whether one run holds, and if not, why (one short reason per failed check)."""

    holds: bool
    reasons: list[str] = field(default_factory=list)


def parse_slos(items: list[str], attainment: float | None = None,
               scenario_slo: dict | None = None) -> SLOSpec:
    """An :class:`SLOSpec` from ``--slo KEY=MS`` items and ``--attainment``.

    Per-request targets without ``--attainment`` are an error (they say nothing
    on their own); ``--attainment`` without per-request targets uses the
    scenario's ``slo:`` section (``scenario_slo``).
    """
    percentiles, targets = [], {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        where = f"--slo {item}"
        if not sep or not key:
            raise SimbatchError(where, f"expected KEY=MILLISECONDS, {EXAMPLE}")
        limit = _positive_ms(value, where)
        if key in REQUEST_TARGETS:
            targets[key] = limit
        else:
            percentiles.append(_percentile_target(key, limit, where))
    if attainment is not None:
        if not (0 < attainment <= 1):
            raise SimbatchError("--attainment", f"expected a fraction in (0, 1], got {attainment:g}")
        targets = targets or dict(scenario_slo or {})
        if not targets:
            raise SimbatchError("--attainment", "needs per-request targets: give --slo ttft_ms=500 "
                                                "(or tpot_ms, e2el_ms), or an slo: section in the scenario")
    elif targets:
        name = next(iter(targets))
        raise SimbatchError(f"--slo {name}", "a per-request target needs --attainment (e.g. 0.99); "
                                             f"for a percentile give e.g. {name[:-3]}_p99_ms")
    keys = [t.key for t in percentiles]
    if len(set(keys)) < len(keys):
        raise SimbatchError("--slo", f"a target is given twice: {', '.join(keys)}")
    return SLOSpec(tuple(percentiles), tuple(targets.items()), attainment)


def _percentile_target(key: str, limit: float, where: str) -> PercentileTarget:
    parts = key.split("_")
    if len(parts) != 3 or parts[2] != "ms" or parts[0] not in METRICS or parts[1] not in STATS:
        raise SimbatchError(where, f"unknown SLO key {key!r}; expected <metric>_<stat>_ms with metric in "
                                   f"{', '.join(METRICS)} and stat in {', '.join(STATS)} "
                                   f"({EXAMPLE}), or a per-request {', '.join(REQUEST_TARGETS)}")
    stat = "p50" if parts[1] == "median" else parts[1]
    return PercentileTarget(parts[0], stat, limit)


def _positive_ms(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SimbatchError(where, f"expected a number of milliseconds, got {text.strip()!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise SimbatchError(where, f"expected a positive number of milliseconds, got {text.strip()}")
    return value


def flat_metrics(summary: dict) -> dict[str, float | None]:
    """Every latency statistic of a summary as ``<metric>_<stat>_ms`` (stat in p50, p90, p99, mean)."""
    out = {}
    for metric in METRICS:
        stats = summary.get(f"{metric}_ms") or {}
        for stat in REPORTED_STATS:
            out[f"{metric}_{stat}_ms"] = stats.get(STATS[stat])
    return out


def judge(record: dict, spec: SLOSpec) -> Verdict:
    """Whether one run (its flat record, see ``candidates.run_probe``) holds under ``spec``.

    Besides the targets, the system must keep up: every request completed, and
    over the middle 80 % of requests it completed them at >= 0.9 x the rate
    they arrived (``candidates.middle_rates``). A latency SLO alone is not
    enough on a finite trace: an overloaded queue grows only as long as the
    trace lasts, so its percentiles can still look fine (and a TPOT-only SLO
    never sees the queue at all).
    """
    reasons = []
    n, done = record["num_requests"], record["completed"]
    if done < n:
        reasons.append(f"completed {done} of {n}")
    offered, served = record["middle_offered_rate"], record["middle_throughput"]
    if served < KEEP_UP_FRACTION * offered:
        reasons.append(f"falls behind: served {fmt_num(served)} req/s < {KEEP_UP_FRACTION} x {fmt_num(offered)} "
                       f"offered")
    for t in spec.percentiles:
        value = record.get(t.key)
        # None: no request has this metric (e.g. TPOT when every output is one
        # token), so none can violate it; an empty run already failed above.
        if value is not None and value > t.limit_ms:
            reasons.append(f"{t.metric}_{t.stat} {fmt_duration(value)} > {t.limit_ms:g} ms")
    if spec.attainment is not None:
        got = record.get("slo_attainment") or 0.0
        if got < spec.attainment:
            reasons.append(f"attainment {100 * got:.1f} % < {100 * spec.attainment:g} %")
    return Verdict(not reasons, reasons)
