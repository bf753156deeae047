"""The torch backend executes plans exactly: token counts, KV contents, padding, preemption."""

import pytest

torch = pytest.importorskip("torch")

from simbatch.backends.torch_backend import TorchBackend
from simbatch.core.plan import StepPlan

ATOL = 1e-4


def backend(blocks: int = 64) -> TorchBackend:
    return TorchBackend("tiny", num_blocks=blocks, block_size=16, threads=1, seed=3, keep_hidden=True)


def hidden_of(b: TorchBackend, rid: int):
    """The last layer's hidden states of ``rid``'s kept rows in the last step."""
    start, n = b.last_inputs.rows[rid]
    return b.last_hidden[start:start + n].clone()


def run_alone(prompt: int, decodes: int, rid: int = 0):
    """``rid`` prefilled in one step, then decoded ``decodes`` times, alone; (KV, last hidden)."""
    b = backend()
    b.step_cost(StepPlan([rid], [prompt], [0]))
    for k in range(decodes):
        b.step_cost(StepPlan([rid], [1], [prompt + k], num_decode_slots=1))
    return b.pool.read(rid, 3), hidden_of(b, rid)


def test_token_counts_match_the_plan():
    b = backend()
    plans = [StepPlan([0, 1], [20, 7], [0, 0]),
             StepPlan([0, 1, 2], [1, 1, 30], [20, 7, 0], num_decode_slots=2),
             StepPlan([0, 1, 2], [1, 1, 1], [21, 8, 30], num_decode_slots=3)]
    for plan in plans:
        b.step_cost(plan)
    assert [r.num_rows for r in b.steps] == [27, 32, 3]
    assert [b.pool.length(i) for i in range(3)] == [22, 9, 31]
    # blocks: ceil(22/16) + ceil(9/16) + ceil(31/16)
    assert b.pool.num_free == 64 - (2 + 1 + 2)
    assert b.last_hidden.shape == (3, 256)


def test_padded_plan_computes_padding_but_keeps_only_real_tokens():
    b = backend()
    cost = b.step_cost(StepPlan([0, 1], [10, 25], [0, 0], num_pad_tokens=[15, 0]))
    assert b.steps[-1].num_rows == 50 and b.pool.length(0) == 10 and b.pool.length(1) == 25
    assert cost.seconds == pytest.approx(sum(cost.breakdown.values()))
    # a finished row (-1) keeps computing one padded token per decode step
    b.step_cost(StepPlan([0, -1], [1, 0], [25, 25], num_pad_tokens=[0, 1], num_decode_slots=2))
    assert b.steps[-1].num_rows == 2 and b.pool.length(0) == 11


def test_batched_and_chunked_match_alone():
    (k_alone, v_alone), h_alone = run_alone(40, 3)
    # batched: request 0 beside two others, prefilled together, decoded together
    b = backend()
    b.step_cost(StepPlan([5, 0, 6], [17, 40, 33], [0, 0, 0]))
    for k in range(3):
        b.step_cost(StepPlan([5, 0, 6], [1, 1, 1], [17 + k, 40 + k, 33 + k], num_decode_slots=3))
    k_b, v_b = b.pool.read(0, 3)
    assert torch.allclose(k_b, k_alone, atol=ATOL) and torch.allclose(v_b, v_alone, atol=ATOL)
    assert torch.allclose(hidden_of(b, 0), h_alone, atol=ATOL)
    # chunked: the prompt in chunks of 16, 16 and 8 while request 7 decodes beside it
    c = backend()
    c.step_cost(StepPlan([7], [9], [0]))
    done = 0
    for chunk in (16, 16, 8):
        c.step_cost(StepPlan([7, 0], [1, chunk], [c.pool.length(7), done], num_decode_slots=1))
        done += chunk
    for k in range(3):
        c.step_cost(StepPlan([0, 7], [1, 1], [40 + k, c.pool.length(7)], num_decode_slots=2))
    k_c, v_c = c.pool.read(0, 3)
    assert torch.allclose(k_c, k_alone, atol=ATOL) and torch.allclose(v_c, v_alone, atol=ATOL)
    assert torch.allclose(hidden_of(c, 0), h_alone, atol=ATOL)


