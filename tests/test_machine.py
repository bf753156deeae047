"""A profile is used for validation only on the machine it was measured on (issue 16, item 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from simbatch.catalog.machine import machine_differences, machine_notes
from simbatch.catalog.models import get_model
from simbatch.validation.profile import find_profile, predicting_cost_model, profile_mismatch

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "calibration" / "profiles" / "cpu-tiny-float32-tp1"
XEON = {"kind": "cpu", "name": "Intel(R) Xeon(R) Processor (2 cores)", "torch": "2.13.0+cpu", "driver": None,
        "cuda": None, "clocks": None, "threads": 1, "isa": ["avx2", "avx512f", "amx_tile"]}
H100 = {"kind": "h100-80gb-hbm3", "name": "NVIDIA H100 80GB HBM3", "torch": "2.13.0", "cuda": "12.8",
        "driver": "570.1", "clocks": {"clocks_max_sm_mhz": 1980}, "threads": 16, "memory_gib": 79.1,
        "capability": "9.0"}


def test_same_machine_matches_and_each_identity_field_counts():
    assert machine_differences(dict(XEON), XEON) == []
    assert machine_differences({**XEON, "name": "AMD EPYC (2 cores)"}, XEON) == [
        "name: AMD EPYC (2 cores) there, Intel(R) Xeon(R) Processor (2 cores) here"]
    assert machine_differences({**XEON, "isa": ["avx2"]}, XEON) == ["isa: avx2 there, avx2+avx512f+amx_tile here"]
    assert machine_differences({**XEON, "threads": 2}, XEON) == ["threads: 2 there, 1 here"]
    old = {k: v for k, v in XEON.items() if k != "isa"}  # a profile written before isa was recorded
    assert machine_differences(old, XEON) == ["isa: not recorded in the profile, avx2+avx512f+amx_tile here"]


def test_gpus_compare_memory_capability_and_cuda_but_only_note_driver_and_clocks():
    assert machine_differences({**H100, "driver": "550.0", "clocks": None, "threads": 2}, H100) == []
    assert machine_notes({**H100, "driver": "550.0"}, H100) == ["driver: 550.0 there, 570.1 here"]
    assert machine_differences({**H100, "memory_gib": 93.6, "cuda": "12.4"}, H100) == [
        "memory_gib: 93.6 there, 79.1 here", "cuda: 12.4 there, 12.8 here"]


def _profile_for(tmp_path: Path, device: dict) -> Path:
    """A copy of the shipped tiny profile, relabelled as measured on ``device``."""
    path = tmp_path / "calibration" / "profiles" / "cpu-tiny-float32-tp1"
    shutil.copytree(SHIPPED, path)
    header = yaml.safe_load((path / "profile.yaml").read_text())
    header["device"] = device
    (path / "profile.yaml").write_text(yaml.safe_dump(header, sort_keys=False))
    return path


def test_the_shipped_profile_names_its_machine_and_is_not_taken_for_another():
    tiny = get_model("tiny", "model")
    why = profile_mismatch(SHIPPED, tiny, "float32", XEON)
    assert "name: AMD EPYC (2 cores) there, Intel(R) Xeon(R) Processor (2 cores) here" in why
    assert profile_mismatch(SHIPPED, tiny, "bfloat16", XEON)[0] == "dtype: float32 there, bfloat16 here"


def test_find_profile_takes_this_machines_profile_and_says_why_not_others(tmp_path, monkeypatch):
    tiny = get_model("tiny", "model")
    monkeypatch.chdir(tmp_path)
    mine = _profile_for(tmp_path, XEON)
    found, rejected = find_profile(tiny, "float32", XEON)
    assert found is not None and found.resolve() == mine.resolve()
    (mine / "profile.yaml").write_text((mine / "profile.yaml").read_text().replace("threads: 1", "threads: 2"))
    found, rejected = find_profile(tiny, "float32", XEON)
    assert found is None or found.resolve() != mine.resolve()
    assert rejected[str(mine.resolve())] == ["threads: 2 there, 1 here"]


def test_a_named_profile_from_elsewhere_is_used_with_a_warning():
    said = []
    choice = predicting_cost_model(get_model("tiny", "model"), "a100-80gb", "cpu", "float32", 1, SHIPPED, 0,
                                   said.append, XEON)
    assert not choice.calibrated_now and choice.path == SHIPPED and choice.cost_model.name == "profile"
    assert choice.differences and not choice.as_json()["matches"]
    assert len(said) == 1 and said[0].startswith(f"warning: --profile {SHIPPED} was measured elsewhere (name: ")
