"""Scenario loading, overrides and the one-line errors for bad fields."""

import pytest

from simbatch.errors import SimbatchError
from simbatch.scenario.overrides import apply_overrides
from simbatch.scenario.spec import from_dict, load_scenario

BASE = {
    "name": "t",
    "workload": {"requests": [{"prompt": 10, "output": 2}]},
    "model": "llama-2-7b",
    "hardware": "a100-80gb",
    "policy": {"kind": "continuous", "max_num_seqs": 64},
}


def test_override_sets_nested_fields_with_yaml_types():
    data = apply_overrides(BASE, ["policy.max_num_seqs=8", "slo.ttft_ms=250.5", "cluster.replicas=2"])
    assert data["policy"]["max_num_seqs"] == 8
    assert data["slo"] == {"ttft_ms": 250.5}
    assert data["cluster"] == {"replicas": 2}
    assert BASE["policy"]["max_num_seqs"] == 64  # the input is not modified


def test_switching_policy_kind_drops_old_parameters():
    data = apply_overrides(BASE, ["policy.batch_size=4", "policy.kind=static"])
    assert data["policy"] == {"kind": "static", "batch_size": 4}
    from_dict(data)  # max_num_seqs is gone, so static accepts it


@pytest.mark.parametrize("data, where, cause", [
    ({**BASE, "polcy": {}}, "x.yaml: polcy", "unknown field"),
    ({**BASE, "policy": {"kind": "fifo"}}, "x.yaml: policy.kind", "allowed: static, dynamic, continuous, chunked_prefill"),
    ({**BASE, "policy": {"kind": "static", "max_num_seqs": 3}}, "x.yaml: policy.max_num_seqs", "allowed: batch_size, max_wait_s"),
    ({**BASE, "policy": {"kind": "continuous", "max_num_seqs": 0}}, "x.yaml: policy.max_num_seqs", "must be >= 1"),
    ({**BASE, "policy": {"kind": "continuous", "max_num_seqs": 2.5}}, "x.yaml: policy.max_num_seqs", "expected an integer"),
    ({**BASE, "kv_cache": {"mode": "huge"}}, "x.yaml: kv_cache.mode", "allowed: paged, max_length"),
    ({**BASE, "slo": {"ttft_ms": -1}}, "x.yaml: slo.ttft_ms", "must be > 0"),
    ({**BASE, "seed": -3}, "x.yaml: seed", "non-negative integer"),
    ({k: v for k, v in BASE.items() if k != "model"}, "x.yaml: model", "missing"),
    # name becomes the default output folder (runs/<name>-sweep): never a path
    ({**BASE, "name": "../../x"}, "x.yaml: name", "would be a path"),
    ({**BASE, "name": "/tmp/x"}, "x.yaml: name", "would be a path"),
    ({**BASE, "name": ".hidden"}, "x.yaml: name", "would be a path"),
    ({**BASE, "name": ["a", "b"]}, "x.yaml: name", "non-empty string"),
    ({**BASE, "description": {"a": 1}}, "x.yaml: description", "expected text"),
    ({**BASE, "policies": {"dynamic": {"max_batch_size": 2, "preferred_batch_sizes": [4]}}},
     "x.yaml: policies.dynamic.preferred_batch_sizes", "outside 1..max_batch_size"),
])
def test_bad_fields_name_the_file_and_field(data, where, cause):
    with pytest.raises(SimbatchError) as err:
        from_dict(data, "x.yaml")
    assert err.value.where == where
    assert cause in err.value.cause
    assert "\n" not in str(err.value)


def test_yaml_syntax_error_names_the_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\npolicy: {kind: static\nmodel: m\n")
    with pytest.raises(SimbatchError) as err:
        load_scenario(p)
    assert err.value.where.startswith(f"{p}:")
    assert "invalid YAML" in err.value.cause


def test_missing_scenario_file():
    with pytest.raises(SimbatchError, match="scenario file not found"):
        load_scenario("no/such/file.yaml")


def test_with_policy_takes_parameters_from_policies_section():
    sc = from_dict({**BASE, "policies": {"static": {"batch_size": 3}}})
    assert sc.with_policy("static").data["policy"] == {"batch_size": 3, "kind": "static"}
    assert sc.with_policy("continuous").data["policy"] == {"kind": "continuous", "max_num_seqs": 64}
    assert sc.with_policy("dynamic").data["policy"] == {"kind": "dynamic"}


def test_a_bad_model_or_gpu_is_caught_when_the_scenario_is_read_not_when_it_runs():
    for field, value in (("model", "llama-9-1t"), ("hardware", "a900")):
        with pytest.raises(SimbatchError) as err:
            from_dict({**BASE, field: value}, "x.yaml")
        assert err.value.where == f"x.yaml: {field}"


def test_the_scenario_is_parsed_once_into_frozen_specs_that_runs_read(monkeypatch):
    """Every policy (top level, each replica group, each disaggregated pool) and the
    controller are parsed by from_dict; building and running the scenario never parses
    them again, and the specs cannot be changed behind the raw mapping's back."""
    import dataclasses

    import simbatch.control.params
    import simbatch.policies
    from simbatch.api import run
    from tests.test_disaggregation import scenario_data

    grouped = {**BASE, "workload": {"requests": [{"prompt": 40, "output": 3}] * 6},
               "cluster": {"replicas": [{"count": 1}, {"count": 1, "policy": {"kind": "chunked_prefill"}}]},
               "slo": {"ttft_ms": 500}, "control": {"kind": "slo"}}
    split = scenario_data([{"prompt": 40, "output": 3}] * 6)
    scenarios = [from_dict(grouped, "g.yaml"), from_dict(split, "d.yaml")]
    sc = scenarios[0]
    assert [p.kind for p in sc.group_policies] == ["continuous", "chunked_prefill"]
    assert sc.group_policies[1].field == "cluster.replicas[1].policy"
    assert sc.control is not None and sc.control.kind == "slo"
    assert {k: p.kind for k, p in scenarios[1].disaggregation.policies.items()} == {
        "prefill": "continuous", "decode": "continuous"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        sc.model = None

    def refuse(*args, **kwargs):
        raise AssertionError("parsed again while running")

    # Replace the functions' code, so that every reference to them refuses, however imported.
    for parser in (simbatch.policies.parse_policy, simbatch.control.params.parse_control):
        monkeypatch.setattr(parser, "__code__", refuse.__code__)
    for scenario in scenarios:
        assert run(scenario).requests["finish_s"].notna().all()
