"""``simbatch calibrate --from-log``: fit a serving engine's overhead on measured runs."""

from __future__ import annotations

import sys
from pathlib import Path

from simbatch.errors import SimbatchError


def run_from_log(args) -> None:
    """Fit the terms on ``args.from_log``, print them as an ``engine:`` section, then the
    error per log (fitted and held out), and write ``engine.yaml`` under ``--out``."""
    from simbatch.catalog.servers import FITTED_TERMS
    from simbatch.commands.logs import read_logs
    from simbatch.measured.fit_engine import fit_engine
    from simbatch.scenario.spec import load_scenario

    if args.scenario is None:
        raise SimbatchError("--from-log", "needs --scenario SCENARIO (the scenario that mirrors the server)")
    from simbatch.commands.common import comma_list

    terms = FITTED_TERMS if args.terms is None else tuple(comma_list(args.terms, "--terms"))
    for term in terms:
        if term not in FITTED_TERMS:
            raise SimbatchError("--terms", f"unknown term {term!r}; allowed: {', '.join(FITTED_TERMS)}")
    out = _check_out(args.out)
    scenario = load_scenario(args.scenario, args.overrides)
    fit_runs, check_runs = read_logs(args, args.from_log), read_logs(args, args.check)

    def progress(n: int, loss: float) -> None:
        print(f"\rfitting {', '.join(terms)}: {n} simulations, loss {loss:.4f}", end="", file=sys.stderr)

    print_unmeasured(fit_runs, scenario)
    for r in check_runs:
        r.check_completed("check the fit on")
    fit = fit_engine(scenario, fit_runs, terms, progress=progress)
    print(file=sys.stderr)
    engine = {**{k: v for k, v in scenario.engine.describe().items() if v is not None}, **fit.terms}
    text = engine_yaml(engine, fit_runs)
    print(text, end="")
    print(error_table(scenario, engine, fit_runs, check_runs))
    print(speed_note(scenario, fit_runs + check_runs))
    print(capacity_note(scenario, fit_runs + check_runs))
    if out is not None:
        from simbatch.report.outputs import atomic_write

        atomic_write(out, lambda p: Path(p).write_text(text))
        print(f"wrote {out}")


def print_unmeasured(runs, scenario) -> None:
    """A note per fitting log that lacks some of the fitted metrics (no TPOT: every completed
    output one token long), which the fit then leaves out for it."""
    from simbatch.measured.fit_engine import measured_metrics, unmeasured

    for r in runs:
        r.check_completed("fit on")
        missing = unmeasured(measured_metrics(r, scenario.slo.as_dict() or None))
        if missing:
            print(f"note: {r.source}: no {', '.join(missing)}: every completed output is one token long, and "
                  "TPOT needs two or more; fitted on the log's other figures", file=sys.stderr)


def _check_out(out: Path | None) -> Path | None:
    """``--out`` names the engine YAML file; checked before any simulation."""
    from simbatch.files.outpaths import check_out_file

    return None if out is None else check_out_file(out, "engine.yaml")


def engine_yaml(engine: dict, runs) -> str:
    """The fitted ``engine:`` section, with the logs it was fitted on as a comment."""
    names = ", ".join(Path(r.source).name for r in runs)
    lines = [f"# fitted by simbatch calibrate --from-log on {names}", "engine:"]
    for key, value in engine.items():
        shown = str(value).lower() if isinstance(value, bool) else (f"{value:.4g}" if isinstance(value, float)
                                                                   else value)
        lines.append(f"  {key}: {shown}")
    return "\n".join(lines) + "\n"


def error_table(scenario, engine: dict, fit_runs, check_runs) -> str:
    """Measured vs predicted TTFT / TPOT percentiles (and SLO attainment under the scenario's
    ``slo:``) per log, marked fitted or held out."""
    from simbatch.measured.fit_engine import METRICS, measured_metrics, predicted_metrics
    from simbatch.report.table import render

    rows, slo = [], scenario.slo.as_dict() or None
    for role, runs in (("fit", fit_runs), ("check", check_runs)):
        for r in runs:
            m, p = measured_metrics(r, slo), predicted_metrics(scenario, r, engine, slo)
            row = {"log": Path(r.source).name, "role": role}
            for k in METRICS:
                row[f"{k} ms"] = f"{_shown(m[k], '.0f')} / {_shown(p[k], '.0f')}"
                row[f"{k} err %"] = "-" if m[k] is None or p[k] is None else f"{(p[k] / m[k] - 1) * 100:+.1f}"
            if slo:
                row["SLO m/p"] = f"{m['attainment']:.2f} / {p['attainment']:.2f}"
            rows.append(row)
    headers = list(rows[0])
    return "measured / predicted:\n" + render(headers, [[str(r[h]) for h in headers] for r in rows]) + "\n"


def _shown(value: float | None, spec: str) -> str:
    """``value`` formatted, or ``-`` where a log has none (no TPOT, no completed request)."""
    return "-" if value is None else format(value, spec)


def capacity_note(scenario, runs) -> str:
    """The KV capacity each log implies (the most tokens held while requests waited,
    :mod:`simbatch.measured.capacity`) beside the scenario's pool: the fit cannot see a
    capacity the logs never reached, and a pool larger than the server's moves the knee."""
    from simbatch.engine.setup import kv_budget_per_replica
    from simbatch.measured.capacity import implied_capacity

    pool = kv_budget_per_replica(scenario, scenario.model, scenario.gpu).tokens
    lines = [f"KV capacity: the scenario's pool is {pool:,} tokens per replica"]
    lines += [f"  {Path(r.source).name}: {implied_capacity(r).verdict(pool)}" for r in runs]
    return "\n".join(lines)


def speed_note(scenario, runs) -> str:
    """The logs' own step speeds (:mod:`simbatch.measured.speed`): whether one parameter set can
    fit them all (colocated servers only: :func:`simbatch.measured.speed.applies_to`)."""
    from simbatch.measured.speed import applies_to, speed_table

    if len(runs) < 2:
        return "step speed check: needs two logs or more"
    if not applies_to(scenario):
        return "step speed check: skipped (colocated servers only)"
    return ("step speed of each log against the others (from the logs alone; logs of one server in one "
            "state agree within a few percent, and one parameter set fitted across logs that do not "
            "averages their speeds):\n" + speed_table(runs))
