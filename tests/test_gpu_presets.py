"""GPU presets: sane figures, and docs/hardware.md's table says exactly what the presets hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simbatch.catalog.hardware import GB, GPU_PRESETS, TFLOPS, GiB, get_gpu

DOC = Path(__file__).resolve().parent.parent / "docs" / "hardware.md"
COLUMNS = ["preset", "GPU", "memory", "bandwidth", "BF16", "FP8", "INT8", "link", "link kind"]


def _doc_table() -> dict[str, dict[str, float]]:
    """The preset table of docs/hardware.md: preset name -> figures in the presets' units."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("| preset |")]
    assert len(heads) == 1, "docs/hardware.md needs exactly one table headed '| preset |'"
    header = [c.strip() for c in lines[heads[0]].strip().strip("|").split("|")]
    assert header == COLUMNS
    rows: dict[str, dict[str, float]] = {}
    for line in lines[heads[0] + 2:]:
        if not line.startswith("|"):
            break
        cells = dict(zip(COLUMNS, (c.strip() for c in line.strip().strip("|").split("|")), strict=True))
        name = re.fullmatch(r"`([a-z0-9.-]+)`", cells["preset"])
        assert name, f"preset cell must be a `name`: {line}"
        assert name.group(1) not in rows, f"{name.group(1)} listed twice"

        def num(col: str) -> float:
            text = cells[col].replace(",", "")
            return 0.0 if text in ("—", "-", "0") else float(text)

        rows[name.group(1)] = {
            "memory_bytes": num("memory") * GiB,
            "hbm_bandwidth": num("bandwidth") * GB,
            "peak_flops": num("BF16") * TFLOPS,
            "fp8_flops": num("FP8") * TFLOPS,
            "int8_flops": num("INT8") * TFLOPS,
            "link_bandwidth": num("link") * GB,
        }
    return rows


@pytest.mark.parametrize("name", sorted(GPU_PRESETS))
def test_preset_figures_are_sane(name):
    g = GPU_PRESETS[name]
    assert g.name == name
    # The marketed GB as GiB, or what the driver reports: at most 4 % under it (simbatch/catalog/hardware.py).
    assert g.memory_bytes > 0
    assert g.memory_bytes % GiB == 0 or 0.96 < g.memory_bytes / (round(g.memory_bytes / GiB / 8) * 8 * GiB) < 1
    assert g.hbm_bandwidth > 0 and g.peak_flops > 0 and g.link_bandwidth > 0
    assert g.link_latency_s > 0
    # 8-bit tensor cores, where present, are at least as fast as 16-bit ones.
    assert g.fp8_flops == 0 or g.fp8_flops >= g.peak_flops
    assert g.int8_flops == 0 or g.int8_flops >= g.peak_flops
    # Per GPU, not per board: no single GPU has over 1 TB, 20 TB/s or 10 PFLOPS dense BF16.
    assert g.memory_bytes < 1024 * GiB and g.hbm_bandwidth < 20e12 and g.peak_flops < 10e15


def test_docs_table_lists_every_preset_and_nothing_else():
    assert set(_doc_table()) == set(GPU_PRESETS)


def test_docs_table_figures_match_the_presets():
    for name, row in _doc_table().items():
        g = GPU_PRESETS.get(name)
        assert g is not None, f"docs/hardware.md lists {name}, which is not a preset"
        for field, value in row.items():
            rel = 5e-5 if field == "memory_bytes" else 1e-9  # the RTX 4090's bytes, shown as 23.516 GiB
            assert getattr(g, field) == pytest.approx(value, rel=rel), f"{name}.{field}: docs {value}"


def test_spot_checks_against_vendor_figures():
    # NVIDIA H100 datasheet: BF16 1,979 TFLOPS "with sparsity" -> 989 dense; FP8 3,958* -> 1,979.
    h100 = get_gpu("h100-sxm")
    assert h100.peak_flops == 989 * TFLOPS and h100.fp8_flops == 1979 * TFLOPS
    assert h100.link_bandwidth == 450 * GB  # NVLink 900 GB/s counts both directions
    # NVIDIA HGX B200 table: 180 GB HBM3E at 7.7 TB/s per GPU; 36 PFLOPS BF16 (sparse) per 8 GPUs.
    b200 = get_gpu("b200")
    assert b200.memory_bytes == 180 * GiB and b200.hbm_bandwidth == 7.7e12
    assert b200.peak_flops == 36e15 / 8 / 2
    # NVIDIA GB200 NVL72: 360 PFLOPS BF16 and 720 PFLOPS FP8 (sparse), 576 TB/s, over 72 GPUs.
    gb200 = get_gpu("gb200")
    assert gb200.peak_flops == pytest.approx(360e15 / 72 / 2)
    assert gb200.fp8_flops == pytest.approx(720e15 / 72 / 2)
    assert gb200.hbm_bandwidth == pytest.approx(576e12 / 72)
    # AMD MI300X (ROCm "MI300 series microarchitecture"): 192 GB, 5.3 TB/s, 1,307.4 FP16 and
    # 2,614.9 FP8/INT8 dense; 7 Infinity Fabric links of 64 GB/s per direction.
    mi300x = get_gpu("mi300x")
    assert mi300x.memory_bytes == 192 * GiB and mi300x.hbm_bandwidth == 5.3e12
    assert mi300x.peak_flops == 1307.4 * TFLOPS
    assert mi300x.fp8_flops == mi300x.int8_flops == 2614.9 * TFLOPS
    assert mi300x.link_bandwidth == 7 * 64 * GB
    # NVIDIA L40S datasheet: BF16 362.05 | 733*, FP8 733 | 1,466*; PCIe Gen4 x16 64 GB/s both ways.
    l40s = get_gpu("l40s")
    assert (l40s.peak_flops, l40s.fp8_flops, l40s.link_bandwidth) == (362.05 * TFLOPS, 733 * TFLOPS, 32 * GB)
    # NVIDIA A100 datasheet: INT8 624 TOPS dense, no FP8 tensor cores.
    a100 = get_gpu("a100-80gb")
    assert a100.int8_flops == 624 * TFLOPS and a100.fp8_flops == 0


def test_gpus_without_fp8_tensor_cores():
    # Ampere has INT8 but no FP8 tensor cores; Hopper, Ada, Blackwell and CDNA 3 have both.
    no_fp8 = {n for n, g in GPU_PRESETS.items() if g.fp8_flops == 0}
    assert no_fp8 == {"a100-40gb", "a100-80gb", "a100-80gb-pcie", "a40", "a10", "a10g"}
    assert all(g.int8_flops > 0 for g in GPU_PRESETS.values())
