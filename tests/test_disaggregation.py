"""Prefill/decode disaggregation: order of prefill, transfer and decode; conservation; KV; bytes; inputs."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simbatch.api import compare, run
from simbatch.catalog.links import LINKS, get_link
from simbatch.catalog.models import get_model
from simbatch.cli import main
from simbatch.engine.disaggregation.build import run_pools
from simbatch.engine.simulation import simulate
from simbatch.metrics.requests import REQUEST_COLUMNS
from simbatch.scenario.spec import from_dict, load_scenario
from tests.logkit import assert_same_disaggregated_logs

ROOT = Path(__file__).resolve().parents[1]
KV_PER_TOKEN = get_model("llama-2-7b").kv_bytes_per_token


def scenario_data(requests=None, **disaggregation) -> dict:
    """Llama-2-7B on A100s, 2 prefill + 2 decode replicas over PCIe unless told otherwise."""
    section = {"prefill": {"replicas": 2}, "decode": {"replicas": 2}, "link": "pcie", **disaggregation}
    workload = {"requests": requests} if requests is not None else {"synthetic": {
        "num_requests": 240, "arrival": {"kind": "gamma", "rate": 20.0, "cv": 3.0},
        "prompt": {"kind": "lognormal", "median": 700, "sigma": 0.9, "min": 2, "max": 3000},
        "output": {"kind": "lognormal", "median": 60, "sigma": 1.0, "min": 1, "max": 600}}}
    return {"workload": workload, "model": "llama-2-7b", "hardware": "a100-80gb", "cluster": {"replicas": 4},
            "policy": {"kind": "continuous", "max_num_seqs": 64, "max_num_batched_tokens": 8192},
            "cost_model": {"kind": "roofline"}, "slo": {"ttft_ms": 500, "tpot_ms": 50},
            "disaggregation": section}


def small_gpu(gib: float) -> dict:
    """An A100 with ``gib`` GiB: Llama-2-7B's 12.6 GiB of weights leave a small KV cache."""
    return {"base": "a100-80gb", "memory_bytes": int(gib * 2**30)}


def pools(log, num_prefill: int):
    """Masks of the log's steps on the prefill pool (replicas < num_prefill) and the decode pool."""
    rep = log.step_table()["replica"]
    return rep < num_prefill, rep >= num_prefill


def test_transfer_starts_after_prefill_ends_and_decode_after_transfer_ends():
    log = simulate(from_dict(scenario_data())).log
    sent = log.decode_replica >= 0
    assert sent.sum() > 200  # every request with more than one output token
    # The first token is the prefill replica's; the transfer starts no earlier, the decode after it.
    assert (log.transfer_start_s[sent] >= log.first_token_s[sent]).all()
    assert (log.transfer_end_s[sent] > log.transfer_start_s[sent]).all()
    assert (log.decode_start_s[sent] >= log.transfer_end_s[sent]).all()
    # ... and the link was contended: some transfers queued behind another from the same replica.
    assert (log.transfer_start_s[sent] > log.first_token_s[sent]).sum() > 10
    for p in (0, 1):  # one transfer at a time per prefill replica: intervals never overlap
        mine = sent & (log.replica == p)
        order = np.argsort(log.transfer_start_s[mine])
        starts, ends = log.transfer_start_s[mine][order], log.transfer_end_s[mine][order]
        assert (starts[1:] >= ends[:-1]).all()


def test_first_token_comes_from_the_prefill_replica_and_the_rest_from_the_decode_replica():
    log = simulate(from_dict(scenario_data())).log
    table = log.step_table()
    ends = table["start_s"] + table["duration_s"]
    runs = pd.DataFrame({"req": log.run_request, "rep": log.run_replica})
    first_run = runs.groupby("req")["rep"].first()
    assert (first_run.to_numpy() == log.replica[first_run.index]).all()
    later = runs[runs.duplicated("req")]
    assert (later["rep"].to_numpy() == log.decode_replica[later["req"]]).all()
    assert np.isin(log.first_token_s, ends[table["replica"] < 2]).all()  # TTFT ends a prefill step


