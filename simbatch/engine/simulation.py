"""One simulated run: scenario -> workload -> replicas (policy + backend) -> event log."""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from simbatch.costmodel import build_cost_model
from simbatch.errors import SimbatchError
from simbatch.eventlog import EventLog
from simbatch.engine.dispatcher import dispatch
from simbatch.engine.replica import Replica
from simbatch.hardware import GPUSpec, get_gpu
from simbatch.kvcache import KVCache, kv_capacity_blocks
from simbatch.models import ModelSpec, get_model
from simbatch.policies import parse_policy
from simbatch.scenario import Scenario
from simbatch.sequence import FINISHED, Sequence
from simbatch.workload import Workload, build_workload


@dataclass
class RunResult:
    """Everything a run produced, before metrics."""

    scenario: Scenario
    workload: Workload
    log: EventLog
    model: ModelSpec
    gpu: GPUSpec
    cost_model: object
    policy_params: object


def kv_blocks_per_replica(scenario: Scenario, model: ModelSpec, gpu: GPUSpec) -> int:
    """KV capacity of one replica; a model that leaves no room for KV is a user error."""
    kv, tp = scenario.kv_cache, scenario.cluster.tensor_parallel
    blocks = kv_capacity_blocks(
        gpu_memory_bytes=gpu.memory_bytes, weight_bytes=model.weight_bytes,
        kv_bytes_per_token=model.kv_bytes_per_token, tensor_parallel=tp,
        block_size=kv.block_size, gpu_memory_utilization=kv.gpu_memory_utilization)
    if blocks < 1:
        raise SimbatchError(
            scenario.where("hardware"),
            f"{model.name} weights ({model.weight_bytes / 2**30:.1f} GiB over {tp} GPU(s)) leave no room "
            f"for a KV cache in {gpu.name} x gpu_memory_utilization {kv.gpu_memory_utilization}; "
            f"raise cluster.tensor_parallel or pick a larger GPU")
    return blocks


def check_requests_fit(workload: Workload, scenario: Scenario, blocks: int, model_name: str) -> None:
    """A request whose prompt + output can never fit in one replica's KV cache is a user error."""
    bs = scenario.kv_cache.block_size
    total = workload.prompt_tokens + workload.output_tokens
    need = -(-total // bs)
    bad = need > blocks
    if bad.any():
        i = int(bad.argmax())
        raise SimbatchError(
            scenario.where("workload"),
            f"request {i} (prompt {int(workload.prompt_tokens[i])} + output "
            f"{int(workload.output_tokens[i])} tokens) needs {int(need[i])} KV blocks, but one replica of "
            f"{model_name} holds {blocks} ({int(bad.sum())} request(s) too large); "
            f"set workload.max_total_tokens or use more memory")


def build_backend(scenario: Scenario) -> tuple[ModelSpec, GPUSpec, object]:
    """The scenario's model, GPU and cost model (checked; errors name the scenario's fields)."""
    d = scenario.data
    model = get_model(d["model"], scenario.where("model"))
    gpu = get_gpu(d["hardware"], scenario.where("hardware"))
    backend = build_cost_model(d.get("cost_model"), model, gpu, scenario.cluster.tensor_parallel,
                               scenario.where("cost_model"), base_dir=scenario.base_dir)
    return model, gpu, backend


def simulate(scenario: Scenario, fast_forward: bool = True) -> RunResult:
    """Run ``scenario`` to completion in simulated time and return its event log.

    ``fast_forward=False`` takes every step through the policy (the reference
    the fast path is tested against; results are identical).
    """
    d = scenario.data
    workload = build_workload(d["workload"], base_dir=scenario.base_dir, seed=scenario.seed,
                              where=scenario.where("workload"))
    model, gpu, backend = build_backend(scenario)
    blocks = kv_blocks_per_replica(scenario, model, gpu)
    check_requests_fit(workload, scenario, blocks, model.name)
    policy_cls, params = parse_policy(d["policy"], scenario.where("policy"))

    log = EventLog(len(workload), scenario.cluster.replicas)
    for note in workload.notes:
        log.note(note)
    env = simpy.Environment()
    seqs: list[Sequence | None] = [None] * len(workload)
    replicas = []
    for r in range(scenario.cluster.replicas):
        kv = KVCache(blocks, scenario.kv_cache.block_size, scenario.kv_cache.mode)
        policy = policy_cls(params, kv, note=log.note)
        replicas.append(Replica(env, r, policy, backend, log, seqs, fast_forward))
    env.process(dispatch(env, workload, replicas, seqs, log))
    env.run()
    flush_unfinished(seqs, replicas, log)
    return RunResult(scenario, workload, log, model, gpu, backend, params)


def flush_unfinished(seqs: list[Sequence | None], replicas: list[Replica], log: EventLog) -> None:
    """Record what requests that never finished did get (tokens, preemptions, open token runs)."""
    unfinished = 0
    for seq in seqs:
        if seq is None or seq.status == FINISHED:
            continue
        unfinished += 1
        log.num_emitted[seq.id] = seq.num_generated
        log.num_preemptions[seq.id] = seq.num_preemptions
        if log.replica[seq.id] >= 0:
            replicas[log.replica[seq.id]].close_run(seq)
    if unfinished:
        log.note(f"{unfinished} request(s) did not finish")
