"""Named variants: compare puts the same workload under a few field settings side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from simbatch.api import compare
from simbatch.cli import main
from simbatch.errors import SimbatchError
from simbatch.scenario.spec import from_dict

ROOT = Path(__file__).resolve().parents[1]


def scenario(variants) -> dict:
    return {
        "workload": {"synthetic": {"num_requests": 60, "arrival": {"kind": "poisson", "rate": 4.0},
                                   "prompt": {"kind": "constant", "value": 300},
                                   "output": {"kind": "constant", "value": 20}}},
        "model": "llama-2-7b", "hardware": "a100-80gb", "cost_model": {"kind": "roofline"},
        "policy": {"kind": "continuous", "max_num_seqs": 32},
        "variants": variants,
    }


def test_each_variant_is_its_scenario_with_the_fields_set():
    sc = from_dict(scenario({"small": {"policy.max_num_seqs": 2}, "h100": {"hardware": "h100-sxm"}}))
    assert sc.variants == ["small", "h100"]
    small = sc.with_variant("small")
    assert small.data["policy"] == {"kind": "continuous", "max_num_seqs": 2} and "variants" not in small.data
    runs, table = compare(sc, jobs=1)
    assert table["policy"].tolist() == ["small", "h100"]
    assert runs["small"].summary["policy"]["max_num_seqs"] == 2
    assert runs["h100"].summary["hardware"]["name"] == "h100-sxm"
    # fewer seats on the same GPU cannot be faster at the tail
    assert table["e2el_p99_ms"][0] > runs["h100"].summary["e2el_ms"]["p99"]


def test_variants_times_policies_name_both():
    sc = from_dict(scenario({"a": {"seed": 1}, "b": {"seed": 2}}))
    _, table = compare(sc, ["continuous", "chunked_prefill"], jobs=1)
    assert table["policy"].tolist() == ["continuous+a", "continuous+b", "chunked_prefill+a", "chunked_prefill+b"]


@pytest.mark.parametrize("variants, where", [
    ({"bad": {"policy.max_num_seqs": 0}}, "variants.bad"),
    ({"bad": {"kv_cache.mode": "weird"}}, "variants.bad"),
    ({"bad": [1, 2]}, "variants.bad"),
    ([], "variants"),
])
def test_a_bad_variant_fails_when_the_scenario_loads(variants, where):
    with pytest.raises(SimbatchError) as err:
        from_dict(scenario(variants), "s.yaml")
    assert err.value.where == f"s.yaml: {where}"


def test_cli_selects_variants_and_rejects_unknown_ones(capsys):
    path = str(ROOT / "scenarios" / "slo_control.yaml")
    small = ["--set", "workload.synthetic.num_requests=200"]
    assert main(["compare", path, *small, "--variants", "fixed_512,controlled", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "fixed_512" in out and "controlled" in out and "fixed_4096" not in out
    assert main(["compare", path, *small, "--variants", "nope"]) == 2
    assert "--variants" in capsys.readouterr().err
