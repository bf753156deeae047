"""Scenarios: one YAML file says what to simulate (:mod:`simbatch.scenario.spec`), with its
sections, ``--set`` overrides (:mod:`~simbatch.scenario.dotted`) and named variants.
"""
