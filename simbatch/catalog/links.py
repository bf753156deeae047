"""Links that carry a request's KV cache from a prefill replica to a decode replica.

A link is a bandwidth (bytes/s, one direction) and a fixed latency per
transfer: a transfer of ``b`` bytes takes ``latency_s + b / bandwidth``.
Figures are *per GPU* (one NVLink port set, one PCIe x16 slot, one NIC):
disaggregated serving systems give each GPU its own NIC (DGX A100/H100: one
200/400 Gb/s HCA per GPU), and a tensor-parallel replica sends each GPU's KV
shard over that GPU's own link (see ``simbatch/engine/disaggregation.py``).

Presets (bandwidth per direction; latency is the order of a transfer's
fixed cost, which is negligible beside the bytes of a prompt's KV cache:
1,000 tokens of Llama-2-7B are 0.5 GB, 20 ms over PCIe Gen4):

- ``nvlink`` / ``nvlink3``: 300 GB/s. NVIDIA A100 datasheet: third-generation
  NVLink, 12 links, 600 GB/s total (both directions), so 300 GB/s each way.
- ``nvlink4``: 450 GB/s. NVIDIA H100 SXM datasheet: 18 fourth-generation links,
  900 GB/s total.
- ``pcie`` / ``pcie-gen4``: 25 GB/s. PCIe 4.0 x16 is 16 GT/s x 16 lanes
  x 128b/130b = 31.5 GB/s per direction (PCI-SIG); about 80 % of that is
  reached by DMA copies in practice (``cudaMemcpy`` bandwidth tests).
- ``pcie-gen5``: 50 GB/s. PCIe 5.0 x16: 63 GB/s per direction, same 80 %.
- ``infiniband`` / ``infiniband-hdr``: 200 Gb/s = 25 GB/s (InfiniBand Trade
  Association roadmap: HDR 4x = 200 Gb/s; ConnectX-6 HDR adapters).
- ``infiniband-ndr``: 400 Gb/s = 50 GB/s (NDR 4x; ConnectX-7, one per GPU in DGX H100).

Splitwise (Patel et al., ISCA 2024) and DistServe (Zhong et al., OSDI 2024)
model the transfer the same way (bytes over the link's bandwidth, layer-wise
overlap left out), on InfiniBand and NVLink respectively.
"""

from __future__ import annotations

from dataclasses import dataclass

from simbatch.errors import SimbatchError

GB = 1e9  # bytes; link speeds are decimal


@dataclass(frozen=True)
class Link:
    """One direction of a per-GPU link: ``bandwidth`` in bytes/s, ``latency_s`` per transfer."""

    name: str
    bandwidth: float
    latency_s: float

    def transfer_seconds(self, num_bytes: float, lanes: int = 1) -> float:
        """Time to send ``num_bytes`` split evenly over ``lanes`` parallel links of this kind."""
        return self.latency_s + num_bytes / (self.bandwidth * lanes)

    def describe(self) -> dict:
        """For ``summary.json``: name, GB/s per direction, latency in microseconds."""
        return {"name": self.name, "bandwidth_GB_s": self.bandwidth / GB, "latency_us": self.latency_s * 1e6}


LINKS: dict[str, Link] = {
    "nvlink3": Link("nvlink3", 300 * GB, 3e-6),
    "nvlink4": Link("nvlink4", 450 * GB, 3e-6),
    "pcie-gen4": Link("pcie-gen4", 25 * GB, 10e-6),
    "pcie-gen5": Link("pcie-gen5", 50 * GB, 10e-6),
    "infiniband-hdr": Link("infiniband-hdr", 200 / 8 * GB, 5e-6),
    "infiniband-ndr": Link("infiniband-ndr", 400 / 8 * GB, 5e-6),
}
ALIASES = {"nvlink": "nvlink3", "pcie": "pcie-gen4", "infiniband": "infiniband-hdr"}
LINK_NAMES = tuple(ALIASES) + tuple(LINKS)
CUSTOM_FIELDS = ("base", "bandwidth_gbps", "latency_us")


def get_link(spec, where: str = "link") -> Link:
    """A preset name, or ``{bandwidth_gbps, latency_us}`` (gigabits/s, as networks are quoted),
    optionally over ``base: PRESET``; mistakes name ``where`` and the field."""
    if isinstance(spec, str):
        name = ALIASES.get(spec, spec)
        if name not in LINKS:
            raise SimbatchError(where, f"unknown link {spec!r}; presets: {', '.join(LINK_NAMES)}")
        return LINKS[name]
    if not isinstance(spec, dict):
        raise SimbatchError(where, f"expected a preset ({', '.join(LINK_NAMES)}) or a mapping "
                                   f"like {{bandwidth_gbps: 200, latency_us: 5}}, got {spec!r}")
    for key in spec:
        if key not in CUSTOM_FIELDS:
            raise SimbatchError(f"{where}.{key}", f"unknown field; allowed: {', '.join(CUSTOM_FIELDS)}")
    base = get_link(spec["base"], f"{where}.base") if "base" in spec else None
    if base is None and "bandwidth_gbps" not in spec:
        raise SimbatchError(f"{where}.bandwidth_gbps", "missing (required without base)")
    gbps = _positive(spec, "bandwidth_gbps", where, base.bandwidth * 8 / GB if base else None)
    latency_us = _positive(spec, "latency_us", where, base.latency_s * 1e6 if base else 0.0, allow_zero=True)
    name = f"{base.name}-custom" if base else "custom"
    return Link(name, gbps * GB / 8, latency_us * 1e-6)


def _positive(spec: dict, key: str, where: str, default, allow_zero: bool = False) -> float:
    """``spec[key]`` as a number > 0 (>= 0 with ``allow_zero``), else ``default``."""
    value = spec.get(key, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
        value >= 0 if allow_zero else value > 0)
    if not ok:
        raise SimbatchError(f"{where}.{key}", f"expected a number {'>=' if allow_zero else '>'} 0, got {value!r}")
    return float(value)
