"""Clusters and routing: requests are conserved, routers do what they say, groups get their own setup."""

from pathlib import Path

import numpy as np
import pytest
import simpy
import yaml

from simbatch.api import compare, run
from simbatch.cli import main
from simbatch.engine.dispatcher import dispatch
from simbatch.engine.replica import Replica
from simbatch.policies.routers import ROUTERS, StepClock, make_router
from simbatch.engine.simulation import simulate
from simbatch.core.eventlog import EventLog
from simbatch.core.kvcache import KVCache
from simbatch.core.params import parse_params
from simbatch.policies import POLICIES
from simbatch.scenario.spec import from_dict, load_scenario
from simbatch.core.sequence import Sequence
from simkit import RecordingBackend, workload_of

ROOT = Path(__file__).resolve().parents[1]
# The routers cluster_routing.yaml compares: prefix_aware needs a prefix cache, which it has not.
LOAD_ROUTERS = tuple(r for r in ROUTERS if r != "prefix_aware")


def simulate_cluster(router: str, triples, replicas: list[dict]):
    """Run ``triples`` over replicas described as ``{kind, params, kv_blocks, backend}``; each
    replica gets its own RecordingBackend (so its plans say what it computed)."""
    workload = workload_of(triples)
    log = EventLog(len(workload), len(replicas))
    env = simpy.Environment()
    seqs = [None] * len(workload)
    reps, backends = [], []
    for i, spec in enumerate(replicas):
        cls = POLICIES[spec.get("kind", "continuous")]
        policy = cls(parse_params(cls.Params, spec.get("params", {}), "policy"),
                     KVCache(spec.get("kv_blocks", 10_000), 16), note=log.note)
        backend = spec.get("backend") or RecordingBackend()
        backends.append(backend)
        reps.append(Replica(env, i, policy, StepClock(backend, env), log, seqs))
    env.process(dispatch(env, workload, reps, seqs, log, make_router(router, reps)))
    env.run()
    return log, backends


def tokens_by_replica(log, column: str, num_replicas: int) -> np.ndarray:
    """Sum of a step column per replica, from the log (what each replica computed)."""
    t = log.step_table()
    return np.bincount(t["replica"], weights=t[column], minlength=num_replicas)


def skewed(n: int = 40):
    """Every other request is long (400 output tokens), the rest short (4), 0.25 s apart:
    round-robin over two replicas puts every long one on replica 0."""
    return [(0.25 * i, 64, 400 if i % 2 == 0 else 4) for i in range(n)]


def two_replicas() -> list[dict]:
    """Two alike replicas whose steps cost 10 ms + 1 ms a token (a bigger batch is slower)."""
    return [{"backend": RecordingBackend(0.01, 1e-3)} for _ in range(2)]


@pytest.mark.parametrize("router", ROUTERS)
def test_every_request_is_served_exactly_once_on_the_replica_the_log_names(router):
    triples = [(0.003 * i, 20 + (37 * i) % 300, 2 + (13 * i) % 60) for i in range(120)]
    log, _ = simulate_cluster(router, triples, [{}, {}, {"params": {"max_num_seqs": 2}}])
    where = log.replica
    assert ((where >= 0) & (where < 3)).all() and len(set(where.tolist())) == 3
    assert (log.num_emitted == [o for _, _, o in triples]).all() and not log.num_preemptions.any()
    # Each replica computed exactly the prompts and decodes of the requests routed to it: none twice, none lost.
    prompts = np.array([p for _, p, _ in triples])
    decodes = np.array([o - 1 for _, _, o in triples])
    assert (tokens_by_replica(log, "prefill_tokens", 3) == np.bincount(where, weights=prompts, minlength=3)).all()
    assert (tokens_by_replica(log, "decode_tokens", 3) == np.bincount(where, weights=decodes, minlength=3)).all()
    runs_on = np.asarray(log.run_replica)
    assert (runs_on == log.replica[np.asarray(log.run_request)]).all()  # tokens come from that replica


def reference_round_robin(env, workload, replicas, seqs, log):
    """Round robin written out: the k-th request routed goes to replica k mod N; a rejected
    request takes no turn (production-stack's counter advances per routed request)."""
    limit, routed = replicas[0].policy.max_request_tokens(), 0
    log.arrival_s[:] = workload.arrival_s
    for i, t in enumerate(workload.arrival_s.tolist()):
        if t > env.now:
            yield env.timeout(t - env.now)
        p, o = int(workload.prompt_tokens[i]), int(workload.output_tokens[i])
        if limit is not None and p + o > limit:
            continue
        seqs[i] = Sequence(i, t, p, o)
        log.replica[i] = routed % len(replicas)
        replicas[routed % len(replicas)].submit(seqs[i])
        routed += 1


