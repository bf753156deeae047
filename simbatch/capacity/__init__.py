"""Capacity search: the highest arrival rate each configuration serves within SLOs, and the
fewest replicas (and dollars per hour) for a target rate. Method and choices: ``docs/capacity.md``.

>>> from simbatch import load_scenario
>>> from simbatch.capacity import expand, find_capacity, parse_slos
>>> sc = load_scenario("chat", ["workload.synthetic.num_requests=100"])
>>> res = find_capacity(sc, parse_slos(["ttft_p99_ms=1000"]), expand(sc, ["continuous"], None, None, None, None),
...                     seeds=[0], tolerance=0.25)
>>> res.boundaries[0].lo > 1   # one A100 serves more than the scenario's 2.5 req/s
True
"""

from simbatch.capacity.candidates import (
    Candidate,
    candidate_scenario,
    default_seeds,
    expand,
)
from simbatch.capacity.plan import (
    Boundary,
    CapacityResult,
    Sizing,
    find_capacity,
)
from simbatch.catalog.prices import GPU_HOUR_USD, price_table
from simbatch.capacity.report import (
    capacity_table,
    explain_boundary,
    explain_sizing,
    format_table,
    write_capacity,
)
from simbatch.capacity.search import Bracket, drive, drive_concurrently, fewest_search, rate_search
from simbatch.capacity.slo import SLOSpec, judge, parse_slos

__all__ = [
    "GPU_HOUR_USD", "Boundary", "Bracket", "Candidate", "CapacityResult", "SLOSpec", "Sizing",
    "candidate_scenario", "capacity_table", "default_seeds", "drive", "drive_concurrently", "expand",
    "explain_boundary", "explain_sizing", "fewest_search", "find_capacity", "format_table", "judge",
    "parse_slos", "price_table", "rate_search", "write_capacity",
]
