"""Metrics computed from an :class:`~simbatch.core.eventlog.EventLog` after a run (see docs/metrics.md).

Tables are computed as named numpy columns (:func:`request_columns`, :func:`step_columns`);
:func:`request_table` and :func:`steps_table` give the same as pandas DataFrames.
"""

from simbatch.metrics.compare import comparison_table
from simbatch.metrics.replicas import replica_summaries
from simbatch.metrics.requests import request_columns, request_table
from simbatch.metrics.steps import step_columns, steps_table
from simbatch.metrics.summary import SUMMARY_KEYS, latency_stats, summarize

__all__ = ["SUMMARY_KEYS", "comparison_table", "latency_stats", "replica_summaries", "request_columns",
           "request_table", "step_columns", "steps_table", "summarize"]
