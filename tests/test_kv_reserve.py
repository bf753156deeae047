"""``kv_cache.reserve``: how much a ``max_length`` cache reserves (the vLLM paper's Orca baselines)."""

from __future__ import annotations

import numpy as np
import pytest

from simbatch.core.kvcache import reserved_tokens
from simbatch.engine.simulation import simulate
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import from_dict

# Llama-2-7B (4,096-token window) on an A100-40GB at 0.45: about 11,000 tokens of KV, so that
# the reservation decides how many requests run.
BASE = {
    "workload": {"synthetic": {"num_requests": 150, "arrival": {"kind": "poisson", "rate": 20.0},
                               "prompt": {"kind": "lognormal", "median": 300, "sigma": 0.8, "max": 1500},
                               "output": {"kind": "lognormal", "median": 60, "sigma": 0.9, "max": 400}}},
    "model": "llama-2-7b", "hardware": "a100-40gb", "cost_model": {"kind": "roofline"},
    "policy": {"kind": "continuous", "max_num_seqs": 256}, "seed": 3,
}


def with_kv(**kv):
    return from_dict({**BASE, "kv_cache": {"gpu_memory_utilization": 0.45, **kv}})


def test_reserved_tokens_per_rule():
    prompt, output = np.array([100, 100, 100, 100]), np.array([1, 25, 32, 33])
    assert list(reserved_tokens(prompt, output, "oracle", 2048)) == [101, 125, 132, 133]
    # The vLLM paper's example: a true output of 25 tokens reserves 32 under Orca (Pow2).
    assert list(reserved_tokens(prompt, output, "pow2", 2048)) == [101, 132, 132, 164]
    assert list(reserved_tokens(prompt, output, "max", 2048)) == [2048] * 4
    assert int(reserved_tokens(100, 25, "pow2", 0)) == 132  # scalars too
    assert int(reserved_tokens(3000, 100, "max", 2048)) == 3100  # never less than the request


def test_larger_reservations_run_smaller_batches():
    mean_batch, preemptions = {}, {}
    for mode, reserve in (("paged", "oracle"), ("max_length", "oracle"), ("max_length", "pow2"),
                          ("max_length", "max")):
        result = simulate(with_kv(mode=mode, reserve=reserve))
        table = result.log.step_table()
        mean_batch[reserve if mode == "max_length" else mode] = float(np.mean(table["num_seqs"]))
        preemptions[reserve if mode == "max_length" else mode] = int(result.log.num_preemptions.sum())
        assert (result.log.num_emitted == result.workload.output_tokens).all()
    assert mean_batch["paged"] > mean_batch["oracle"] > mean_batch["pow2"] > mean_batch["max"]
    # A reservation covers the whole request: never a preemption.
    assert preemptions["oracle"] == preemptions["pow2"] == preemptions["max"] == 0


def test_reserve_errors_name_the_field():
    with pytest.raises(SimbatchError, match=r"kv_cache.reserve.*allowed: oracle, pow2, max"):
        with_kv(mode="max_length", reserve="half")
    with pytest.raises(SimbatchError, match=r"kv_cache.reserve.*applies to mode max_length"):
        with_kv(reserve="pow2")
    # Llama-2's whole window per request does not fit a small cache: one line naming the reservation.
    small = from_dict({**BASE, "kv_cache": {"gpu_memory_utilization": 0.33, "mode": "max_length",
                                            "reserve": "max"}})
    with pytest.raises(SimbatchError, match=r"reserving 4096 tokens \(kv_cache.reserve max\)"):
        simulate(small)


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_a_max_length_cache_keeps_no_watermark(kind):
    # The watermark keeps room for running requests to grow; under max_length a request reserved
    # its whole life at admission, so a request that needs every block is admitted (Sarathi-Serve's
    # OrcaBlockSpaceManager: watermark 0), while a paged cache keeps 1 % of 100 blocks free.
    from simbatch.core.kvcache import KVCache
    from simbatch.core.sequence import Sequence
    from simbatch.policies import POLICIES

    cls = POLICIES[kind]
    for mode, admitted in (("max_length", True), ("paged", False)):
        policy = cls(cls.Params(max_num_batched_tokens=4096), KVCache(100, 16, mode=mode, max_tokens=4096))
        runner = Sequence(1, 0.0, 6, 10)  # one block (chunked prefill keeps a watermark only then)
        policy.kv.allocate(runner, 1)
        policy.running.append(runner)
        # the 99 blocks left: prompt + output of 1,584 under max_length, a 1,584-token prompt paged
        policy.add(Sequence(0, 0.0, 1484 if mode == "max_length" else 1584, 100), 0.0)
        assert (policy.head_admission(4096) is not None) is admitted, mode


def test_chunked_prefill_keeps_its_watermark_only_while_something_runs():
    # vLLM v1 (KVCacheManager.allocate_slots, has_scheduled_reqs): on an idle cache a request may
    # take every block; continuous (vLLM V0's BlockSpaceManager) keeps the watermark always.
    from simbatch.core.kvcache import KVCache
    from simbatch.core.sequence import Sequence
    from simbatch.policies import POLICIES

    for kind, idle_admits in (("chunked_prefill", True), ("continuous", False)):
        cls = POLICIES[kind]
        policy = cls(cls.Params(max_num_batched_tokens=4096), KVCache(100, 16, max_tokens=4096))
        policy.add(Sequence(0, 0.0, 1600, 10), 0.0)  # 100 blocks: all of them
        assert (policy.head_admission(4096) is not None) is idle_admits, kind
        if kind == "chunked_prefill":  # with a request running, the watermark is kept
            runner = Sequence(1, 0.0, 16, 10)
            policy.kv.allocate(runner, 1)
            policy.running.append(runner)
            policy.waiting[0] = Sequence(0, 0.0, 1584, 10)  # the 99 blocks left: within the 1 % kept
            assert policy.head_admission(4096) is None
