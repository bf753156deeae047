"""Prefill/decode disaggregation: a prefill pool, a KV-cache transfer, a decode pool.

:mod:`simbatch.scenario.disaggregation` reads the scenario's ``disaggregation:``
section (below the engine: the scenario parses it); here ``handoff`` holds the
prefill and decode replicas and the transfer between them, ``build`` assembles
a run. Rules and sources: docs/policies.md, "Prefill/decode disaggregation".
Submodules are imported where used (``build`` imports the engine, which
imports the scenario).
"""
