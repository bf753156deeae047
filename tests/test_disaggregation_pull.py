"""disaggregation.transfer: pull (DistServe's decode instance takes finished prefills between its
steps, under a waiting-blocks limit, and each copy stalls its decoding)."""

import numpy as np

from simbatch.api import run
from simbatch.engine.disaggregation.build import run_pools
from simbatch.engine.simulation import simulate
from simbatch.scenario.spec import from_dict
from tests.test_disaggregation import scenario_data, small_gpu


def pulled(transfer, requests=None, **pools) -> dict:
    return scenario_data(requests, transfer=transfer, **pools)


def decode_steps(log, replica: int) -> tuple[np.ndarray, np.ndarray]:
    table = log.step_table()
    mine = table["replica"] == replica
    start = table["start_s"][mine]
    return start, start + table["duration_s"][mine]


def test_copies_run_in_the_decode_replicas_loop_never_during_its_steps():
    log = simulate(from_dict(pulled("pull"))).log
    sent = log.decode_replica >= 0
    assert sent.sum() > 200
    assert (log.transfer_start_s[sent] >= log.first_token_s[sent]).all()
    assert (log.decode_start_s[sent] >= log.transfer_end_s[sent]).all()
    overlapping = 0
    for r in (2, 3):
        mine = sent & (log.decode_replica == r)
        order = np.argsort(log.transfer_start_s[mine])
        t0, t1 = log.transfer_start_s[mine][order], log.transfer_end_s[mine][order]
        assert (t0[1:] >= t1[:-1]).all()  # one copy at a time per decode replica
        s0, s1 = decode_steps(log, r)
        # no step of this replica runs while one of its copies does (1 ns of float slack)
        inside = (s0[None, :] < t1[:, None] - 1e-9) & (s1[None, :] > t0[:, None] + 1e-9)
        assert not inside.any()
    # Under push the same copies overlap the decode replica's steps: pull changed something.
    push = simulate(from_dict(pulled("push"))).log
    for r in (2, 3):
        mine = sent & (push.decode_replica == r)
        s0, s1 = decode_steps(push, r)
        t0, t1 = push.transfer_start_s[mine], push.transfer_end_s[mine]
        overlapping += ((s0[None, :] < t1[:, None]) & (s1[None, :] > t0[:, None])).any(axis=1).sum()
    assert overlapping > 20


def test_a_prompt_is_taken_only_when_its_blocks_are_free_on_the_decode_replica():
    # The decode GPU holds about one 2,000-token request at a time: under pull the second waits,
    # on the prefill replica (its KV stays there), until the first finishes and frees its blocks;
    # under push the second is copied at once and waits in the decode queue instead.
    requests = [{"prompt": 2000, "output": 40, "arrival_s": 0.0}, {"prompt": 2000, "output": 40, "arrival_s": 0.0}]
    pools = {"prefill": {"replicas": 1}, "decode": {"replicas": 1, "hardware": small_gpu(15.7)}}
    result, replicas = run_pools(from_dict(pulled("pull", requests, **pools)))
    log_pull = result.log
    assert 128 <= replicas[1].policy.kv.num_blocks < 256  # one request fits, two do not
    log_push = simulate(from_dict(pulled("push", requests, **pools))).log
    assert log_pull.transfer_start_s[1] >= log_pull.finish_s[0]
    assert log_push.transfer_start_s[1] < log_push.finish_s[0]
    assert (log_pull.num_emitted == 40).all() and not log_pull.num_preemptions.any()


def test_the_waiting_share_limits_how_many_prompts_wait_on_the_decode_replica():
    # A burst of 40 prompts of ~70 blocks each at once, on one decode replica of several
    # thousand blocks. With a share below one prompt's blocks, a copy is taken only once the
    # previous one has been admitted, so a decode step runs between any two copies; with the
    # whole cache as the limit, copies run back to back.
    requests = [{"prompt": 1100, "output": 30, "arrival_s": 0.0} for _ in range(40)]
    pools = {"prefill": {"replicas": 1}, "decode": {"replicas": 1}}

    def copies_between_steps(share: float) -> int:
        log = simulate(from_dict(pulled({"mode": "pull", "max_waiting_share": share}, requests, **pools))).log
        t0 = np.sort(log.transfer_start_s)
        s0, _ = decode_steps(log, 1)
        steps_between = np.searchsorted(s0, t0[1:]) - np.searchsorted(s0, t0[:-1])
        return int((steps_between == 0).sum())

    assert copies_between_steps(0.001) == 0
    assert copies_between_steps(1.0) > 10


def test_pull_conserves_requests_tokens_and_kv_under_memory_pressure():
    data = pulled("pull", prefill={"replicas": 1, "hardware": small_gpu(16.0)},
                  decode={"replicas": 2, "hardware": small_gpu(16.5)})
    result, replicas = run_pools(from_dict(data))
    log = result.log
    assert not np.isnan(log.finish_s).any() and (log.num_emitted == result.workload.output_tokens).all()
    table = log.step_table()
    capacity = np.asarray(log.kv_capacity_blocks)[table["replica"]]
    assert (table["kv_used_blocks"] <= capacity).all() and (table["kv_used_blocks"] > 0.8 * capacity).any()
    assert all(r.policy.kv.num_used == 0 for r in replicas)
    assert all(not r.inbox.queue for r in replicas[1:])


def test_summary_names_the_transfer_mode():
    assert run(from_dict(pulled("pull"))).summary["disaggregation"]["transfer"] == {
        "mode": "pull", "max_waiting_share": 0.05}
    assert run(from_dict(scenario_data())).summary["disaggregation"]["transfer"] == {"mode": "push"}
