"""Accelerators: the handful of datasheet figures a roofline cost model needs.

Figures come from the vendor datasheets; ``docs/hardware.md`` gives every
preset's figures with its source, how each was converted and which are not
verified (see also ``shared/reference/README.md``). Units are SI and decimal
for rates (bytes/s, FLOP/s), as datasheets quote them. Rates are DENSE: NVIDIA
datasheets footnote many tensor figures "with sparsity" (2:4 structured), and
those are halved here; rack or baseboard totals are divided by the GPU count.

Memory is what the driver reports to PyTorch (``torch.cuda.mem_get_info()``'s
total, which vLLM sizes its KV cache from), where a source gives it for the
card, a little under the card's nominal size:

- A100 80GB (SXM and PCIe): 79.25 GiB ("79.25 GiB total capacity", a PyTorch out-of-memory
  message on an A100 80GB, github.com/levihsu/OOTDiffusion issue 235);
- H100 80GB HBM3: 79.22 GiB (vLLM's "total_gpu_memory (79.22GiB)" start-up line
  on an H100-80G, vllm-project/vllm PR 12126; PyTorch's total_memory of 81,082-
  81,090 MiB in other reports agrees within 0.05 %);
- RTX 4090: 25,250,627,584 bytes (23.52 GiB; ``device_total_memory_bytes`` in
  the metadata of LLMServingSim's vLLM 0.19 run, shared/measured).

The others keep the binary reading of the datasheet ("80GB" as 80 GiB), which
is 1 % to 2 % over what such cards report (the H200's "141 GB" as 141 GiB is
about 0.5 % over its ~140.4 GiB; GDDR6 cards with ECC on, such as L4, A10, A40
and L40S, report about 6 % less): a KV pool sized from them is that much too
large, and more so, relatively, for a model that nearly fills the card.
"""

from __future__ import annotations

from dataclasses import dataclass

from simbatch.catalog.presets import spec_values
from simbatch.errors import SimbatchError

