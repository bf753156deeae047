"""KV capacity of a validation run: what the real backend can hold, used by both sides.

The simulator sizes the cache from the scenario's GPU preset
(:func:`~simbatch.engine.setup.kv_blocks_per_replica`). The real backend
runs on whatever device is here, in its own dtype (float32 on CPU), so a
validation takes the smallest of:

1. the preset's capacity (what the simulator would use: the scenario's intent);
2. what fits on the device: free memory x ``gpu_memory_utilization`` on a GPU
   (measured after the weights are loaded), half of the available RAM on CPU
   (other processes share it), divided by the real bytes of one block; less,
   first, room for the largest decode gather (K and V of every layer-step's
   decode rows padded to the longest request, up to 256 rows): the backend
   copies it out of the pool each layer;
3. enough for the whole workload at once: every request reserving the
   workload's longest prompt + longest output (the most a padded batch can
   reserve per row). This one never changes a scheduling decision; it only
   keeps the preallocated pool from being absurdly large (a tiny model on an
   A100 preset would otherwise ask for millions of blocks).

The predicted run uses the same number, so any KV pressure (preemption,
cut batches) is the same on both sides.
"""

from __future__ import annotations

from simbatch.catalog.hardware import GPUSpec
from simbatch.catalog.models import ModelSpec
from simbatch.engine.setup import kv_blocks_per_replica
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import Scenario
from simbatch.workload import Workload

CPU_MEMORY_SHARE = 0.5


def block_bytes(model: ModelSpec, block_size: int, dtype_bytes: int) -> int:
    """Bytes of one KV block (all layers, K and V) in the backend's dtype."""
    return block_size * model.num_layers * 2 * model.kv_size * dtype_bytes


def workload_blocks(workload: Workload, block_size: int) -> int:
    """Blocks that hold every request at once with the largest per-row reservation."""
    if not len(workload):
        return 1
    longest = int(workload.prompt_tokens.max()) + int(workload.output_tokens.max())
    return len(workload) * -(-longest // block_size)


def validation_blocks(scenario: Scenario, model: ModelSpec, gpu: GPUSpec, workload: Workload,
                      device_type: str, free_bytes: int, dtype_bytes: int) -> tuple[int, str]:
    """The run's KV blocks and a note saying which limit set them (module docstring)."""
    bs = scenario.kv_cache.block_size
    preset = kv_blocks_per_replica(scenario, model, gpu)
    share = scenario.kv_cache.gpu_memory_utilization if device_type == "cuda" else CPU_MEMORY_SHARE
    longest = int((workload.prompt_tokens + workload.output_tokens).max()) if len(workload) else 0
    gather = 2 * min(len(workload), 256) * longest * model.kv_size * dtype_bytes
    device = int(max(0, free_bytes - 2 * gather) * share // block_bytes(model, bs, dtype_bytes))
    enough = workload_blocks(workload, bs)
    blocks = min(preset, device, enough)
    if blocks < 1:
        raise SimbatchError(scenario.where("model"), f"no room for a KV cache of {model.name} on this "
                                                     f"{device_type} ({free_bytes / 2**30:.1f} GiB free)")
    limit = {preset: f"the {gpu.name} preset", device: f"{device_type} memory", enough: "the whole workload"}
    return blocks, f"KV cache: {blocks} blocks of {bs} tokens (set by {limit[blocks]})"
