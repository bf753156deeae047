"""Micro-benchmark calibration: profiles on disk, timing, the CLI, the GPU check script's CPU path."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from simbatch.calibrate.points import decode_contexts, make_grid
from simbatch.catalog.models import MODEL_PRESETS
from simbatch.catalog.profiles import (
    COLUMNS,
    FORMAT,
    OP_SCOPES,
    Profile,
    read_profile,
    write_profile,
)
from simbatch.cli import main
from simbatch.errors import SimbatchError

ROOT = Path(__file__).resolve().parents[1]
GPU_CHECK = ROOT / "calibration" / "gpu_check.sh"
NO_TORCH = "simbatch: error: calibrate: needs torch: pip install torch==2.13.0 (or 'simbatch[torch]')"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed (pip install torch==2.13.0)")


def toy_profile() -> Profile:
    """A hand-made three-row profile (no torch needed)."""
    header = {"format": FORMAT, "source": "measured",
              "device": {"kind": "cpu", "name": "test", "torch": None, "driver": None, "clocks": None},
              "dtype": "float32", "tensor_parallel": 1,
              "model": {"name": "tiny", "num_layers": 4, "hidden_size": 256, "num_heads": 4, "num_kv_heads": 2,
                        "head_dim": 64, "intermediate_size": 688, "vocab_size": 2048, "gated_mlp": True},
              "created": "2026-11-30T21:00:00Z", "quick": True, "notes": ["made by hand: a note"]}
    rows = [("qkv_proj", "layer", 1, 0, 1, 1.0, 1, 1e-5, 9e-6, 2e-5, 5),
            ("qkv_proj", "layer", 64, 0, 1, 1.0, 1, 4e-5, 3.5e-5, 5e-5, 5),
            ("attn_decode", "layer", 8, 512, 8, 2.5, 1, 3.25e-4, 3e-4, 4e-4, 7)]
    return Profile(header, pd.DataFrame(rows, columns=COLUMNS))


@pytest.fixture(scope="module")
def quick_tiny(tmp_path_factory):
    """A quick CPU calibration of the tiny model (one thread: steady on a busy machine)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (pip install torch==2.13.0)")
    from simbatch.calibrate import calibrate

    out = tmp_path_factory.mktemp("cal") / "tiny"
    start = time.perf_counter()
    path, _ = calibrate(MODEL_PRESETS["tiny"], "cpu", quick=True, out=out, threads=1, progress=PROGRESS.append)
    return path, time.perf_counter() - start


PROGRESS: list[str] = []  # what quick_tiny's calibration reported


@needs_torch
def test_calibration_progress_counts_each_phase_to_its_total_with_an_eta(quick_tiny):
    import re

    numbered = [re.match(r"(operators|steps) (\d+)/(\d+), ETA \d+:\d\d: ", line) for line in PROGRESS]
    for phase in ("operators", "steps"):
        counts = [(int(m[2]), int(m[3])) for m in numbered if m and m[1] == phase]
        total = counts[0][1]
        assert counts == [(k, total) for k in range(1, total + 1)], (phase, counts)


@needs_torch
def test_quick_calibration_writes_a_valid_profile(quick_tiny):
    path, wall_s = quick_tiny
    profile = read_profile(path)
    h, m = profile.header, profile.measurements
    assert h["source"] == "measured" and h["dtype"] == "float32" and h["quick"] is True
    assert h["device"]["kind"] == "cpu" and h["device"]["threads"] == 1 and h["device"]["torch"]
    assert h["model"]["name"] == "tiny" and h["tensor_parallel"] == 1
    assert set(m["op"]) == set(OP_SCOPES) - {"allreduce"}
    assert any("allreduce not measured" in n for n in h["notes"])
    assert m["num_tokens"][m["op"] == "qkv_proj"].agg(["min", "max"]).tolist() == [1, 8192]
    prefill = m[m["op"] == "attn_prefill"]
    assert (prefill["context_tokens"] == 0).any() and (prefill["context_tokens"] > 0).any()
    assert (m.loc[m["op"] == "attn_decode", "context_spread"] > 1).any()
    assert wall_s < 45  # operators, then whole steps and a short engine run on the backend


@needs_torch
def test_timing_statistics_are_sane(quick_tiny):
    m = read_profile(quick_tiny[0]).measurements
    assert (m[["median_s", "p10_s", "p90_s"]] > 0).all().all()
    assert (m["p10_s"] <= m["median_s"]).all() and (m["median_s"] <= m["p90_s"]).all()
    assert (m["repeats"] >= 3).all()
    qkv = m[m["op"] == "qkv_proj"].set_index("num_tokens")["median_s"]
    assert qkv[8192] > 10 * qkv[1]  # 8192 rows cost more than one