GiB = 1 << 30
GB = 1e9
TFLOPS = 1e12
A100_80GB_REPORTED = 79.25 * GiB  # module docstring: what the driver reports, with its source
H100_80GB_REPORTED = 79.22 * GiB
RTX_4090_REPORTED = 25_250_627_584


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One accelerator.

    ``peak_flops`` is the dense (no sparsity) BF16/FP16 tensor-core rate;
    ``fp8_flops`` and ``int8_flops`` the dense FP8 and INT8 rates (0: the GPU has
    no such tensor cores, and weights in that format are dequantised to 16 bits
    inside the GEMM, as vLLM's Marlin kernels do for FP8 on Ampere).
    ``link_bandwidth`` is the GPU-to-GPU rate in one direction, which is what a
    ring all-reduce is limited by (NVLink datasheet figures count both
    directions, so they are halved here). ``link_latency_s`` is the fixed cost
    of one small all-reduce inside a CUDA graph.
    """

    name: str
    memory_bytes: float
    hbm_bandwidth: float
    peak_flops: float
    link_bandwidth: float
    link_latency_s: float
    fp8_flops: float = 0.0
    int8_flops: float = 0.0


# Link latency, per all-reduce: Vidur's DGX-A100 NCCL profile
# (shared/reference/gpu_profiles/network) shows 16-25 us kernels for small
# all-reduces at TP4/TP8 (~45 us at TP2); vLLM's custom all-reduce, used for
# small messages over NVLink, is faster. 20 us sits between; PCIe is slower.
_NVLINK_LATENCY = 20e-6
_PCIE_LATENCY = 30e-6

GPU_PRESETS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        # name, memory, memory bandwidth, dense BF16, link per direction, latency, dense FP8, dense INT8
        GPUSpec("a100-40gb", 40 * GiB, 1555 * GB, 312 * TFLOPS, 300 * GB, _NVLINK_LATENCY, 0.0, 624 * TFLOPS),
        GPUSpec("a100-80gb", A100_80GB_REPORTED, 2039 * GB, 312 * TFLOPS, 300 * GB, _NVLINK_LATENCY, 0.0, 624 * TFLOPS),
        # The PCIe card (HBM2e at 1,935 GB/s, 300 W) pairs over a 600 GB/s (both
        # directions) NVLink bridge, as in Sarathi-Serve's Azure NC96ads v4 nodes.
        GPUSpec("a100-80gb-pcie", A100_80GB_REPORTED, 1935 * GB, 312 * TFLOPS, 300 * GB, _NVLINK_LATENCY, 0.0, 624 * TFLOPS),
        GPUSpec("h100-sxm", H100_80GB_REPORTED, 3350 * GB, 989 * TFLOPS, 450 * GB, _NVLINK_LATENCY, 1979 * TFLOPS, 1979 * TFLOPS),
        # The PCIe card pairs over a 600 GB/s (both directions) NVLink bridge.
        GPUSpec("h100-pcie", 80 * GiB, 2000 * GB, 756 * TFLOPS, 300 * GB, _NVLINK_LATENCY, 1513 * TFLOPS, 1513 * TFLOPS),
        GPUSpec("h200", 141 * GiB, 4800 * GB, 989 * TFLOPS, 450 * GB, _NVLINK_LATENCY, 1979 * TFLOPS, 1979 * TFLOPS),
        # L4 has no NVLink: PCIe Gen4 x16, 32 GB/s per direction.
        GPUSpec("l4", 24 * GiB, 300 * GB, 121 * TFLOPS, 32 * GB, _PCIE_LATENCY, 242.5 * TFLOPS, 242.5 * TFLOPS),
        # A40 pairs over a 112.5 GB/s (both directions) NVLink bridge.
        GPUSpec("a40", 48 * GiB, 696 * GB, 150 * TFLOPS, 56 * GB, _NVLINK_LATENCY, 0.0, 299.3 * TFLOPS),
        # B200 in an HGX B200 baseboard, per GPU (NVIDIA's HGX table: 180 GB,
        # 7.7 TB/s; 4.5 PFLOPS BF16 and 9 PFLOPS FP8/INT8 with sparsity, halved).
        # NVLink 5: 1.8 TB/s both directions through NVSwitch.
        GPUSpec("b200", 180 * GiB, 7700 * GB, 2250 * TFLOPS, 900 * GB, _NVLINK_LATENCY, 4500 * TFLOPS, 4500 * TFLOPS),
        # B200 in a GB200 NVL72 rack, per GPU: the rack totals / 72 (13.4 TB,
        # 576 TB/s; 360 PFLOPS BF16 and 720 PFLOPS FP8/INT8 with sparsity, halved;
        # 130 TB/s NVLink = 1.8 TB/s both directions per GPU).
        GPUSpec("gb200", 186 * GiB, 8000 * GB, 2500 * TFLOPS, 900 * GB, _NVLINK_LATENCY, 5000 * TFLOPS, 5000 * TFLOPS),
        # AMD figures are dense already (ROCm's MI300 table; sparsity figures are
        # separate). Infinity Fabric: 7 links of 128 GB/s (both directions) to the
        # 7 peers of a fully connected 8-GPU board; 7 x 64 = 448 GB/s per
        # direction is what an 8-way all-reduce can drive, the analogue of NVLink's
        # per-GPU figure (a TP2 pair has one link: 64 GB/s; override for that).
        # No measured xGMI collective latency here: NVLink's value is used.
        GPUSpec("mi300x", 192 * GiB, 5300 * GB, 1307.4 * TFLOPS, 448 * GB, _NVLINK_LATENCY, 2614.9 * TFLOPS, 2614.9 * TFLOPS),
        # Same CDNA 3 compute as MI300X, HBM3E: 256 GB at 6 TB/s.
        GPUSpec("mi325x", 256 * GiB, 6000 * GB, 1307.4 * TFLOPS, 448 * GB, _NVLINK_LATENCY, 2614.9 * TFLOPS, 2614.9 * TFLOPS),
        # L40S: no NVLink, PCIe Gen4 x16 (64 GB/s both directions). Datasheet
        # 733 / 1,466 TFLOPS with sparsity for BF16 / FP8 and INT8, halved.
        GPUSpec("l40s", 48 * GiB, 864 * GB, 362.05 * TFLOPS, 32 * GB, _PCIE_LATENCY, 733 * TFLOPS, 733 * TFLOPS),
        # H20 (Hopper, export variant): no public NVIDIA datasheet; 96 GB HBM3,
        # 4.0 TB/s, 148 / 296 / 296 TFLOPS dense, NVLink 900 GB/s both directions.
        GPUSpec("h20", 96 * GiB, 4000 * GB, 148 * TFLOPS, 450 * GB, _NVLINK_LATENCY, 296 * TFLOPS, 296 * TFLOPS),
        # H100 NVL (PCIe card, per GPU): 1,671 / 3,341 TFLOPS with sparsity,
        # halved; pairs over a 600 GB/s (both directions) NVLink bridge.
        GPUSpec("h100-nvl", 94 * GiB, 3900 * GB, 835.5 * TFLOPS, 300 * GB, _NVLINK_LATENCY, 1670.5 * TFLOPS, 1670.5 * TFLOPS),
        # GeForce RTX 4090 (Ada whitepaper): BF16 and FP8 at the FP32-accumulate
        # rate, which GeForce halves (165.2 and 330.3; FP16-accumulate is twice
        # that). PCIe Gen4 x16, and no peer-to-peer: all-reduce goes via the host.
        GPUSpec("rtx-4090", RTX_4090_REPORTED, 1008 * GB, 165.2 * TFLOPS, 32 * GB, _PCIE_LATENCY, 330.3 * TFLOPS, 660.6 * TFLOPS),
        # A10: PCIe Gen4 x16; 250 / 500 with sparsity, halved; no FP8.
        GPUSpec("a10", 24 * GiB, 600 * GB, 125 * TFLOPS, 32 * GB, _PCIE_LATENCY, 0.0, 250 * TFLOPS),
        # A10G (AWS G5 only): A10's memory, about 70 TFLOPS dense FP16/BF16 tensor
        # (tensor rate not in an NVIDIA datasheet; see docs/hardware.md).
        GPUSpec("a10g", 24 * GiB, 600 * GB, 70 * TFLOPS, 32 * GB, _PCIE_LATENCY, 0.0, 140 * TFLOPS),
    )
}

_ZERO_FIELDS = ("link_latency_s", "fp8_flops", "int8_flops")  # may be 0
# Bounds on a custom GPU's figures, so that simulated time stays within its horizon
# (simbatch.core.horizon): a step's seconds are bytes and FLOPs over these rates, plus latencies.
# No rate below the slowest preset's / 1000 and no latency above the slowest preset's x 1000:
# a step then takes at most a thousand times what it takes on the slowest real GPU here
# (milliseconds to seconds), and a million such steps stay within the horizon (peak_flops
# 1e-300 made a step's seconds infinite). No memory above the largest preset's x 1000
# (256 TiB): 1e308 bytes sized a KV cache of a 309-digit block count.
_SLACK = 1000
_RATES = ("hbm_bandwidth", "peak_flops", "link_bandwidth", "fp8_flops", "int8_flops")
_LOWEST = {k: min(v for g in GPU_PRESETS.values() if (v := getattr(g, k)) > 0) / _SLACK for k in _RATES}
_HIGHEST = {k: max(getattr(g, k) for g in GPU_PRESETS.values()) * _SLACK
            for k in ("memory_bytes", "link_latency_s")}


def get_gpu(name_or_dict: str | dict | GPUSpec, where: str = "gpu") -> GPUSpec:
    """A GPU spec from a preset name (any case), a mapping of fields (optionally
    ``base: <preset>`` plus overrides), or a spec."""
    values = spec_values(GPUSpec, GPU_PRESETS, name_or_dict, "GPU", where, _check_field)
    return values if isinstance(values, GPUSpec) else GPUSpec(**values)


def _check_field(key: str, value, where: str):
    """The checked value of one field (latency may be zero, the rest positive).

    Numeric strings are accepted because PyYAML reads ``2.039e12`` (no sign in
    the exponent) as a string.
    """
    if key == "name":
        if not isinstance(value, str) or not value:
            raise SimbatchError(where, "must be a non-empty string")
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise SimbatchError(where, f"must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise SimbatchError(where, f"must be a number, got {value!r}")
    if value < 0 or (value == 0 and key not in _ZERO_FIELDS) or value == float("inf"):
        raise SimbatchError(where, f"must be positive and finite, got {value!r}")
    if isinstance(value, int) and value.bit_length() > 1023:  # beyond a float: every division overflows
        raise SimbatchError(where, f"must be positive and finite, got an integer of {value.bit_length()} bits")
    _check_bounds(key, value, where)
    return value


def _check_bounds(key: str, value: float, where: str) -> None:
    """Refuse a figure beyond a thousand times the real GPUs' (see ``_SLACK``); 0 passes where
    allowed (no FP8 or INT8 tensor cores, a free link)."""
    if key in _LOWEST and 0 < value < _LOWEST[key]:
        raise SimbatchError(where, f"must be at least {_LOWEST[key]:.3g} (the slowest preset's / {_SLACK}; "
                                   f"a step would take over {_SLACK} times as long as on any real GPU), "
                                   f"got {value!r}")
    if key in _HIGHEST and value > _HIGHEST[key]:
        raise SimbatchError(where, f"must be at most {_HIGHEST[key]:.3g} (the largest preset's x {_SLACK}), "
                                   f"got {value!r}")
