"""Workloads: request traces and synthetic generators, as column-wise :class:`Workload` objects."""

from simbatch.workload.build import build_workload, describe_workload
from simbatch.workload.fit import fit_synthetic
from simbatch.workload.readers import (
                                      detect_format,
                                      read_azure,
                                      read_burstgpt,
                                      read_generic,
                                      read_lengths,
                                      read_mooncake,
)
from simbatch.workload.request import Request, Workload

__all__ = [
    "Request",
    "Workload",
    "build_workload",
    "describe_workload",
    "detect_format",
    "fit_synthetic",
    "read_azure",
    "read_burstgpt",
    "read_generic",
    "read_lengths",
    "read_mooncake",
]
