"""Does the fast path keep its promise on a scenario? Run it both ways and compare the logs.

For policy writers (``simbatch run --check-fast-path``, docs/policies.md "Writing a
policy") and the tests: a policy that declares ``fast_path = True`` must give the
step-by-step engine's results exactly, step for step and request for request.
"""

from __future__ import annotations

import numpy as np

from simbatch.engine.simulation import simulate

REQUEST_FIELDS = ("first_scheduled_s", "first_token_s", "finish_s", "num_emitted", "num_preemptions")


def per_replica_steps(log) -> dict[str, np.ndarray]:
    """The step table ordered by replica, then start (replicas may interleave differently)."""
    table = log.step_table()
    order = np.lexsort((table["start_s"], table["replica"]))
    return {k: v[order] for k, v in table.items()}


def token_runs(log) -> list[tuple]:
    """Every token run (request, replica, first step, last step), sorted."""
    return sorted(zip(log.run_request, log.run_replica, log.run_first, log.run_last))


def fast_path_difference(scenario) -> str | None:
    """None when the fast path and the step-by-step engine log the same run, else the first
    difference found, in words."""
    fast, slow = simulate(scenario), simulate(scenario, fast_forward=False)
    a, b = per_replica_steps(fast.log), per_replica_steps(slow.log)
    if len(a["start_s"]) != len(b["start_s"]):
        return f"{len(a['start_s'])} steps on the fast path, {len(b['start_s'])} step by step"
    for col in a:
        bad = np.flatnonzero(a[col] != b[col])
        if bad.size:
            i = int(bad[0])
            return (f"replica {int(b['replica'][i])}, step starting at {b['start_s'][i]:.6f} s: {col} is "
                    f"{a[col][i]} on the fast path, {b[col][i]} step by step")
    for name in REQUEST_FIELDS:
        x, y = getattr(fast.log, name), getattr(slow.log, name)
        bad = np.flatnonzero(~((x == y) | (np.isnan(x) & np.isnan(y)) if x.dtype.kind == "f" else x == y))
        if bad.size:
            i = int(bad[0])
            return f"request {i}: {name} is {x[i]} on the fast path, {y[i]} step by step"
    if token_runs(fast.log) != token_runs(slow.log):
        return "the requests' token runs differ"
    if fast.log.control_rows != slow.log.control_rows:
        return "the controllers' actions differ"
    return None
