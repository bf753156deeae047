"""One engine run with a given SimPy environment and backend, shared by both sides of a validation.

The measured side passes a wall-clock environment and the torch backend; the
predicted side a plain environment and the calibrated cost model. Both build
the run from the simulator's own pieces (workload, :func:`parse_policy`,
:class:`~simbatch.kvcache.KVCache`, :class:`~simbatch.engine.replica.Replica`,
the dispatcher, the event log) exactly as :func:`simbatch.engine.simulation.simulate`
does, so the two sides differ only in the clock and the backend, and they get
the same KV capacity (the measured side's; see :mod:`simbatch.validation.capacity`).
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from simbatch.engine.dispatcher import dispatch
from simbatch.engine.replica import Replica
from simbatch.engine.setup import RunResult, flush_unfinished
from simbatch.eventlog import EventLog
from simbatch.hardware import GPUSpec
from simbatch.kvcache import KVCache
from simbatch.models import ModelSpec
from simbatch.policies import parse_policy
from simbatch.scenario import Scenario
from simbatch.sequence import Sequence
from simbatch.workload import Workload


class TrackingKVCache(KVCache):
    """The policies' block accounting, telling a real backend when a request's blocks are freed
    (it finished, or was preempted for recompute), so the backend frees its real cache too."""

    def __init__(self, num_blocks: int, block_size: int, mode: str, reserve: str, max_tokens: int,
                 on_free: Callable[[int], None]):
        super().__init__(num_blocks, block_size, mode, reserve, max_tokens)
        self.on_free = on_free

    def free(self, seq: Sequence) -> None:
        super().free(seq)
        self.on_free(seq.id)


def run_engine(scenario: Scenario, workload: Workload, model: ModelSpec, gpu: GPUSpec, backend,
               env: simpy.Environment, blocks: int, *, fast_forward: bool,
               on_free: Callable[[int], None] | None = None,
               before_run: Callable[[], None] | None = None) -> RunResult:
    """Run ``workload`` under the scenario's policy on one replica; return the event log.

    ``on_free`` (a real backend's ``release``) hears every freed request;
    ``before_run`` is called right before the clock starts (a wall-clock run
    synchronises its environment there).
    """
    policy_cls, params = parse_policy(scenario.data["policy"], scenario.where("policy"))
    log = EventLog(len(workload), 1)
    for note in workload.notes:
        log.note(note)
    seqs: list[Sequence | None] = [None] * len(workload)
    kv = scenario.kv_cache
    kv_args = (blocks, kv.block_size, kv.mode, kv.reserve, model.max_context)
    kv = TrackingKVCache(*kv_args, on_free) if on_free else KVCache(*kv_args)
    replica = Replica(env, 0, policy_cls(params, kv, note=log.note), backend, log, seqs, fast_forward)
    env.process(dispatch(env, workload, [replica], seqs, log))
    if before_run is not None:
        before_run()
    env.run()
    flush_unfinished(seqs, [replica], log)
    return RunResult(scenario, workload, log, model, gpu, backend, params)