@needs_torch
def test_timer_against_a_known_sleep():
    import torch

    from simbatch.calibrate.timing import Timer, summarize

    stats = Timer(torch.device("cpu"), warmup=1, max_repeats=5, min_repeats=3, budget_s=0.05).measure(
        lambda: time.sleep(0.002))
    assert 0.002 <= stats.p10_s <= stats.median_s <= stats.p90_s < 0.05 and 3 <= stats.repeats <= 5
    assert summarize([3.0, 1.0, 2.0]).median_s == 2.0


@needs_torch
def test_attention_masks_match_the_reference():
    """A chunk attends to its cache and causally to itself; packed GQA decode equals SDPA's own GQA."""
    import torch
    import torch.nn.functional as F

    from simbatch.backends.torch_layers import chunk_mask
    from simbatch.calibrate.bench_attention import prefill_call

    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    q, k, v = randn(1, 4, 3, 8), randn(1, 2, 7, 8), randn(1, 2, 7, 8)
    reference = torch.tensor([[j <= 4 + i for j in range(7)] for i in range(3)])  # 4 cached, 3 new
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=reference, enable_gqa=True)
    assert torch.allclose(prefill_call(q, k, v, ctx=4)(), expected, atol=1e-6)
    assert chunk_mask(2, 3, torch.device("cpu")).tolist() == [[True] * 4 + [False], [True] * 5]
    qd, kd, vd = randn(2, 4, 1, 8), randn(2, 2, 5, 8), randn(2, 2, 5, 8)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, None, :]
    packed = F.scaled_dot_product_attention(qd.view(2, 2, 2, 8), kd, vd, attn_mask=mask).reshape(2, 4, 1, 8)
    plain = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask, enable_gqa=True)
    assert torch.allclose(packed, plain, atol=1e-6)


def test_grids_are_dense_where_curves_bend_and_capped_by_memory():
    small = MODEL_PRESETS["small"]
    full, quick = make_grid(small, False, 4, 2**36), make_grid(small, True, 4, 2**36)
    assert full.tokens[0] == 1 and full.tokens[-1] == 8192 and full.tokens == sorted(set(full.tokens))
    assert {64, 128, 192, 256, 512} <= set(full.tokens) and len(quick.tokens) < len(full.tokens) / 2
    assert all(q + c <= small.max_context for q, c in full.prefill) and not full.dropped
    capped = make_grid(small, False, 4, 2**28)  # 256 MiB free: the big points go
    assert capped.tokens[-1] < 8192 and capped.dropped
    contexts = decode_contexts(8, 1024, 8.0)
    assert sum(contexts) / 8 == pytest.approx(1024, abs=1)
    assert max(contexts) / min(contexts) == pytest.approx(8, rel=0.01)


