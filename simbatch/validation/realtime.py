"""The measured side of a validation: the scenario in wall-clock time on the torch backend.

Same :class:`~simbatch.engine.replica.Replica`, same policy classes, same
dispatcher and event log as a simulation; only the clock and the backend
differ. The environment is :class:`simpy.rt.RealtimeEnvironment` with
``factor=1`` (one simulated second is one wall second) and ``strict=False``:
arrivals are released at their trace times (the environment sleeps until
then), and a step's timeout of its measured seconds does not sleep again,
because the forward pass already spent them. The backend measures each step
from the environment's present moment (:meth:`TorchBackend.bind_clock`), so
engine overhead between steps is counted in the step that follows it and the
event log's times are wall times. To replay a trace faster or slower, scale
its arrivals (``workload.rate_scale``) rather than the clock: a clock factor
would also scale the measured step times.
"""

from __future__ import annotations

import simpy.rt

from simbatch.engine.setup import RunResult, check_requests_fit
from simbatch.errors import SimbatchError
from simbatch.hardware import GPUSpec
from simbatch.models import ModelSpec
from simbatch.scenario import Scenario
from simbatch.validation.capacity import validation_blocks
from simbatch.validation.engine import run_engine
from simbatch.workload import Workload


def check_validatable(scenario: Scenario, workload: Workload, model: ModelSpec) -> None:
    """One replica, one GPU, and every request within the model's context window."""
    if scenario.cluster.replicas != 1 or scenario.cluster.tensor_parallel != 1:
        raise SimbatchError(scenario.where("cluster"), "validate runs one replica on one device: set "
                                                       "cluster.replicas=1 and cluster.tensor_parallel=1")
    if not len(workload):
        raise SimbatchError(scenario.where("workload"), "no requests to run")
    longest = int((workload.prompt_tokens + workload.output_tokens).max())
    if longest > model.max_context:
        raise SimbatchError(scenario.where("workload"),
                            f"a request of {longest} tokens exceeds {model.name}'s {model.max_context}-token "
                            f"context window; set workload.max_total_tokens: {model.max_context}")


def build_torch_backend(scenario: Scenario, workload: Workload, model: ModelSpec, gpu: GPUSpec,
                        device: str, dtype: str | None, threads: int | None, seed: int):
    """A warmed-up :class:`TorchBackend` with the validation's KV capacity, and a note on that capacity."""
    import torch

    from simbatch.backends.torch_backend import TorchBackend
    from simbatch.backends.device import DTYPES, available_memory, default_dtype, resolve_device

    dev = resolve_device(device)
    dtype = dtype or default_dtype(dev.type)
    element = torch.empty((), dtype=DTYPES[dtype]).element_size()
    free = available_memory(dev) - model.num_params * element  # what is left once the weights are in
    blocks, note = validation_blocks(scenario, model, gpu, workload, dev.type, free, element)
    check_requests_fit(workload, scenario, blocks, model)
    backend = TorchBackend(model, num_blocks=blocks, block_size=scenario.kv_cache.block_size, device=device,
                           dtype=dtype, seed=seed, threads=threads)
    backend.warmup()
    return backend, note


def run_realtime(scenario: Scenario, workload: Workload, model: ModelSpec, gpu: GPUSpec, backend) -> RunResult:
    """Run the scenario's policy over ``workload`` on ``backend`` in wall-clock time."""
    env = simpy.rt.RealtimeEnvironment(factor=1.0, strict=False)
    backend.reset()
    backend.bind_clock(lambda: env.real_start + (env.now - env.env_start) * env.factor)
    return run_engine(scenario, workload, model, gpu, backend, env, backend.pool.num_blocks,
                      fast_forward=False, on_free=backend.release, before_run=env.sync)
