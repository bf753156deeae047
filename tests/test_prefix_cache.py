"""Prefix caching: shared blocks, reference counts, LRU eviction and what the hits save."""

import numpy as np
import pytest

from simbatch.api import run
from simbatch.cli import main
from simbatch.engine.simulation import simulate
from simbatch.errors import SimbatchError
from simbatch.policies.iteration import IterationPolicy
from simbatch.core.prefix_cache import PrefixKVCache, chain_ids
from simbatch.scenario.spec import from_dict
from simbatch.core.sequence import Sequence
from prefixkit import shared_prefix_requests

H = 64  # tokens per hash id in these tests (Mooncake's are 512)


def seq(i, prompt, ids, output=10):
    return Sequence(i, 0.0, prompt, output, prefix=chain_ids(ids))


def admit(kv, s, n=None):
    """What a policy does to admit ``s`` for ``n`` tokens after its cached prefix, then the step."""
    match = kv.match(s)
    n = n or s.num_tokens - match[0]
    assert kv.can_allocate(kv.admission_blocks(s, n, match))
    kv.claim(s, match)
    kv.allocate(s, kv.blocks_needed(s, n))
    kv.commit(s, s.num_computed + n)
    s.num_computed += n
    return match[0]


def test_a_request_reuses_the_prefix_it_shares_and_no_more():
    kv = PrefixKVCache(100, 16, hash_block_size=H)
    a, b = seq(0, 200, [1, 2, 3, 4]), seq(1, 150, [1, 2, 9])
    assert admit(kv, a) == 0
    assert admit(kv, b) == 2 * H  # two hash blocks in common: 8 blocks of 16
    assert (a.num_blocks, b.num_blocks) == (13, 10)
    assert kv.num_used == 13 + 2  # b's 8 shared blocks are a's
    kv.check([a, b])


def test_a_hit_leaves_at_least_one_token_to_compute():
    kv = PrefixKVCache(100, 16, hash_block_size=H)
    admit(kv, seq(0, 128, [1, 2]))
    assert admit(kv, seq(1, 128, [1, 2])) == 112


def test_referenced_blocks_are_never_evicted_and_tails_go_first():
    kv = PrefixKVCache(20, 16, hash_block_size=H)
    a, b = seq(0, 200, [1, 2, 3, 4]), seq(1, 150, [1, 2, 9])
    admit(kv, a)
    admit(kv, b)
    kv.free(a)  # blocks 8..11 of a lose their last reference; 0..7 are still b's
    assert len(kv.lru) == 4 and kv.num_free == 20 - 10
    c = Sequence(2, 0.0, 160, 10)  # no prefix: 10 private blocks, all that is free
    admit(kv, c)
    assert len(kv.lru) == 0 and kv.num_evicted == 4  # only unreferenced blocks went
    assert all(kv.refs[k] == 1 for k in kv.keys(b, 0, 8))
    kv.check([b, c])
    kv.free(b)
    kv.free(c)  # b's 8 shared blocks stay cached, unreferenced; 12 blocks truly free
    admit(kv, Sequence(3, 0.0, 200, 10))  # needs 13: one cached block goes, the chain's tail
    assert kv.match(seq(4, 300, [1, 2, 3])) == (7 * 16, 0)


def test_a_block_computed_twice_is_kept_once():
    kv = PrefixKVCache(100, 16, hash_block_size=H)
    a, b = seq(0, 200, [1, 2, 3, 4]), seq(1, 200, [1, 2, 3, 4])
    admit(kv, a, 16)  # a's first chunk: one block cached
    assert admit(kv, b, 100) == 16  # b reuses it, then computes blocks a will compute too
    used = kv.num_used
    admit_rest = a.num_tokens - a.num_computed
    kv.allocate(a, kv.blocks_needed(a, admit_rest))
    kv.commit(a, a.num_tokens)  # a's blocks 1..6 are b's already: a's copies are dropped
    assert kv.num_used == used + 13 - 1 - 6
    kv.check([a, b])


def prefix_scenario(kind="continuous", mode="paged", utilization=0.9, prefix="hash", caching=True,
                    requests=None, seed=1, **policy):
    return from_dict({
        "workload": {"requests": requests or shared_prefix_requests(seed, rate=20.0, hash_block=H, mode=prefix)},
        "model": "llama-2-7b", "hardware": "a100-40gb", "cost_model": {"kind": "roofline"},
        "kv_cache": {"mode": mode, "gpu_memory_utilization": utilization, "prefix_caching": caching,
                     "hash_block_size": H},
        "policy": {"kind": kind, "max_num_seqs": 48, **policy}, "seed": 0,
    })


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
@pytest.mark.parametrize("mode", ["paged", "max_length"])
@pytest.mark.parametrize("prefix", ["hash", "session"])
def test_accounting_holds_after_every_step_and_kv_stays_within_capacity(monkeypatch, kind, mode, prefix):
    checked = []
    original = IterationPolicy.on_step_done

    def checking(self, plan, finished, now):
        original(self, plan, finished, now)
        self.kv.check(self.running)  # waiting requests hold no blocks
        checked.append(self.kv.num_used + len(self.kv.lru) <= self.kv.num_blocks)

    monkeypatch.setattr(IterationPolicy, "on_step_done", checking)
    # 0.36 x 40 GiB leaves ~1,000 blocks: eviction and preemption both happen
    result = simulate(prefix_scenario(kind, mode, 0.36, prefix), fast_forward=False)
    assert checked and all(checked)
    used = result.log.step_table()["kv_used_blocks"]
    assert used.max() <= result.log.kv_capacity_blocks[0]
    assert result.log.num_preemptions.sum() > 0 or mode == "max_length"