def test_round_robin_gives_turns_to_routed_requests_only():
    sc = load_scenario(ROOT / "scenarios" / "chat.yaml", ["workload.synthetic.num_requests=300",
                                                          "cluster.replicas=3", "workload.rate_scale=4",
                                                          "policy.max_num_batched_tokens=2048"])
    new = simulate(sc)
    import simbatch.engine.simulation as simulation

    original = simulation.dispatch
    simulation.dispatch = (lambda env, w, reps, seqs, log, router, request_s=0.0, window=None, fleet=None:  # no front end here
                           reference_round_robin(env, w, reps, seqs, log))
    try:
        old = simulate(sc)
    finally:
        simulation.dispatch = original
    assert (new.log.replica == old.log.replica).all() and (new.log.replica == -1).any()  # some rejected
    for name in ("first_token_s", "finish_s", "num_emitted"):
        assert np.array_equal(getattr(new.log, name), getattr(old.log, name), equal_nan=True)
    assert new.log.step_table()["start_s"].tolist() == old.log.step_table()["start_s"].tolist()


def imbalance(log, backends) -> float:
    """Busiest replica's computed tokens over the least busy one's."""
    work = tokens_by_replica(log, "prefill_tokens", 2) + tokens_by_replica(log, "decode_tokens", 2)
    return work.max() / work.min()


def test_least_outstanding_balances_a_skewed_workload_better_than_round_robin():
    rr_log, rr = simulate_cluster("round_robin", skewed(), two_replicas())
    lo_log, lo = simulate_cluster("least_outstanding", skewed(), two_replicas())
    assert (rr_log.replica[0::2] == 0).all()  # every long request on replica 0
    assert imbalance(rr_log, rr) > 5
    assert imbalance(lo_log, lo) < 2
    long_e2el = [(log.finish_s - log.arrival_s)[0::2].mean() for log in (rr_log, lo_log)]
    assert long_e2el[1] < 0.8 * long_e2el[0]  # long requests no longer share one replica's steps


@pytest.mark.parametrize("router", ["least_kv", "latency_aware"])
def test_load_aware_routers_also_balance_the_skewed_workload(router):
    # Long requests hold more KV blocks (least_kv) and make their replica's steps longer, so
    # a newcomer waits longer there for the step in flight (latency_aware).
    rr_log, rr = simulate_cluster("round_robin", skewed(), two_replicas())
    log, backends = simulate_cluster(router, skewed(), two_replicas())
    assert imbalance(log, backends) < imbalance(rr_log, rr) / 2


def test_ties_go_to_the_lowest_replica_index():
    # Requests far apart: each finds every replica idle, so every score ties.
    for router in ROUTERS[1:]:
        log, _ = simulate_cluster(router, [(10.0 * i, 32, 4) for i in range(6)], [{}, {}, {}])
        assert (log.replica == 0).all(), router


def cluster_scenario(groups, router="round_robin", requests=None, **extra) -> dict:
    return {
        "name": "t",
        "workload": {"requests": requests or [{"prompt": 100 + 10 * i, "output": 20, "arrival_s": 0.05 * i}
                                              for i in range(40)]},
        "model": "llama-2-7b", "hardware": "a100-80gb",
        "cluster": {"replicas": groups, "router": router, **extra},
        "policy": {"kind": "continuous", "max_num_seqs": 64},
        "cost_model": {"kind": "roofline"},
    }


def test_each_group_gets_its_own_gpu_kv_capacity_and_policy():
    data = cluster_scenario([{"count": 2}, {"count": 1, "hardware": "a100-40gb", "policy": {"max_num_seqs": 3}},
                             {"count": 1, "hardware": "l4", "tensor_parallel": 2,
                              "policy": {"kind": "chunked_prefill", "chunk_size": 256}}])
    out = run(from_dict(data))
    caps = out.result.log.kv_capacity_blocks
    assert caps[0] == caps[1] > caps[2] > 0 and caps[3] > 0 and len(set(caps[1:])) == 3
    assert [g.kv_blocks for g in out.result.group_of_replica] == caps
    rows = out.summary["replicas"]
    assert [r["hardware"] for r in rows] == ["a100-80gb", "a100-80gb", "a100-40gb", "l4"]
    assert [r["policy"] for r in rows] == ["continuous"] * 3 + ["chunked_prefill"]
    assert [r["tensor_parallel"] for r in rows] == [1, 1, 1, 2]
    assert out.result.groups[1].policy_params.max_num_seqs == 3  # merged onto the top-level policy
    assert out.summary["hardware"]["replicas"] == 4 and out.result.gpu.name == "a100-80gb"
    assert sum(r["completed"] for r in rows) == out.summary["completed"] == 40
    assert sum(r["request_throughput"] for r in rows) == pytest.approx(out.summary["request_throughput"])
    steps = out.steps.groupby("replica")["kv_used_blocks"].max()
    assert all(steps[r] <= caps[r] for r in steps.index)


