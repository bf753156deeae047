"""Metrics computed from an :class:`~simbatch.eventlog.EventLog` after a run (see docs/metrics.md)."""

from simbatch.metrics.compare import comparison_table
from simbatch.metrics.replicas import replica_summaries
from simbatch.metrics.requests import request_table
from simbatch.metrics.summary import SUMMARY_KEYS, latency_stats, steps_table, summarize

__all__ = ["SUMMARY_KEYS", "comparison_table", "latency_stats", "replica_summaries", "request_table", "steps_table",
           "summarize"]
