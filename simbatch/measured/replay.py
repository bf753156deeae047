"""A scenario replayed on a measured run's workload: its exact arrivals and lengths."""

from __future__ import annotations

import copy

from simbatch.measured.run import MeasuredRun
from simbatch.scenario.spec import Scenario, from_dict


def replay_scenario(scenario: Scenario, measured: MeasuredRun, engine: dict | None = None) -> Scenario:
    """``scenario`` with its workload replaced by ``measured``'s requests, inline and in
    arrival order (every other setting kept: model, hardware, cluster or disaggregation,
    policy, engine). The workload's options (``max_total_tokens``, ``rate_scale``, windows)
    go too: the replay is the log's workload exactly, so a request that cannot fit is an
    error rather than silently clipped. ``engine``, when given, replaces the scenario's
    ``engine:`` section (what calibration varies)."""
    data = copy.deepcopy(scenario.data)
    data["workload"] = {"requests": [
        {"prompt": int(p), "output": int(o), "arrival_s": float(a)}
        for a, p, o in zip(measured.arrival_s, measured.prompt_tokens, measured.output_tokens)]}
    if engine is not None:
        data["engine"] = engine
    return from_dict(data, scenario.source, scenario.base_dir)
