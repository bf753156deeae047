"""GPU prices in US dollars per GPU-hour, for costing a configuration.

The presets are INDICATIVE: rounded single-GPU on-demand list prices that
public GPU clouds showed in 2025-2026 (source per line). Prices differ two to
three times between providers, regions and commitment terms, and change
often; hyperscalers (AWS, GCP, Azure) usually charge more per GPU than the
specialised clouds quoted here. Rankings by cost are only as good as these
numbers: pass your own with ``--price GPU=USD`` or ``--prices FILE``.
"""

from __future__ import annotations

import math
from pathlib import Path

from simbatch.errors import SimbatchError
from simbatch.files.yamlio import load_yaml

GPU_HOUR_USD: dict[str, float] = {
    "a100-40gb": 1.48,  # Lambda, 1x A100 40GB SXM
    "a100-80gb": 2.50,  # Modal, A100 80GB
    "h100-sxm": 3.78,  # Lambda, 1x H100 SXM
    "h100-pcie": 2.86,  # Lambda, 1x H100 PCIe
    "h200": 4.54,  # Modal, H200
    "l4": 0.80,  # Modal, L4 (GCP's g2 L4 VMs are close: ~0.7-0.8)
    "a40": 0.44,  # RunPod, A40 (secure cloud)
}


def price_table(overrides: list[str] | None = None, path: str | Path | None = None,
                known: set[str] | None = None) -> dict[str, float]:
    """The presets, then a YAML file's entries (``gpu: usd``), then ``--price GPU=USD`` items.

    ``known`` names the GPUs an override may name besides the presets (the
    candidates' custom GPUs); an override naming neither is a typo, an error.
    File entries may name any GPU (a shared price list lists more than one run uses).
    """
    table = dict(GPU_HOUR_USD)
    if path is not None:
        table.update(read_prices(Path(path)))
    allowed = set(GPU_HOUR_USD) | {k.lower() for k in (known or ())}
    for item in overrides or []:
        name, sep, value = item.partition("=")
        name, where = name.strip().lower(), f"--price {item}"
        if not sep or not name:
            raise SimbatchError(where, "expected GPU=USD_PER_GPU_HOUR, e.g. a100-80gb=1.8")
        if name not in allowed:
            raise SimbatchError(where, f"unknown GPU {name!r}; known: {', '.join(sorted(allowed))}")
        table[name] = _usd(value, where)
    return table


def read_prices(path: Path) -> dict[str, float]:
    """A price file: a YAML mapping of GPU name to US dollars per GPU-hour."""
    data = load_yaml(path, "price file")
    if not isinstance(data, dict) or not data:
        raise SimbatchError(str(path), "expected a mapping of GPU name to $/GPU-hour, e.g. a100-80gb: 1.8")
    return {str(k).strip().lower(): _usd(v, f"{path}: {k}") for k, v in data.items()}


def _usd(value, where: str) -> float:
    try:
        usd = float(value)
    except (TypeError, ValueError):
        raise SimbatchError(where, f"expected a price in US dollars per GPU-hour, got {value!r}") from None
    if isinstance(value, bool) or not (usd >= 0 and math.isfinite(usd)):
        raise SimbatchError(where, f"expected a non-negative, finite price, got {value!r}")
    return usd
