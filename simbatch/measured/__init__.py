"""Measured serving runs: logs of what a real server did, read into one :class:`MeasuredRun`.

``read_measured(path)`` infers the format (DistServe ``.exp``, vLLM
``benchmark_serving.py --save-result`` JSON, genai-perf ``profile_export.json``,
the LMBench client's CSV, LLMServingSim's vLLM bench ``requests.jsonl``, or a
generic CSV / JSONL with a column mapping); docs/measured.md describes each.
"""

from simbatch.measured.readers import (
    FORMATS,
    detect_measured_format,
    read_distserve,
    read_genai_perf,
    read_generic_run,
    read_measured,
    read_vllm,
)
from simbatch.measured.readers_bench import (
    EngineMeta,
    bench_companions,
    read_engine_meta,
    read_llmservingsim,
    read_lmbench,
    read_timeseries,
)
from simbatch.measured.run import MeasuredRun
from simbatch.measured.writers_bench import write_llmservingsim, write_lmbench

__all__ = [
    "FORMATS",
    "EngineMeta",
    "MeasuredRun",
    "bench_companions",
    "detect_measured_format",
    "read_distserve",
    "read_engine_meta",
    "read_generic_run",
    "read_genai_perf",
    "read_llmservingsim",
    "read_lmbench",
    "read_measured",
    "read_timeseries",
    "read_vllm",
    "write_llmservingsim",
    "write_lmbench",
]