def test_mixed_gpus_weigh_mfu_by_each_replicas_peak():
    out = run(from_dict(cluster_scenario([{"count": 1, "hardware": "h100-sxm"}, {"count": 1}],
                                         router="least_outstanding")))
    rows = out.summary["replicas"]
    assert out.result.peak_flops == [out.result.groups[0].gpu.peak_flops, out.result.groups[1].gpu.peak_flops]
    # Cluster MFU = all FLOPs / sum of (busy time x that GPU's peak) = the replicas' MFU so weighted.
    weight = [r["busy_frac"] * g.gpu.peak_flops for r, g in zip(rows, out.result.group_of_replica)]
    expected = sum(r["mfu"] * w for r, w in zip(rows, weight)) / sum(weight)
    assert out.summary["mfu"] == pytest.approx(expected)
    assert rows[0]["mfu"] != pytest.approx(rows[1]["mfu"])


@pytest.mark.parametrize("router", ROUTERS)
def test_no_router_sends_a_request_to_a_replica_that_cannot_serve_it(router):
    # Replica 0 (the H100: faster, so latency_aware prefers it) takes at most 1024 tokens a step.
    requests = [{"prompt": 1500 if i % 3 == 0 else 200, "output": 10, "arrival_s": 0.02 * i} for i in range(60)]
    data = cluster_scenario([{"count": 1, "hardware": "h100-sxm", "policy": {"max_num_batched_tokens": 1024}},
                             {"count": 1}], router=router, requests=requests)
    out = run(from_dict(data))
    req = out.requests
    long = req["prompt_tokens"] > 1024
    assert (req.loc[long, "replica"] == 1).all() and req["completed"].all()
    assert not any("rejected" in m for m in out.messages)
    if router == "latency_aware":
        assert (req.loc[~long, "replica"] == 0).mean() > 0.5  # it does use the faster replica


def test_a_request_no_replica_can_serve_is_rejected_once():
    requests = [{"prompt": 3000, "output": 10}, {"prompt": 100, "output": 10}]
    data = cluster_scenario([{"count": 1, "policy": {"max_num_batched_tokens": 1024}},
                             {"count": 1, "policy": {"max_num_batched_tokens": 2048}}],
                            router="latency_aware", requests=requests)
    out = run(from_dict(data))
    assert out.requests["replica"].tolist() == [-1, 0] and out.summary["completed"] == 1
    assert any("longer than any replica serves (at most 2048" in m for m in out.messages)


def test_kv_capacity_steers_requests_in_a_mixed_cluster():
    # An L4 (24 GB) holds far fewer KV blocks than an A100-80GB: requests too big for it go to the A100.
    l4_tokens = run(from_dict(cluster_scenario([{"count": 1, "hardware": "l4"}]))).result.groups[0].kv_blocks * 16
    requests = [{"prompt": l4_tokens + 100, "output": 10, "arrival_s": 0.1 * i} for i in range(4)]
    requests[0]["prompt"] = 2000
    data = cluster_scenario([{"count": 1, "hardware": "l4"}, {"count": 1}], requests=requests)
    data["policy"] = {"kind": "chunked_prefill"}  # no per-step limit on a prompt's length
    # a window that holds them (Llama-2's 4,096 would refuse them at arrival, under any router)
    data["model"] = {"base": "llama-2-7b", "max_context": 1_000_000}
    out = run(from_dict(data))
    assert out.requests["replica"].tolist() == [0, 1, 1, 1] and out.requests["completed"].all()


def test_an_integer_replica_count_and_set_still_work():
    sc = load_scenario(ROOT / "scenarios" / "cluster_routing.yaml", ["cluster.replicas=3"])
    assert sc.cluster.replicas == 3 and not sc.cluster.is_grouped and sc.cluster.group_of_replica() == [0, 0, 0]
    grouped = load_scenario(ROOT / "scenarios" / "cluster_routing.yaml")
    assert grouped.cluster.replicas == 4 and grouped.cluster.group_of_replica() == [0, 0, 1, 1]


def test_with_policy_drops_group_policies_of_another_kind():
    data = cluster_scenario([{"count": 1, "policy": {"max_num_seqs": 4}},
                             {"count": 1, "policy": {"kind": "chunked_prefill", "chunk_size": 128}}])
    sc = from_dict(data).with_policy("chunked_prefill")
    assert sc.cluster.groups[0].policy is None  # continuous knobs do not carry over
    assert sc.cluster.groups[1].policy == {"kind": "chunked_prefill", "chunk_size": 128}


