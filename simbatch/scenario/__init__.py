"""Scenarios: one YAML file says what to simulate (:mod:`simbatch.scenario.spec`: the checked
:class:`~simbatch.scenario.spec.Scenario`), with its sections (``cluster``, ``kv_cache`` and ``slo``,
``disaggregation``, ``speculative``, ``quantization``), ``--set`` overrides
(:mod:`~simbatch.scenario.overrides`, on dotted field names: :mod:`~simbatch.scenario.dotted`) and
named variants (:mod:`~simbatch.scenario.variants`).
"""
