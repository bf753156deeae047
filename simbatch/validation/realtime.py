"""The measured side of a validation: checks, and the torch backend sized for the run.

The run itself is :func:`simbatch.engine.realtime.run_realtime` (the
scenario in wall-clock time on that backend, built by the same
:func:`~simbatch.engine.simulation.run_cluster` as a simulation).
"""

from __future__ import annotations

from simbatch.catalog.hardware import GPUSpec
from simbatch.catalog.models import ModelSpec
from simbatch.engine.setup import check_requests_fit
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import Scenario
from simbatch.validation.capacity import validation_blocks
from simbatch.workload import Workload


def check_validatable(scenario: Scenario, workload: Workload, model: ModelSpec) -> None:
    """One replica, one GPU, no prefix cache, and every request within the model's context window."""
    if scenario.is_disaggregated:
        raise SimbatchError(scenario.where("disaggregation"), "validate runs one replica on one device: set "
                                                              "disaggregation.enabled=false")
    if model.special_features:
        raise SimbatchError(scenario.where("model"), f"validate runs dense 16-bit Llama-style models; {model.name} "
                                                     f"has {' and '.join(model.special_features)}")
    if scenario.speculative is not None:
        raise SimbatchError(scenario.where("speculative"), "validate cannot run it: the torch backend has no "
                                                           "drafter and verifies no drafts; set "
                                                           "speculative.enabled=false")
    if scenario.kv_cache.prefix_caching:
        raise SimbatchError(scenario.where("kv_cache.prefix_caching"),
                            "validate cannot run it: the torch backend keeps each request's KV apart and "
                            "shares no cached prefix blocks; set kv_cache.prefix_caching=false")
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

    from simbatch.backends.device import DTYPES, available_memory, default_dtype, resolve_device
    from simbatch.backends.torch_backend import TorchBackend

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
