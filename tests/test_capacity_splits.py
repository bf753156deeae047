"""Capacity search over split layouts whose pools differ in TP and pipeline stages (issue 17,
item 4): parsing ``--splits``, the candidates, their GPU counts, and what a run of one uses."""

from __future__ import annotations

import pandas as pd
import pytest

from simbatch.api import run
from simbatch.capacity import expand
from simbatch.capacity.candidates import Candidate, PoolShape, candidate_scenario
from simbatch.capacity.plan import check_candidates
from simbatch.cli import main
from simbatch.commands.capacity import _splits
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import from_dict

from tests.test_capacity import SCENARIO, capacity_splits_cli  # the same tiny scenario


def tiny(**extra) -> object:
    import yaml

    return from_dict({**yaml.safe_load(SCENARIO), **extra})


def test_splits_parse_counts_and_each_sides_own_layout():
    assert _splits("colocated,1:3,1tp2:2tp1pp2,2:1pp2") == [
        None, (1, 3), (PoolShape(1, 2), PoolShape(2, 1, 2)), (PoolShape(2), PoolShape(1, None, 2))]
    assert _splits(None) is None


@pytest.mark.parametrize("item", ["1tp0:1", "1:2:3", "tp2:1", "1xtp2:1", "1pp2tp2:1", "1:", "0:1"])
def test_bad_splits_are_one_line_errors_with_exit_2(tmp_path, capsys, item):
    with pytest.raises(SimbatchError, match="--splits"):
        _splits(item)
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    assert main(["capacity", str(path), "--splits", item, "--executor", "inline"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("simbatch: error: --splits") and "\n" not in err


def test_pools_of_different_tp_and_stages_count_every_gpu():
    sc = tiny()
    split = (PoolShape(1, 2), PoolShape(3, 1, 2))
    # Both pools fix their layouts, so --tp 1,2 gives one candidate, not two alike.
    (cand,) = expand(sc, ["continuous"], None, None, [1, 2], [2], [split])
    assert cand.gpus_per_replica == 1 * 2 + 3 * 1 * 2
    assert cand.split_name == "1P(tp2)+3D(tp1pp2)" and cand.layout_name == ""
    assert cand.label() == "continuous on a100-80gb llama-2-7b x2 of 1P(tp2)+3D(tp1pp2)"
    dis = candidate_scenario(sc, cand, 1.0, 0).disaggregation
    assert (dis.prefill.replicas, dis.prefill.tensor_parallel, dis.prefill.pipeline_parallel) == (2, 2, 1)
    assert (dis.decode.replicas, dis.decode.tensor_parallel, dis.decode.pipeline_parallel) == (6, 1, 2)
    # A side without its own TP takes each --tp in turn.
    loose = expand(sc, ["continuous"], None, None, [1, 2], [1], [(PoolShape(1), PoolShape(1, 4))])
    assert [(c.pool_layouts, c.gpus_per_replica) for c in loose] == [(((1, 1), (4, 1)), 5), (((2, 1), (4, 1)), 6)]


def test_a_pool_without_a_layout_in_splits_keeps_the_scenarios_own():
    sc = tiny(disaggregation={"link": "nvlink", "decode": {"tensor_parallel": 2, "pipeline_parallel": 2}})
    (cand,) = expand(sc, ["continuous"], None, None, [1], [1], [(1, 1)])
    assert cand.pool_layouts == ((1, 1), (2, 2)) and cand.gpus_per_replica == 1 + 4
    (same,) = expand(tiny(), ["continuous"], None, None, [2], [1], [(1, 1)])
    assert same.pools is None and same.split_name == "1P+1D" and same.gpus_per_replica == 4


def test_colocated_pipeline_candidates_count_tp_times_pp():
    sc = tiny(cluster={"pipeline_parallel": 2})
    cands = expand(sc, ["continuous"], None, None, [2], [3], None)
    assert [(c.pp, c.gpus_per_replica, c.label()) for c in cands] == [
        (2, 4, "continuous on a100-80gb llama-2-7b tp2pp2 x3")]
    assert candidate_scenario(sc, cands[0], 1.0, 0).cluster.pipeline_parallel == 2
    (one,) = expand(sc, ["continuous"], None, None, [2], [3], None, pps=[1])
    assert one.gpus_per_replica == 2 and candidate_scenario(sc, one, 1.0, 0).cluster.pipeline_parallel == 1


def test_a_split_is_checked_as_its_pools_not_as_the_colocated_cluster():
    """Llama-3-70B does not fit one H100; pools of TP4 and of TP2 x two stages do."""
    sc = tiny(model="llama-3-70b", hardware="h100-sxm")
    fits = Candidate("continuous", None, None, 1, 1, (1, 1), 1, ((4, 1), (2, 2)))
    too_many_stages = Candidate("continuous", None, None, 1, 1, (1, 1), 1, ((4, 1), (1, 81)))
    colocated = Candidate("continuous", None, None, 1, 1)
    workloads = [sc.build_workload(0)]
    _, skipped = check_candidates(sc, [fits, too_many_stages, colocated], workloads)
    assert fits not in skipped
    assert "81 stages for llama-3-70b's 80 layers" in skipped[too_many_stages]
    assert "leave no room" in skipped[colocated]


def test_capacity_gpu_counts_match_what_the_runs_count(tmp_path, capsys):
    out = capacity_splits_cli(tmp_path, "colocated,1tp2:1tp1pp2")
    text = capsys.readouterr().out
    assert "of 1P(tp2)+1D(tp1pp2)" in text
    table = pd.read_csv(out / "capacity.csv").set_index("split")
    row = table.loc["1P(tp2)+1D(tp1pp2)"]
    assert (row["prefill_tp"], row["prefill_pp"], row["decode_tp"], row["decode_pp"]) == (2, 1, 1, 2)
    assert row["gpus_per_replica"] == 4 and row["gpus"] == 4 * row["replicas"]
    assert row["target_gpus"] == 4 * row["target_replicas"]
    assert row["usd_per_hour"] == pytest.approx(4 * row["usd_per_gpu_hour"])
    assert table.loc["colocated", "gpus"] == 1
    # The run a probe makes of that candidate uses exactly the GPUs the table counts.
    cand = Candidate("continuous", None, None, 1, 2, (1, 1), 1, ((2, 1), (1, 2)))
    summary = run(candidate_scenario(tiny(), cand, 1.0, 0)).summary
    assert summary["hardware"]["gpus"] == summary["disaggregation"]["gpus"] == cand.gpus_per_replica * 2 == 8
    probes = pd.read_csv(out / "probes.csv")
    assert set(probes["split"]) == {"colocated", "1P(tp2)+1D(tp1pp2)"}
