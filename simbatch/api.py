"""The public Python API: run a scenario, compare policies, get tables back.

>>> from simbatch import load_scenario, run
>>> out = run(load_scenario("classroom"))
>>> out.summary["completed"]
4
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from simbatch.errors import SimbatchError
from simbatch.metrics import comparison_table
from simbatch.policies.registry import POLICY_ORDER
from simbatch.runs.executors import ProcessExecutor

# One run's simulation and metrics live below this module (validation uses them too).
# (public names; describe_run for callers)
from simbatch.runs.one import RunOutput, check_scenario, describe_run, run  # noqa: F401
from simbatch.scenario.spec import Scenario, load_scenario

if TYPE_CHECKING:  # pandas is imported where a table is built, never by ``simbatch run``
    import pandas as pd



def run_policy(scenario: Scenario, kind: str) -> RunOutput:
    """``scenario`` under policy ``kind`` (see :meth:`Scenario.with_policy`)."""
    return run(scenario.with_policy(kind))


def run_variant(scenario: Scenario, variant: tuple) -> RunOutput:
    """``scenario`` under ``(policy kind, router, layout, named variant)``; None keeps the scenario's own."""
    kind, router, layout, name = (tuple(variant) + (None, None))[:4]
    if name is not None:
        scenario = scenario.with_variant(name)
    if layout is not None:
        scenario = scenario.with_layout(layout)
    if router is not None:
        scenario = scenario.with_router(router)
    return run(scenario.with_policy(kind) if kind is not None else scenario)


def compare_variants(scenario: Scenario, policies: list[str] | None, routers: list[str] | None,
                     layouts: list[str] | None = None,
                     variants: list[str] | None = None) -> dict[str, tuple]:
    """Row name -> (policy, router, layout, named variant) for :func:`compare`.

    Without routers (argument or ``cluster.routers``), layouts (argument or
    ``disaggregation.layouts``) or named variants (argument or the scenario's
    ``variants``): one row per policy. With them: one row per router x layout x
    variant under the scenario's own policy, or, when ``policies`` are given
    too, one per ``policy+router+layout+variant`` (names join what varies).
    """
    routers = list(routers or scenario.cluster.routers)
    layouts = list(layouts or scenario.layouts)
    named = list(variants or scenario.variants)
    if not routers and not layouts and not named:
        return {k: (k, None, None, None) for k in policies or POLICY_ORDER}
    rows = {}
    for k in policies or [None]:
        for r in routers or [None]:
            for lay in layouts or [None]:
                for v in named or [None]:
                    rows["+".join(x for x in (k, r, lay, v) if x is not None)] = (k, r, lay, v)
    return rows


def names_option(value, where: str) -> list[str] | None:
    """A list option of :func:`compare` (``policies``, ``routers``, ``layouts``, ``variants``) as
    a list, None when not given. As on the command line, a given empty list is an error, never
    "all"; a lone string is one too (``policies='static'`` was iterated letter by letter)."""
    if value is None:
        return None
    if isinstance(value, str):
        raise SimbatchError(where, f"expected a list of names, got the string {value!r}; for one, "
                                   f"give [{value!r}]")
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise SimbatchError(where, f"expected a list of names (strings), got {value!r}")
    if not value:
        raise SimbatchError(where, "is empty; give at least one name, or leave it out (None) for the default")
    return list(value)


def check_compare(scenario: Scenario, policies=None, routers=None, layouts=None, variants=None,
                  jobs=None, prefix: str = "") -> tuple:
    """The options of :func:`compare`, checked by the rules ``simbatch compare`` applies (each
    error names ``prefix`` + the option: ``--policies`` from the CLI, ``policies`` from Python):
    lists of known policy kinds, routers, layouts and the scenario's variants, a worker count >= 1.
    Returns ``(policies, routers, layouts, variants)`` as lists (None where not given)."""
    from simbatch.policies import policy_class
    from simbatch.policies.routers import check_router
    from simbatch.runs.executors import check_jobs
    from simbatch.scenario.disaggregation import LAYOUTS

    check_scenario(scenario)
    check_jobs(jobs, f"{prefix}jobs")
    kinds, routers, layouts, named = (names_option(v, f"{prefix}{k}") for k, v in (
        ("policies", policies), ("routers", routers), ("layouts", layouts), ("variants", variants)))
    for k in kinds or []:
        policy_class({"kind": k}, f"{prefix}policies")
    for r in routers or []:
        check_router(r, f"{prefix}routers")
    for name in layouts or []:
        if name not in LAYOUTS:
            raise SimbatchError(f"{prefix}layouts", f"unknown layout {name!r}; allowed: {', '.join(LAYOUTS)}")
        if name == "disaggregated" and scenario.disaggregation is None:
            raise SimbatchError(f"{prefix}layouts", "disaggregated needs a disaggregation: section in the scenario")
    for name in named or []:
        if name not in scenario.variants:
            raise SimbatchError(f"{prefix}variants", f"no variant {name!r} in the scenario; defined: "
                                                     f"{', '.join(scenario.variants) or 'none'}")
    return kinds, routers, layouts, named


