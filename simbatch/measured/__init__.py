"""Measured serving runs: logs of what a real server did, read into one :class:`MeasuredRun`.

``read_measured(path)`` infers the format (DistServe ``.exp``, vLLM
``benchmark_serving.py --save-result`` JSON, genai-perf ``profile_export.json``,
or a generic CSV / JSONL with a column mapping); docs/measured.md describes each.
"""

from simbatch.measured.readers import (
    FORMATS,
    detect_measured_format,
    read_distserve,
    read_generic_run,
    read_genai_perf,
    read_measured,
    read_vllm,
)
from simbatch.measured.run import MeasuredRun

__all__ = [
    "FORMATS",
    "MeasuredRun",
    "detect_measured_format",
    "read_distserve",
    "read_generic_run",
    "read_genai_perf",
    "read_measured",
    "read_vllm",
]