def shared_tokens(a: dict, b: dict) -> int:
    """Tokens of full 16-token blocks that prompts ``a`` and ``b`` provably share."""
    common = 0
    for x, y in zip(a["hash_ids"], b["hash_ids"]):
        if x != y:
            break
        common += 1
    return min(common * H, a["prompt"], b["prompt"]) // 16 * 16


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_hits_never_exceed_the_prefix_actually_shared(kind):
    requests = shared_prefix_requests(7, num_requests=120, rate=20.0, hash_block=H)
    result = simulate(prefix_scenario(kind, utilization=0.36, requests=requests))
    hits = result.log.prefix_cache.first_hit
    for i, r in enumerate(requests):
        best = max(shared_tokens(r, o) for j, o in enumerate(requests) if j != i)
        assert 0 <= hits[i] <= min(best, (r["prompt"] - 1) // 16 * 16)
        assert hits[i] % 16 == 0
    assert (hits > 0).mean() > 0.5  # the common system block is hit by nearly everyone


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_prefill_tokens_drop_by_exactly_the_hits(kind):
    with_cache, without = run(prefix_scenario(kind)), run(prefix_scenario(kind, caching=False))
    assert with_cache.summary["preemptions"] == without.summary["preemptions"] == 0
    pc = with_cache.summary["prefix_cache"]
    assert pc["token_hit_rate"] > 0.1 and pc["request_hit_rate"] > 0.5
    prompts = int(with_cache.requests["prompt_tokens"].sum())
    assert int(without.steps["prefill_tokens"].sum()) == prompts
    assert int(with_cache.steps["prefill_tokens"].sum()) == prompts - pc["tokens_saved"]
    assert pc["token_hit_rate"] == pytest.approx(pc["tokens_saved"] / prompts)
    assert without.summary["prefix_cache"] is None
    assert with_cache.summary["completed"] == without.summary["completed"] == 150
    # hits that skip prefill show as earlier first tokens
    assert with_cache.summary["ttft_ms"]["mean"] < without.summary["ttft_ms"]["mean"]
    assert not with_cache.requests["queue_ms"].isna().any()


def test_a_later_turn_reuses_the_previous_turns_prompt_and_output():
    requests = [{"arrival_s": 0.0, "prompt": 100, "output": 50, "session_id": "a"},
                {"arrival_s": 0.0, "prompt": 100, "output": 5, "session_id": "b"},
                {"arrival_s": 30.0, "prompt": 200, "output": 5, "session_id": "a"},
                {"arrival_s": 30.0, "prompt": 80, "output": 5, "session_id": "c"}]
    hits = simulate(prefix_scenario(requests=requests)).log.prefix_cache.first_hit
    # turn 1 of "a" left 100 + 50 - 1 computed tokens: 9 full blocks
    assert hits.tolist() == [0, 0, 144, 0]


def test_padded_batch_policies_ignore_prefix_caching_with_a_note():
    out = run(prefix_scenario().with_policy("static"))
    assert out.summary["prefix_cache"] is None
    assert any("prefix_caching is ignored under static" in m for m in out.messages)


def test_a_workload_without_prefix_information_is_noted():
    sc = prefix_scenario(requests=[{"prompt": 100, "output": 5}, {"prompt": 100, "output": 5}])
    out = run(sc)
    assert out.summary["prefix_cache"]["tokens_saved"] == 0
    assert any("neither hash_ids nor session_id" in m for m in out.messages)


@pytest.mark.parametrize("kv_cache, where, cause", [
    ({"prefix_caching": "yes"}, "x.yaml: kv_cache.prefix_caching", "expected true or false"),
    ({"hash_block_size": 0}, "x.yaml: kv_cache.hash_block_size", "must be >= 1"),
    ({"prefix_cache": True}, "x.yaml: kv_cache.prefix_cache", "unknown field"),
])
def test_bad_options_name_the_field(kv_cache, where, cause):
    data = {**prefix_scenario().data, "kv_cache": kv_cache}
    with pytest.raises(SimbatchError) as err:
        from_dict(data, "x.yaml")
    assert (err.value.where, cause in err.value.cause) == (where, True)


def test_bad_option_names_file_line_and_field(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("workload:\n  requests: [{prompt: 10, output: 3}]\nmodel: llama-2-7b\n"
                    "hardware: a100-80gb\npolicy: {kind: continuous}\nkv_cache:\n  prefix_caching: 2\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:7: kv_cache.prefix_caching: expected true or false" in err
    assert len(err.strip().splitlines()) == 1


def test_bundled_scenario_shows_the_cache_paying_off():
    pytest.importorskip("yaml")
    from pathlib import Path

    from simbatch.scenario.spec import load_scenario

    path = Path(__file__).resolve().parents[1] / "scenarios" / "prefix_cache.yaml"
    sc = load_scenario(path, ["workload.window=[0, 60]"])
    try:
        on = run(sc)
    except SimbatchError as exc:  # the trace lives beside the repository, not in it
        pytest.skip(str(exc))
    off = run(load_scenario(path, ["workload.window=[0, 60]", "kv_cache.prefix_caching=false"]))
    assert on.summary["preemptions"] == off.summary["preemptions"] == 0
    assert on.summary["prefix_cache"]["request_hit_rate"] > 0.9  # every prompt starts with block 0
    assert on.summary["ttft_ms"]["mean"] < off.summary["ttft_ms"]["mean"]
    assert np.isclose(on.steps["prefill_tokens"].sum(),
                      off.steps["prefill_tokens"].sum() - on.summary["prefix_cache"]["tokens_saved"])
