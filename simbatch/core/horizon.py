"""The horizon of simulated time, which every figure that sets a step's seconds is held to.

Simulated time is a float of seconds: at t its resolution is about t x 2.2e-16, so beyond
:data:`MAX_TIME_S` (1e9 s, 32 years) a microsecond-scale step or gap would be rounded away
and latencies read 0. Arrivals are held within it (``simbatch.workload.build.check_time_span``).
Steps are held within it at load, each kind of figure where it is checked:

- GPU figures (``simbatch.catalog.hardware``): no rate below the slowest real GPU's / 1000, no
  latency or memory above the largest real one's x 1000;
- engine terms (``simbatch.catalog.servers``): no fixed cost above :data:`MAX_STEP_S`;
- model shapes (``simbatch.catalog.models``): no size a real model does not come near;
- cluster fields (``simbatch.scenario.cluster.ClusterParams``): no more micro-batches than sequences
  an engine steps, no more redundant experts than GPUs to hold them.

This module imports nothing, so any of them can read it.
"""

from __future__ import annotations

MAX_TIME_S = 1e9
# The longest fixed cost one figure may add to a step (or to a request's latency): a million
# such steps fill the horizon, and real steps take milliseconds to seconds.
MAX_STEP_S = MAX_TIME_S / 1e6