def test_compare_puts_routers_side_by_side():
    sc = load_scenario(ROOT / "scenarios" / "cluster_routing.yaml", ["workload.synthetic.num_requests=200"])
    runs, table = compare(sc, jobs=1)
    assert list(runs) == list(LOAD_ROUTERS) == table["policy"].tolist()
    assert (table["completed"] == 200).all()
    assert len({tuple(r.requests["replica"]) for r in runs.values()}) == len(LOAD_ROUTERS)  # they route differently
    # without a prefix cache, prefix-aware routing is least-outstanding routing
    again, _ = compare(sc, jobs=1, routers=["least_outstanding", "prefix_aware"])
    assert again["least_outstanding"].requests["replica"].equals(again["prefix_aware"].requests["replica"])
    runs, table = compare(sc, ["continuous", "chunked_prefill"], jobs=1, routers=["round_robin"])
    assert table["policy"].tolist() == ["continuous+round_robin", "chunked_prefill+round_robin"]


BAD = [
    ("  replicas:\n    - {count: 2, hardware: h100-sxm}\n    - {count: 1, hardware: b200-nope}\n",
     5, "cluster.replicas[1].hardware", "b200-nope"),
    ("  replicas:\n    - {count: 0}\n", 4, "cluster.replicas[0].count", "must be >= 1"),
    ("  replicas:\n    - {count: 1, gpus: 2}\n", 4, "cluster.replicas[0].gpus", "unknown field"),
    ("  replicas:\n    - {count: 1}\n    - {count: 1, policy: {kind: continuous, max_num_seqs: 0}}\n",
     5, "cluster.replicas[1].policy.max_num_seqs", "must be >= 1"),
    ("  replicas:\n    - 2\n", 4, "cluster.replicas[0]", "expected a mapping"),
    ("  replicas: []\n", 3, "cluster.replicas", "empty list"),
    ("  replicas: 2\n  router: fastest\n", 4, "cluster.router", "unknown router 'fastest'"),
    ("  replicas: 2\n  routers: [round_robin, nope]\n", 4, "cluster.routers", "unknown router 'nope'"),
]


@pytest.mark.parametrize("cluster, line, field, cause", BAD, ids=[b[2] + ":" + b[3][:12] for b in BAD])
def test_bad_cluster_input_names_file_line_and_field(tmp_path, capsys, cluster, line, field, cause):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\ncluster:\n" + cluster + "workload: {requests: [{prompt: 10, output: 3}]}\n"
                    "model: llama-2-7b\nhardware: a100-80gb\npolicy: {kind: continuous}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"simbatch: error: {path}:{line}: {field}: ") and cause in err and "\n" not in err
    assert not (tmp_path / "o").exists()


def test_bad_router_on_the_command_line_is_a_one_line_error(capsys):
    path = str(ROOT / "scenarios" / "cluster_routing.yaml")
    assert main(["compare", path, "--routers", "fastest"]) == 2
    assert "--routers: unknown router 'fastest'" in capsys.readouterr().err
    assert main(["run", path, "--set", "cluster.router=fastest"]) == 2
    assert "cluster.router (from --set cluster.router): unknown router 'fastest'" in capsys.readouterr().err


def test_the_shipped_scenario_lists_every_router_for_compare():
    data = yaml.safe_load((ROOT / "scenarios" / "cluster_routing.yaml").read_text())
    assert data["cluster"]["routers"] == list(LOAD_ROUTERS)


def test_set_reaches_one_replica_group(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "cluster_routing.yaml", ["cluster.replicas[1].hardware=h100-sxm"])
    assert [g.hardware for g in sc.cluster.groups][1] == "h100-sxm"
    with pytest.raises(Exception, match=r"no list item \[7\]"):
        load_scenario(ROOT / "scenarios" / "cluster_routing.yaml", ["cluster.replicas[7].hardware=h100-sxm"])


def test_prefix_aware_routing_keeps_conversations_where_their_cache_is():
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from prefixkit import shared_prefix_requests

    reqs = shared_prefix_requests(1, num_requests=400, rate=20.0, mode="session")

    def hit_rate(router):
        sc = from_dict({"workload": {"requests": reqs}, "model": "llama-2-7b", "hardware": "a100-80gb",
                        "cost_model": {"kind": "roofline"}, "kv_cache": {"prefix_caching": True},
                        "cluster": {"replicas": 4, "router": router}, "policy": {"kind": "chunked_prefill"}})
        out = run(sc)
        assert out.summary["completed"] == 400
        return out.summary["prefix_cache"]["token_hit_rate"]

    assert hit_rate("prefix_aware") > hit_rate("round_robin") + 0.05


def test_compare_names_every_gpu_of_a_mixed_cluster(capsys):
    path = str(ROOT / "scenarios" / "cluster_routing.yaml")
    assert main(["compare", path, "--routers", "round_robin", "--set", "workload.synthetic.num_requests=100"]) == 0
    assert "llama-2-7b on 2 x h100-sxm + 2 x a100-80gb" in capsys.readouterr().out
