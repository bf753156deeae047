"""A non-editable install works as the README says: bundled scenario names resolve.

Builds the wheel from this checkout (no network: the build uses the setuptools already
installed), installs it into a temporary folder, and runs the CLI from an empty working
directory with only that folder ahead of the installed dependencies, so neither the
source tree nor an editable install can supply the scenarios.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from wheelkit import ROOT, build_wheel, copy_checkout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools", reason="building the wheel needs setuptools")
    tmp = tmp_path_factory.mktemp("wheel")
    site = tmp / "site"
    with zipfile.ZipFile(build_wheel(tmp)) as z:
        z.extractall(site)  # a wheel is installed by unpacking it (PEP 427)
    return site


def simbatch(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-m", "simbatch", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_wheel_ships_every_bundled_scenario(installed):
    shipped = {p.name for p in (installed / "simbatch" / "scenarios").glob("*.yaml")}
    assert shipped == {p.name for p in (ROOT / "scenarios").glob("*.yaml")}


def test_bundled_names_resolve_after_a_plain_install(installed, tmp_path):
    out = simbatch(installed, tmp_path, "run", "one_batch", "--out", "out")
    assert out.returncode == 0, out.stderr
    assert "== one_batch: static" in out.stdout and "slots used 35.9 %" in out.stdout
    assert (tmp_path / "out" / "summary.json").is_file()
    where = subprocess.run([sys.executable, "-c", "import simbatch.files.bundled as b; print(b.bundled_dir())"],
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(installed)},
                           capture_output=True, text=True)
    assert where.stdout.strip() == str(installed / "simbatch" / "scenarios")


def test_a_clone_reads_its_own_scenarios(installed, tmp_path):
    """After ``pip install .`` in a clone, names resolve to the clone's scenarios/ (whose
    trace scenarios point at ``../shared`` beside the clone, as the wheel's copy cannot)."""
    clone = copy_checkout(tmp_path / "clone")
    (clone / "runs").mkdir()
    for cwd, expected in ((clone / "runs", clone / "scenarios"), (tmp_path, installed / "simbatch" / "scenarios")):
        where = subprocess.run([sys.executable, "-c", "import simbatch.files.bundled as b; print(b.bundled_dir())"],
                               cwd=cwd, env={**os.environ, "PYTHONPATH": str(installed)},
                               capture_output=True, text=True)
        assert where.stdout.strip() == str(expected), where.stderr
    scenario = subprocess.run([sys.executable, "-c", "from simbatch.files.bundled import resolve_scenario_path as r; "
                               "print(r('prefix_cache'))"], cwd=clone, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(installed)})
    assert scenario.stdout.strip() == str(clone / "scenarios" / "prefix_cache.yaml"), scenario.stderr


def test_a_bundled_trace_scenario_says_where_its_trace_goes(installed, tmp_path):
    """Outside a clone, azure_conv's ../../shared trace path lies inside site-packages: the
    one-line error says the trace is not shipped and how to point at it (issue 33)."""
    out = simbatch(installed, tmp_path, "run", "azure_conv", "--out", "o")
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1, out.stderr
    assert err[0].startswith(f"simbatch: error: {installed / 'simbatch' / 'scenarios' / 'azure_conv.yaml'}:8: "
                             f"workload.trace: AzureLLMInferenceTrace_conv.csv is not in this installation")
    assert "--set workload.trace=/path/to/AzureLLMInferenceTrace_conv.csv" in err[0]
    assert "shared/traces/AzureLLMInferenceTrace_conv.csv" not in err[0] and not (tmp_path / "o").exists()


def test_list_names_the_wheels_scenarios(installed, tmp_path):
    out = simbatch(installed, tmp_path, "list")
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()[:-1]] == \
        sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))