def test_profile_round_trip_and_atomic_replace(tmp_path):
    path = write_profile(toy_profile(), tmp_path / "p")
    back = read_profile(path)
    assert back.header == toy_profile().header
    pd.testing.assert_frame_equal(back.measurements, toy_profile().measurements, check_dtype=False)
    assert read_profile(path / "profile.yaml").header == back.header  # the yaml file itself works too
    (path / "fit_report.csv").write_text("stale\n")
    write_profile(back, path)  # replaces the folder whole: the stale fit report goes
    assert sorted(p.name for p in path.iterdir()) == ["measurements.csv", "profile.yaml"]
    assert [p.name for p in tmp_path.iterdir()] == ["p"]  # no temp folders left behind
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(SimbatchError, match="not a profile folder"):
        write_profile(back, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def _edit(path: Path, name: str, old: str, new: str) -> None:
    text = (path / name).read_text()
    assert old in text, (old, text)
    (path / name).write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("name, old, new, message", [
    ("profile.yaml", "format: simbatch-profile/1", "format: other/2", "profile.yaml:1: format: expected"),
    ("profile.yaml", "hidden_size: 256", "hidden_size: -1", "profile.yaml:6: model.hidden_size: must be a positive"),
    ("profile.yaml", "dtype: float32\n", "", "profile.yaml: dtype: missing"),
    ("profile.yaml", "source: measured", "source: [unclosed", "profile.yaml:3: not valid YAML"),
    ("measurements.csv", "attn_decode,layer", "attn_magic,layer", "measurements.csv:4: op: unknown operator"),
    ("measurements.csv", ",4e-05,", ",-4e-05,", "measurements.csv:3: median_s: must be > 0"),
    ("measurements.csv", ",4e-05,", ",fast,", "measurements.csv:3: median_s: expected a number"),
    ("measurements.csv", ",1e-05,9e-06,", ",1e-05,2e-05,", "measurements.csv:2: p10_s <= median_s <= p90_s"),
    ("measurements.csv", ",repeats\n", "\n", "measurements.csv: missing column(s) repeats"),
])
def test_bad_profiles_fail_with_one_line(tmp_path, capsys, name, old, new, message):
    path = write_profile(toy_profile(), tmp_path / "p")
    _edit(path, name, old, new)
    with pytest.raises(SimbatchError) as err:
        read_profile(path)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert main(["calibrate", "--report", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_report_of_a_missing_profile_is_one_line(tmp_path, capsys):
    assert main(["calibrate", "--report", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == f"simbatch: error: {tmp_path / 'nowhere'}: no such profile folder\n"


def test_calibrate_without_torch_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    assert main(["calibrate", "--model", "tiny", "--quick", "--out", str(tmp_path / "p")]) == 2
    assert capsys.readouterr().err == NO_TORCH + "\n"
    assert not (tmp_path / "p").exists()


def test_validate_without_torch_names_validate(tmp_path, monkeypatch, capsys):
    """It said "calibrate: needs torch", naming a command the user did not run (issue 15)."""
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["validate", str(ROOT / "scenarios" / "validate_cpu.yaml"), "--out", str(tmp_path / "v")]) == 2
    assert capsys.readouterr().err == NO_TORCH.replace("calibrate:", "validate:") + "\n"
    assert not (tmp_path / "v").exists()


def test_simulator_core_never_imports_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import simbatch.cli, simbatch.catalog.profiles, simbatch.calibrate, simbatch.calibrate.points\n"
            "from simbatch.cli import main; sys.exit(main(['calibrate', '--model', 'tiny']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          check=False)
    assert done.returncode == 2 and done.stderr == NO_TORCH + "\n"


@needs_torch
def test_report_of_a_measured_profile(quick_tiny, capsys):
    assert main(["calibrate", "--report", str(quick_tiny[0])]) == 0
    out = capsys.readouterr().out
    assert "tiny on " in out and "qkv_proj" in out and "attn_decode" in out


def test_gpu_check_script_parses_and_needs_an_output_folder():
    assert subprocess.run(["bash", "-n", str(GPU_CHECK)], check=False).returncode == 0
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(["bash", str(GPU_CHECK)], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 2 and "usage" in done.stderr


@needs_torch
def test_gpu_check_script_cpu_path_end_to_end(tmp_path):
    env = dict(os.environ, SIMBATCH_GPU_CHECK_DEVICE="cpu", SIMBATCH_GPU_CHECK_MODELS="tiny", PYTHON=sys.executable)
    done = subprocess.run(["bash", str(GPU_CHECK), str(tmp_path), "--threads", "1"], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    profile = read_profile(tmp_path / "calibration" / "profiles" / "cpu-tiny-float32-tp1")
    assert profile.header["quick"] is True and len(profile.measurements) > 50
    assert (tmp_path / "nvidia-smi.txt").exists() and "tiny done" in (tmp_path / "gpu_check.log").read_text()


@needs_torch
def test_allreduce_rows_from_two_processes():
    """The all-reduce harness (NCCL on GPUs) run over gloo on CPU: every rank makes the same calls."""
    import torch

    from simbatch.calibrate.bench_misc import allreduce_rows
    from simbatch.calibrate.timing import Timer

    rows = allreduce_rows(2, "cpu", torch.float32, 64, [1, 256], Timer(torch.device("cpu"), 1, 3, 3, 0.1))
    assert [(r["op"], r["num_tokens"], r["tensor_parallel"]) for r in rows] == [("allreduce", 1, 2),
                                                                                 ("allreduce", 256, 2)]
    assert all(0 < r["p10_s"] <= r["median_s"] <= r["p90_s"] for r in rows)


@needs_torch
def test_calibrate_refuses_a_non_profile_folder_before_measuring(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    start = time.perf_counter()
    assert main(["calibrate", "--model", "tiny", "--quick", "--out", str(tmp_path)]) == 2
    assert time.perf_counter() - start < 5 and (tmp_path / "keep.txt").read_text() == "mine"
    assert capsys.readouterr().err == f"simbatch: error: {tmp_path}: exists and is not a profile folder " \
                                      "(no profile.yaml); choose another output folder\n"


@pytest.mark.parametrize("model", ["tiny", "small"])
def test_shipped_cpu_profiles_are_full_and_valid(model):
    profile = read_profile(ROOT / "calibration" / "profiles" / f"cpu-{model}-float32-tp1")
    h, m = profile.header, profile.measurements
    assert h["quick"] is False and h["dtype"] == "float32" and h["model"]["name"] == model
    assert h["model"]["hidden_size"] == MODEL_PRESETS[model].hidden_size
    # every operator a cost model prices from (the speed probe came later: shipped profiles predate it)
    assert set(m["op"]) == set(OP_SCOPES) - {"allreduce", "speed_probe"} and m["num_tokens"].max() == 8192
    assert any(n.startswith("load average") for n in h["notes"])


def test_report_without_the_fitting_side_prints_the_raw_summary(tmp_path, monkeypatch, capsys):
    from simbatch.commands import calibrate as command

    monkeypatch.setattr(command, "_fit_functions", lambda: None)
    path = write_profile(toy_profile(), tmp_path / "p")
    assert main(["calibrate", "--report", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "tiny on test, float32, quick" and out[2].split()[:3] == ["qkv_proj", "2", "1-64"]


@needs_torch
def test_backend_terms_are_fitted_from_whole_steps(quick_tiny):
    """The quick calibration timed whole canonical plans on the torch backend; the cost model
    fits what its operators miss from them, and reproduces those plans far better with it."""
    from simbatch.costmodel.profile import canonical_plan
    from simbatch.costmodel.profile_fit import fit_profile_model

    profile = read_profile(quick_tiny[0])
    m = profile.measurements
    forward = m[m["op"] == "step_forward"]
    assert len(forward) >= 10 and len(m[m["op"] == "step_host"]) == len(forward)
    assert (forward["batch_size"] > 1).any() and (forward["context_tokens"] == 0).any()
    assert (m.loc[m["op"] == "step_overhead", "batch_size"] > 1).any()  # measured on the real engine
    # the machine-speed probe, for validate to compare with (one row, a second of repeats)
    probe = m[m["op"] == "speed_probe"]
    assert len(probe) == 1 and probe["repeats"].iloc[0] >= 2 and probe["median_s"].iloc[0] > 0
    cost = fit_profile_model(profile, "tiny", "a100-80gb")
    terms = cost.backend_terms
    assert terms["forward"]["step"] > 0 and all(v >= 0 for v in terms["forward"].values())
    assert sum(terms["host"].values()) > 0 and all(v >= 0 for v in terms["host"].values())
    table = terms["table"]
    assert len(table) == len(forward)
    # a fit to its own (noisy) calibration plans: well within 25 %, and better than the operators alone
    assert table["ape"].median() < 0.25 and table["ape"].median() < table["operators_ape"].median()
    # the terms land in misc (forward) and overhead (host), and the parts still add up
    plan = canonical_plan(4, 4, 128)
    c = cost.step_cost(plan)
    assert c.seconds == pytest.approx(sum(c.breakdown.values()))
    assert "step_forward" in cost.describe()["measured"] and "backend_terms" in cost.describe()


def test_canonical_plans_and_backend_features():
    from simbatch.costmodel.profile import backend_features, canonical_plan

    decode = canonical_plan(8, 8, 100)
    assert decode.num_decode_slots == 8 and decode.num_batched_tokens == 8
    prefill = canonical_plan(64, 1, 0)
    assert prefill.num_decode_slots == 0 and prefill.num_new_tokens == [64]
    mixed = canonical_plan(40, 5, 256)
    assert mixed.num_decode_slots == 4 and mixed.num_new_tokens == [1, 1, 1, 1, 36]
    assert backend_features(mixed) == (1.0, 5.0, 40.0, 4 * 257.0, 256.0)
    with pytest.raises(ValueError):
        canonical_plan(2, 3, 0)


def test_profiles_without_step_rows_price_as_before(tmp_path):
    """Old profiles (no step_forward rows) have no backend terms: nothing changes for them."""
    from simbatch.costmodel import build_cost_model

    cm = build_cost_model({"kind": "profile"}, "llama-2-7b", "a100-80gb")
    assert cm.backend_terms is None and "backend_terms" not in cm.describe()