def test_every_request_is_prefilled_once_and_decoded_once_with_exactly_its_output_tokens():
    data = scenario_data()
    result = simulate(from_dict(data))
    log, wl = result.log, result.workload
    assert not np.isnan(log.finish_s).any() and not log.num_preemptions.any()
    assert (log.num_emitted == wl.output_tokens).all()
    table, (on_prefill, on_decode) = log.step_table(), pools(result.log, 2)
    # Prefill replicas computed exactly the prompts routed to them, and decoded nothing.
    by_prefill = np.bincount(log.replica, weights=wl.prompt_tokens, minlength=2)
    assert (np.bincount(table["replica"][on_prefill], weights=table["prefill_tokens"][on_prefill],
                        minlength=2) == by_prefill).all()
    assert table["decode_tokens"][on_prefill].sum() == 0
    # Decode replicas computed output - 1 tokens per request (the first came with the prefill).
    sent = log.decode_replica >= 0
    assert (sent == (wl.output_tokens > 1)).all()
    want = np.bincount(log.decode_replica[sent] - 2, weights=wl.output_tokens[sent] - 1, minlength=2)
    got = table["prefill_tokens"][on_decode] + table["decode_tokens"][on_decode]
    assert (np.bincount(table["replica"][on_decode] - 2, weights=got, minlength=2) == want).all()


def test_one_token_requests_finish_on_the_prefill_replica_without_a_transfer():
    requests = [{"prompt": 100, "output": 1, "arrival_s": 0.0}, {"prompt": 100, "output": 5, "arrival_s": 0.0}]
    log = simulate(from_dict(scenario_data(requests))).log
    # round robin: request 1 is the first the decode pool routes, so it goes to decode replica 0 of 2
    assert log.decode_replica.tolist() == [-1, 2]
    assert log.finish_s[0] == log.first_token_s[0] and np.isnan(log.transfer_start_s[0])
    assert log.num_emitted.tolist() == [1, 5] and log.kv_bytes.tolist() == [0, 100 * KV_PER_TOKEN]


def test_kv_stays_within_capacity_on_both_pools_and_is_all_returned():
    data = scenario_data(prefill={"replicas": 1, "hardware": small_gpu(16.0)},
                         decode={"replicas": 2, "hardware": small_gpu(16.5)})
    result, replicas = run_pools(from_dict(data))
    log = result.log
    assert not np.isnan(log.finish_s).any() and (log.num_emitted == result.workload.output_tokens).all()
    assert log.num_preemptions.sum() > 0  # decode memory was short: the test exercised pressure
    table = log.step_table()
    capacity = np.asarray(log.kv_capacity_blocks)[table["replica"]]
    assert (table["kv_used_blocks"] <= capacity).all()
    assert (table["kv_used_blocks"] > 0.8 * capacity).any()
    assert all(r.policy.kv.num_used == 0 for r in replicas)  # transfers released the prefill's blocks


def test_prefill_keeps_the_kv_until_the_transfer_ends():
    # Room for one 1,500-token prompt at a time on the prefill replica, a slow link: the second
    # request's prefill must wait for the first one's transfer to end, not just its prefill.
    requests = [{"prompt": 1500, "output": 4, "arrival_s": 0.0}, {"prompt": 1500, "output": 4, "arrival_s": 0.0}]
    data = scenario_data(requests, prefill={"replicas": 1, "hardware": small_gpu(15.2)},
                         decode={"replicas": 1}, link={"bandwidth_gbps": 8, "latency_us": 5})
    result, replicas = run_pools(from_dict(data))
    log = result.log
    assert replicas[0].policy.kv.num_blocks * 16 < 3000  # the two prompts do not fit together
    assert log.first_scheduled_s[1] >= log.transfer_end_s[0] > log.first_token_s[0] + 0.5


@pytest.mark.parametrize("tp_prefill, tp_decode, lanes", [(1, 1, 1), (2, 2, 2), (2, 1, 1)])
def test_bytes_and_transfer_time_follow_the_formula(tp_prefill, tp_decode, lanes):
    requests = [{"prompt": 100 + 37 * i, "output": 3, "arrival_s": 0.5 * i} for i in range(6)]
    data = scenario_data(requests, prefill={"replicas": 1, "tensor_parallel": tp_prefill},
                         decode={"replicas": 1, "tensor_parallel": tp_decode}, link="infiniband")
    out = run(from_dict(data))
    log, link = out.result.log, LINKS["infiniband-hdr"]
    prompts = np.array([r["prompt"] for r in requests])
    assert log.kv_bytes.tolist() == (prompts * KV_PER_TOKEN).tolist()
    want = link.latency_s + prompts * KV_PER_TOKEN / (link.bandwidth * lanes)
    assert np.allclose(log.transfer_end_s - log.transfer_start_s, want, rtol=1e-12)
    section = out.summary["disaggregation"]
    assert section["kv_bytes_transferred"] == float(prompts.sum() * KV_PER_TOKEN)
    assert section["num_transfers"] == 6 and section["gpus"] == tp_prefill + tp_decode
    # summary's hardware describes the first pool (the prefill), not cluster.tensor_parallel (1)
    assert out.summary["hardware"]["tensor_parallel"] == section["prefill"]["tensor_parallel"] == tp_prefill
    assert np.allclose(out.requests["transfer_ms"], want * 1e3)


