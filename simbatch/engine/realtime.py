"""A scenario in wall-clock time on a real backend (the measured side of a validation, and
``simbatch calibrate``'s engine-overhead run).

Same :class:`~simbatch.engine.replica.Replica`, same policy classes, same
dispatcher and event log as a simulation (one builder,
:func:`~simbatch.engine.simulation.run_cluster`); only the clock and the
backend differ. The environment is :class:`simpy.rt.RealtimeEnvironment` with
``factor=1`` (one simulated second is one wall second) and ``strict=False``:
arrivals are released at their trace times (the environment sleeps until
then), and a step's timeout of its measured seconds does not sleep again,
because the forward pass already spent them. The backend measures each step
from the environment's present moment (``bind_clock``), so engine overhead
between steps is counted in the step that follows it and the event log's
times are wall times. To replay a trace faster or slower, scale its arrivals
(``workload.rate_scale``) rather than the clock: a clock factor would also
scale the measured step times.
"""

from __future__ import annotations

import simpy.rt

from simbatch.engine.setup import RunResult
from simbatch.engine.simulation import run_cluster
from simbatch.scenario.spec import Scenario
from simbatch.workload import Workload


def run_realtime(scenario: Scenario, workload: Workload, backend) -> RunResult:
    """Run the scenario's policy over ``workload`` on ``backend`` in wall-clock time."""
    env = simpy.rt.RealtimeEnvironment(factor=1.0, strict=False)
    backend.reset()
    backend.bind_clock(lambda: env.real_start + (env.now - env.env_start) * env.factor)
    return run_cluster(scenario, workload=workload, env=env, backend=backend, kv_blocks=backend.pool.num_blocks,
                       on_free=backend.release, before_run=env.sync, fast_forward=False)[0]
