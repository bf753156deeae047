"""One cluster builder (engine.simulation.run_cluster) for simulation and both sides of a validation:
what a validation overrides (backend, KV capacity, free hook) leaves every scenario feature in place."""

import numpy as np
import pytest

from simbatch.catalog.models import get_model
from simbatch.core.prefix_cache import PrefixKVCache
from simbatch.engine.setup import group_backend
from simbatch.engine.simulation import run_cluster, simulate
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import from_dict
from simbatch.validation.realtime import check_validatable
from simbatch.workload import build_workload
from tests.prefixkit import shared_prefix_requests


def featureful(**extra) -> dict:
    """Two replicas of chunked prefill on two streams, a prefix-aware router, a prefix cache,
    priorities, an SLO controller on the token budget and a front end."""
    return {"workload": {"requests": shared_prefix_requests(5, num_requests=160, rate=12.0, hash_block=64,
                                                        priorities=2)},
            "model": "llama-2-7b", "hardware": "a100-80gb", "cost_model": {"kind": "roofline"},
            "cluster": {"replicas": 2, "router": "prefix_aware"},
            "policy": {"kind": "chunked_prefill", "max_num_seqs": 64, "max_num_batched_tokens": 1024,
                       "streams": 2, "queue_order": "priority"},
            "kv_cache": {"prefix_caching": True, "hash_block_size": 64},
            "control": {"kind": "slo", "interval_s": 0.5, "window_s": 2.0, "min_value": 128, "max_value": 2048},
            "engine": {"request_s": 0.01},
            "slo": {"ttft_ms": 800, "tpot_ms": 60}, "seed": 3, **extra}



def test_a_validations_overrides_keep_every_feature_of_the_scenario():
    sc = from_dict(featureful())
    model = get_model("llama-2-7b")
    _, _, cost = group_backend(sc, model, 0)  # what the predicted side passes: a cost model
    reference, replicas = run_cluster(sc)
    freed = []
    result, replicas = run_cluster(sc, backend=cost, kv_blocks=replicas[0].policy.kv.num_blocks,
                                   on_free=freed.append)
    for r in replicas:
        assert r.controller is not None  # control: attached
        assert isinstance(r.policy.kv, PrefixKVCache) and r.policy.kv.on_free is not None
        assert r.policy.params.streams == 2
    log = result.log
    assert (np.bincount(log.replica, minlength=2) > 20).all()  # the router spread the requests
    # the front end delays every request: none is scheduled before arrival + request_s
    assert (log.first_scheduled_s - log.arrival_s >= 0.01 - 1e-12).all()
    # every request's blocks were freed once at its finish, and once per preemption
    assert len(freed) == len(log.arrival_s) + int(log.num_preemptions.sum())
    # and it is the very run simulate() makes
    for name in ("first_token_s", "finish_s", "replica"):
        assert np.array_equal(getattr(log, name), getattr(reference.log, name), equal_nan=True), name
    assert np.array_equal(log.step_table()["duration_s"], simulate(sc).log.step_table()["duration_s"])


def test_a_kv_capacity_override_sets_every_replicas_cache():
    data = featureful(kv_cache={"prefix_caching": False})
    del data["control"]
    sc = from_dict(data)
    _, replicas = run_cluster(sc, kv_blocks=400)
    assert [r.policy.kv.num_blocks for r in replicas] == [400, 400]
    assert all(r.controller is None for r in replicas)


@pytest.mark.parametrize("extra, field", [
    ({"kv_cache": {"prefix_caching": True, "hash_block_size": 64}}, "kv_cache.prefix_caching"),
    ({"disaggregation": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}, "link": "nvlink"}},
     "disaggregation"),
])
def test_validate_refuses_what_the_torch_backend_cannot_run(extra, field):
    data = {**featureful(cluster={"replicas": 1}), **extra}
    del data["control"]
    sc = from_dict(data)
    workload = build_workload(data["workload"], base_dir=sc.base_dir, seed=0, where="workload")
    with pytest.raises(SimbatchError) as err:
        check_validatable(sc, workload, get_model("llama-2-7b"))
    assert err.value.where.endswith(field), err.value.where