def test_padding_does_not_change_real_outputs():
    (k_alone, v_alone), h_alone = run_alone(12, 2)
    b = backend()
    # a static batch: request 0 (12 tokens) padded to the 30-token row of request 1
    b.step_cost(StepPlan([0, 1], [12, 30], [0, 0], num_pad_tokens=[18, 0]))
    # decodes attend over the padded length (30 + k) for real, beside a finished (-1) row
    for k in range(2):
        b.step_cost(StepPlan([0, -1], [1, 0], [30 + k, 30 + k], num_pad_tokens=[0, 1], num_decode_slots=2))
    k_b, v_b = b.pool.read(0, 3)
    assert k_b.shape[0] == 14
    assert torch.allclose(k_b, k_alone, atol=ATOL) and torch.allclose(v_b, v_alone, atol=ATOL)
    assert torch.allclose(hidden_of(b, 0), h_alone, atol=ATOL)


def test_recompute_after_preemption_drops_the_old_cache():
    (k_alone, _), _ = run_alone(20, 0)
    b = backend(blocks=4)
    b.step_cost(StepPlan([0], [20], [0]))
    b.step_cost(StepPlan([0], [1], [20], num_decode_slots=1))
    assert b.pool.num_free == 2
    b.step_cost(StepPlan([0], [20], [0]))  # context 0 again: recompute from scratch
    assert b.pool.length(0) == 20 and b.pool.num_free == 2
    assert torch.allclose(b.pool.read(0, 3)[0], k_alone, atol=ATOL)
    b.release(0)
    assert b.pool.num_free == 4 and b.pool.length(0) == 0


def test_plan_inconsistent_with_cache_is_an_error():
    b = backend()
    b.step_cost(StepPlan([0], [10], [0]))
    with pytest.raises(RuntimeError, match="plan context 7"):
        b.step_cost(StepPlan([0], [1], [7], num_decode_slots=1))
    with pytest.raises(RuntimeError, match="pool exhausted"):
        backend(blocks=1).step_cost(StepPlan([0], [17], [0]))


def test_describe_and_overhead_breakdown():
    b = backend()
    b.warmup()
    assert b.steps == [] and b.pool.num_free == 64
    cost = b.step_cost(StepPlan([0], [8], [0]))
    assert set(cost.breakdown) == {"overhead", "forward"} and cost.breakdown["forward"] > 0
    d = b.describe()
    assert d["kind"] == "torch" and d["model"] == "tiny" and d["kv_blocks"] == 64 and d["dtype"] == "float32"


def test_two_streams_compute_what_one_stream_does():
    # A mixed step split into its decode and chunk micro-batches (on CPU: one after the
    # other) leaves the same KV and the same last-layer states as the whole step.
    out = []
    for streams in (1, 2):
        b = backend()
        b.step_cost(StepPlan([0, 1], [20, 9], [0, 0]))
        b.step_cost(StepPlan([0, 1, 2], [1, 1, 30], [20, 9, 0], num_decode_slots=2, num_streams=streams))
        assert b.steps[-1].num_rows == 32 and [b.pool.length(i) for i in range(3)] == [21, 10, 30]
        out.append((b.pool.read(2, 3), b.last_hidden.clone()))
    (k1, v1), h1 = out[0]
    (k2, v2), h2 = out[1]
    assert torch.allclose(k1, k2, atol=ATOL) and torch.allclose(v1, v2, atol=ATOL)
    assert torch.allclose(h1, h2, atol=ATOL)


def test_a_finished_row_of_a_padded_batch_reads_its_own_cache():
    # Static batching keeps a finished request's row in the batch: its padding token's
    # attention reads that request's KV (distinct memory), not one shared scratch block.
    b = backend()
    b.step_cost(StepPlan([0, 1], [10, 25], [0, 0], num_pad_tokens=[15, 0]))
    b.step_cost(StepPlan([0, 1], [1, 1], [25, 25], num_pad_tokens=[0, 0], num_decode_slots=2))
    b.step_cost(StepPlan([-1, 1], [0, 1], [26, 26], num_pad_tokens=[1, 0], num_decode_slots=2))
    index = b.last_inputs.decode_index
    slot = b.pool.slot(b.pool.tables[0], 0)
    assert int(index[0, 0]) == slot  # row 0 gathers request 0's blocks
    assert b.pool.length(0) == 11 and b.pool.length(1) == 27  # and writes nothing there