def compare(scenario: Scenario, policies: list[str] | None = None, jobs: int | None = None,
            routers: list[str] | None = None, layouts: list[str] | None = None,
            variants: list[str] | None = None,
            on_done=None) -> tuple[dict[str, RunOutput], pd.DataFrame]:
    """Run the same workload under each policy (or router, layout, named variant); return the
    runs and one comparison table.

    Each policy takes its parameters from the scenario's ``policies.<kind>``
    section, or from ``policy`` when that is the same kind, else its defaults.
    Routers (``routers`` or the scenario's ``cluster.routers``), layouts
    (``layouts`` or ``disaggregation.layouts``: ``colocated``, ``disaggregated``)
    and named variants (``variants`` or the scenario's ``variants:``) are
    compared as :func:`compare_variants` says. Runs fan out over ``jobs``
    processes (default: one per core); a run is a function of its scenario and
    seed, so the results do not depend on ``jobs``. ``on_done(i, run)`` is called as each
    run finishes (a progress bar: ``simbatch compare``). The options follow the command line's
    rules (:func:`check_compare`): a given empty list is an error, never "all".
    """
    policies, routers, layouts, variants = check_compare(scenario, policies, routers, layouts, variants, jobs)
    rows = compare_variants(scenario, policies, routers, layouts, variants)
    executor = ProcessExecutor(min(len(rows), jobs or os.cpu_count() or 1))
    try:
        outs = executor.map(partial(run_variant, scenario), list(rows.values()), on_done)
    finally:
        executor.close()
    runs = dict(zip(rows, outs))
    return runs, comparison_table({k: r.summary for k, r in runs.items()})


def write_compare(out_dir: str | Path, runs: dict[str, RunOutput], table: pd.DataFrame,
                  format: str = "auto") -> None:
    """Write ``comparison.csv``, the comparison plot, and each run under ``out_dir/<policy>/``
    (its tables in ``format``: :meth:`RunOutput.write`)."""
    from simbatch.report import plot_comparison
    from simbatch.report.outputs import table_format, write_files

    # One format for every run (auto: Parquet if any run's table is large), so the folders agree.
    format = table_format(format, *(t for out in runs.values() for t in (out.request_columns, out.step_columns)))
    # each run's folder, inside this one
    writers = {kind: (lambda p, out=out: out.write(p, format)) for kind, out in runs.items()}
    writers["comparison.csv"] = lambda p: table.to_csv(p, index=False)
    writers["comparison.png"] = lambda p: plot_comparison({k: r.summary for k, r in runs.items()}, p)
    write_files(Path(out_dir), writers)  # the whole folder at once: never new runs beside an old table


def validate(scenario: Scenario, device: str = "cpu", policies: list[str] | None = None, **options):
    """Run ``scenario`` on the real torch backend under each policy and compare it with the
    calibrated cost model (needs torch; see docs/validation.md). ``options``: ``profile``,
    ``dtype``, ``threads``, ``progress``. Returns a :class:`simbatch.validation.runner.Validation`;
    ``simbatch.validation.write_validation(out_dir, result)`` writes its files."""
    from simbatch.validation.runner import validate as run_validation

    return run_validation(scenario, device, policies, **options)


def validate_against(scenario: Scenario, logs: list, format: str | None = None, columns: dict | None = None):
    """Replay each measured log of a real server (DistServe ``.exp``, vLLM benchmark JSON, genai-perf,
    CSV/JSONL with ``columns``) through ``scenario`` and measure the simulator's errors (no torch; see
    docs/validation.md). Returns a :class:`simbatch.validation.against.AgainstResult`;
    ``simbatch.validation.against_report.write_against(out_dir, result)`` writes its files."""
    from simbatch.validation.against import validate_against as run_against

    return run_against(scenario, logs, format, columns)


__all__ = [
    "POLICY_ORDER",
    "RunOutput",
    "compare",
    "load_scenario",
    "run",
    "run_policy",
    "validate",
    "validate_against",
    "write_compare",
]