def test_link_presets_and_custom_links():
    assert get_link("nvlink").bandwidth == 300e9 and get_link("pcie").bandwidth == 25e9
    assert get_link("infiniband-ndr").bandwidth == 50e9
    custom = get_link({"bandwidth_gbps": 100, "latency_us": 2})
    assert custom.bandwidth == 12.5e9 and custom.latency_s == 2e-6
    assert get_link({"base": "pcie-gen5", "latency_us": 0}).bandwidth == 50e9
    assert custom.transfer_seconds(25e9, lanes=2) == pytest.approx(1.0 + 2e-6)


def test_summary_section_and_request_columns_report_each_stage():
    out = run(from_dict(scenario_data()))
    req, section = out.requests, out.summary["disaggregation"]
    done = req["completed"] & (req["decode_replica"] >= 0)
    for key, column in (("prefill_queue_ms", "queue_ms"), ("transfer_wait_ms", "transfer_wait_ms"),
                        ("transfer_ms", "transfer_ms"), ("decode_queue_ms", "decode_queue_ms")):
        assert section[key]["p99"] == pytest.approx(np.percentile(req[column][done], 99))
    assert section["prefill"]["replicas"] == 2 and section["decode"]["policy"] == "continuous"
    assert 0 < section["prefill"]["busy_frac"] < 1 and 0 < section["decode"]["kv_peak_frac"] < 1
    pools_of = [r["pool"] for r in out.summary["replicas"]]
    assert pools_of == ["prefill", "prefill", "decode", "decode"]
    decoded = [r["requests"] for r in out.summary["replicas"][2:]]
    assert sum(decoded) == int((req["decode_replica"] >= 0).sum())
    assert out.summary["hardware"]["gpus"] == 4 and out.summary["hardware"]["replicas"] == 4


@pytest.mark.parametrize("transfer", ["push", "pull"])
@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_fast_path_gives_identical_results(kind, transfer):
    data = scenario_data(decode={"replicas": 2, "hardware": small_gpu(16.5)}, transfer=transfer)
    data["policy"] = {"kind": kind, "max_num_seqs": 64}
    sc = from_dict(data)
    assert_same_disaggregated_logs(simulate(sc).log, simulate(sc, fast_forward=False).log)


def test_colocated_layout_is_unchanged_by_the_feature():
    with_section = scenario_data(enabled=False)
    without = {k: v for k, v in with_section.items() if k != "disaggregation"}
    a, b = run(from_dict(with_section)), run(from_dict(without))
    assert a.result.log.decode_replica is None and list(a.requests.columns) == list(REQUEST_COLUMNS)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert a.summary == b.summary and "disaggregation" not in a.summary


def test_compare_puts_layouts_side_by_side_at_equal_gpu_count():
    sc = load_scenario(ROOT / "scenarios" / "disaggregated.yaml", ["workload.synthetic.num_requests=300"])
    runs, table = compare(sc, jobs=1)
    assert table["policy"].tolist() == ["colocated", "disaggregated"]
    assert table["gpus"].tolist() == [4, 4] and table["completed"].tolist() == [300, 300]
    assert np.allclose(table["goodput_per_gpu"], table["goodput"] / 4)
    assert "disaggregation" in runs["disaggregated"].summary and "disaggregation" not in runs["colocated"].summary
    runs, table = compare(sc, ["chunked_prefill"], jobs=1)
    assert table["policy"].tolist() == ["chunked_prefill+colocated", "chunked_prefill+disaggregated"]
    assert runs["chunked_prefill+disaggregated"].summary["disaggregation"]["decode"]["policy"] == "chunked_prefill"