def test_a_padded_batch_attends_over_its_rows_own_blocks_across_the_padded_length():
    # A static batch prices every row at the padded context; a padded engine's rectangular
    # KV cache holds that length for every row. The backend's gather must read it too: each
    # row's own blocks over the whole padded length, never the cache-hot scratch block.
    b = backend()
    b.step_cost(StepPlan([0, 1], [10, 40], [0, 0], num_pad_tokens=[30, 0]))
    b.step_cost(StepPlan([0, 1], [1, 1], [40, 40], num_pad_tokens=[0, 0], num_decode_slots=2))
    b.step_cost(StepPlan([-1, 1], [0, 1], [41, 41], num_pad_tokens=[1, 0], num_decode_slots=2))
    index, scratch = b.last_inputs.decode_index, b.pool.scratch_block
    assert index.shape == (2, 42)
    for row, rid in enumerate((0, 1)):
        blocks = {int(s) // 16 for s in index[row]}
        assert scratch not in blocks and blocks == set(b.pool.tables[rid])  # its own, all of them
    assert b.pool.length(0) == 11 and b.pool.length(1) == 42  # written tokens unchanged
    assert len(b.pool.tables[0]) == 3 and len(b.pool.tables[1]) == 3  # ceil(42 / 16) blocks each
    mask = b.last_inputs.decode_mask[:, 0, 0, :]
    assert int(mask[0].sum()) == 1 and int(mask[1].sum()) == 42  # the finished row sees its pad only


def test_an_unpadded_batch_keeps_each_rows_own_length():
    # Continuous batching plans each row at its own context: a shorter row's padding to the
    # longest is the backend's, not the plan's, and costs no blocks.
    b = backend()
    b.step_cost(StepPlan([0, 1], [10, 40], [0, 0]))
    b.step_cost(StepPlan([0, 1], [1, 1], [10, 40], num_decode_slots=2))
    assert len(b.pool.tables[0]) == 1 and int(b.last_inputs.decode_index[0, -1]) // 16 == b.pool.scratch_block


def test_replay_executes_a_recorded_plan_again_and_leaves_the_run_as_it_was():
    b = backend()
    plans = [StepPlan([0, 1], [20, 7], [0, 0]),
             StepPlan([0, 1, 2], [1, 1, 30], [20, 7, 0], num_decode_slots=2),
             StepPlan([0, -1], [1, 0], [21, 7], num_pad_tokens=[0, 1], num_decode_slots=2)]
    for plan in plans:
        b.step_cost(plan)
    steps, lengths, free = list(b.steps), dict(b.pool.lengths), b.pool.num_free
    for rec in steps:
        again = b.replay(rec.plan)
        assert again.num_rows == rec.num_rows and again.forward_s > 0
        assert again.plan.num_new_tokens == rec.plan.num_new_tokens
        assert again.plan.num_context_tokens == rec.plan.num_context_tokens
        assert [r < 0 for r in again.plan.request_ids] == [r < 0 for r in rec.plan.request_ids]
    assert b.steps == steps and dict(b.pool.lengths) == lengths and b.pool.num_free == free


def test_speed_drift_times_one_fixed_step_per_window():
    """The machine-drift probe: window medians of one unchanging decode step, in order, and the
    pool left as it was (bench_validate prints their spread before issue 16's targets)."""
    from simbatch.calibrate.probe import speed_drift

    backend = TorchBackend("tiny", num_blocks=64, block_size=16, device="cpu", dtype="float32", threads=1)
    backend.warmup()
    free = backend.pool.num_free
    medians = speed_drift(backend, contexts=(40, 60), seconds=0.6, window_s=0.2)
    assert 2 <= len(medians) <= 4 and (medians > 0).all()
    assert backend.pool.num_free == free and backend.steps == []


def test_machine_speed_probe_and_its_ratios():
    """validate's probe: a median forward time where the pool holds it, None where the scenario's
    pool is too small; machine_speed divides by the probe at calibration only when both exist."""
    from simbatch.validation.noise import machine_speed, probe_ms

    roomy = TorchBackend("tiny", num_blocks=64, block_size=16, device="cpu", dtype="float32", threads=1)
    roomy.warmup()
    ms = probe_ms(roomy, seconds=0.2)
    assert ms > 0 and roomy.pool.num_free == 64 and roomy.steps == []
    assert probe_ms(TorchBackend("tiny", num_blocks=28, block_size=16, threads=1), seconds=0.2) is None
    speed = machine_speed(2.0, 3.0, None)
    assert speed["before_over_calibration"] == 1.5 and speed["after_over_calibration"] is None
    assert machine_speed(None, 3.0, 3.0)["before_over_calibration"] is None
