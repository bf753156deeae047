"""Accelerators: the handful of datasheet figures a roofline cost model needs.

Figures come from the vendor datasheets (see ``shared/reference/README.md``).
Units are SI and decimal for rates (bytes/s, FLOP/s), as datasheets quote
them. Memory is binary: an "80GB" card gets 80 GiB, because that is what the
driver reports for it (``nvidia-smi`` shows 81920 MiB on an A100 80GB) and what
KV-cache sizing in vLLM works from. The H200's "141 GB" becomes 141 GiB under
the same rule, about 0.5% more than the ~140.4 GiB its driver reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from simbatch.errors import SimbatchError
from simbatch.presets import spec_values

GiB = 1 << 30
GB = 1e9
TFLOPS = 1e12


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
        GPUSpec("a100-40gb", 40 * GiB, 1555 * GB, 312 * TFLOPS, 300 * GB, _NVLINK_LATENCY, 0.0, 624 * TFLOPS),
        GPUSpec("a100-80gb", 80 * GiB, 2039 * GB, 312 * TFLOPS, 300 * GB, _NVLINK_LATENCY, 0.0, 624 * TFLOPS),
        # The PCIe card (HBM2e at 1,935 GB/s, 300 W) pairs over a 600 GB/s (both
        # directions) NVLink bridge, as in Sarathi-Serve's Azure NC96ads v4 nodes.
        GPUSpec("a100-80gb-pcie", 80 * GiB, 1935 * GB, 312 * TFLOPS, 300 * GB, _NVLINK_LATENCY, 0.0, 624 * TFLOPS),
        GPUSpec("h100-sxm", 80 * GiB, 3350 * GB, 989 * TFLOPS, 450 * GB, _NVLINK_LATENCY, 1979 * TFLOPS, 1979 * TFLOPS),
        # The PCIe card pairs over a 600 GB/s (both directions) NVLink bridge.
        GPUSpec("h100-pcie", 80 * GiB, 2000 * GB, 756 * TFLOPS, 300 * GB, _NVLINK_LATENCY, 1513 * TFLOPS, 1513 * TFLOPS),
        GPUSpec("h200", 141 * GiB, 4800 * GB, 989 * TFLOPS, 450 * GB, _NVLINK_LATENCY, 1979 * TFLOPS, 1979 * TFLOPS),
        # L4 has no NVLink: PCIe Gen4 x16, 32 GB/s per direction.
        GPUSpec("l4", 24 * GiB, 300 * GB, 121 * TFLOPS, 32 * GB, _PCIE_LATENCY, 242.5 * TFLOPS, 242.5 * TFLOPS),
        # A40 pairs over a 112.5 GB/s (both directions) NVLink bridge.
        GPUSpec("a40", 48 * GiB, 696 * GB, 150 * TFLOPS, 56 * GB, _NVLINK_LATENCY, 0.0, 299.3 * TFLOPS),
    )
}

_ZERO_FIELDS = ("link_latency_s", "fp8_flops", "int8_flops")  # may be 0


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
    return value