def test_a_pools_policy_of_another_kind_is_dropped_by_with_policy():
    data = scenario_data(decode={"replicas": 2, "policy": {"kind": "continuous", "max_num_seqs": 8}})
    sc = from_dict(data)
    assert sc.disaggregation.policy_spec("decode", data["policy"])["max_num_seqs"] == 8
    assert sc.disaggregation.policy_spec("decode", data["policy"])["mix_prefill_decode"] is True
    other = sc.with_policy("chunked_prefill")
    assert other.disaggregation.decode.policy is None
    assert other.disaggregation.policy_spec("decode", other.data["policy"])["kind"] == "chunked_prefill"


BAD = [
    ("  link: warp-drive\n", 14, "disaggregation.link", "unknown link"),
    ("  link: {bandwidth_gbps: -3}\n", 14, "disaggregation.link.bandwidth_gbps", "> 0"),
    ("  link: {latency_us: 3}\n", 14, "disaggregation.link.bandwidth_gbps", "missing"),
    ("  link: nvlink\n  prefill: {replicas: 0}\n", 15, "disaggregation.prefill.replicas", ">= 1"),
    ("  link: nvlink\n  decode: {policy: {kind: static}}\n", 15, "disaggregation.decode.policy.kind",
     "an iteration-level policy"),
    ("  link: nvlink\n  decode: {hardware: tpu-v9}\n", 15, "disaggregation.decode.hardware", "unknown GPU"),
    ("  link: nvlink\n  router: fastest\n", 15, "disaggregation.router", "unknown router"),
    ("  link: nvlink\n  layouts: [split]\n", 15, "disaggregation.layouts", "unknown layout"),
    ("  link: nvlink\n  pools: 2\n", 15, "disaggregation.pools", "unknown field"),
    ("  prefill: {replicas: 1}\n", 13, "disaggregation.link", "missing"),
    ("  link: nvlink\n  transfer: teleport\n", 14, "disaggregation.transfer.mode", "unknown mode"),
    ("  link: nvlink\n  transfer: {mode: pull, max_waiting_share: 0}\n", 14,
     "disaggregation.transfer.max_waiting_share", "(0, 1]"),
    ("  link: nvlink\n  transfer: {mode: pull, share: 0.1}\n", 14, "disaggregation.transfer.share", "unknown field"),
    ("  link: nvlink\n  transfer: [pull]\n", 14, "disaggregation.transfer", "expected push, pull"),
]


@pytest.mark.parametrize("section, line, field, cause", BAD)
def test_bad_input_names_file_line_and_field(tmp_path, capsys, section, line, field, cause):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nworkload:\n  requests:\n    - {prompt: 10, output: 4}\nmodel: llama-2-7b\n"
                    "hardware: a100-80gb\npolicy:\n  kind: continuous\ncluster:\n  replicas: 2\n"
                    "slo: {ttft_ms: 500}\ndisaggregation:\n" + section)
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{path}:" in err and f": {field}" in err and cause in err, err
    assert not (tmp_path / "o").exists()


def test_a_top_level_policy_a_pool_cannot_run_names_the_policy_field():
    data = scenario_data()
    data["policy"] = {"kind": "static"}
    with pytest.raises(Exception, match=r"<scenario>: policy\.kind: a disaggregated prefill pool runs"):
        from_dict(data)
    data["disaggregation"]["enabled"] = False  # the colocated layout may run any policy
    assert from_dict(data).is_disaggregated is False


@pytest.mark.parametrize("mode", ["hash", "session"])
def test_the_prefill_pool_reuses_cached_prefixes_and_still_sends_the_whole_prompt(mode):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from prefixkit import shared_prefix_requests

    from simbatch.api import run
    from simbatch.scenario.spec import from_dict

    reqs = shared_prefix_requests(2, num_requests=200, rate=8.0, mode=mode)

    def split(caching: bool):
        return run(from_dict({
            "workload": {"requests": reqs}, "model": "llama-2-7b", "hardware": "a100-80gb",
            "cost_model": {"kind": "roofline"}, "kv_cache": {"prefix_caching": caching, "hash_block_size": 64},
            "policy": {"kind": "chunked_prefill"},
            "disaggregation": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}, "link": "nvlink"}})).summary

    off, on = split(False), split(True)
    assert on["completed"] == off["completed"] == 200
    assert on["prefix_cache"]["token_hit_rate"] > 0.2 and off["prefix_cache"] is None
    # cached tokens skip prefill compute, but the decode replica still needs the whole prompt's KV
    assert on["disaggregation"]["prefill"]["busy_frac"] < off["disaggregation"]["prefill"]["busy_frac"]
    assert on["disaggregation"]["kv_bytes_transferred"] == off["disaggregation"]["kv_bytes_transferred"]
