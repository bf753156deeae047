"""Run a sweep: check every point, skip finished runs, fan the rest out, write one tidy table.

``out_dir`` holds (layout and columns: docs/sweeps.md):

* ``sweep.yaml``: the base scenario and the grid, written before any run;
* ``runs/<run_id>.json``: one finished run (its grid values, metrics, wall
  time and resolved scenario), written atomically as soon as it finishes,
  so an interrupted sweep resumes where it stopped;
* ``sweep.csv`` and ``sweep.parquet``: one row per run, rebuilt from the run
  files at the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import pandas as pd
import yaml

from simbatch.core.prefix_cache import PREFIX_CACHE_STATS
from simbatch.errors import SimbatchError
from simbatch.files.outpaths import check_path_name
from simbatch.core.stop import STOP_REASONS
from simbatch.metrics.summary import LATENCY_KEYS, SUMMARY_KEYS
from simbatch.report.outputs import atomic_write, json_safe
from simbatch.runs.executors import Executor, InlineExecutor
from simbatch.scenario.spec import Scenario, from_dict
from simbatch.sweep.grid import Grid, Point, expand
from simbatch.sweep.progress import Progress

LATENCY_STATS = ("mean", "median", "p90", "p99")
STOP_NAMES = (*STOP_REASONS[1:], "none")  # admission_stops' keys (a policy's unnamed reason: "none")  # the keys of each latency dict in summary.json


def flatten(summary: dict) -> dict:
    """The metrics of a ``summary.json`` dict as flat columns, in its order (``ttft_ms.p99``...)."""
    row = {}
    for key in SUMMARY_KEYS:
        if key in LATENCY_KEYS:
            row.update({f"{key}.{stat}": summary[key][stat] for stat in LATENCY_STATS})
        elif key == "prefix_cache":  # a mapping, or None without prefix caching
            row.update({f"{key}.{stat}": (summary[key] or {}).get(stat) for stat in PREFIX_CACHE_STATS})
        elif key == "admission_stops":  # shares by reason, or None when nothing ever waited
            stops = summary[key]
            row.update({f"{key}.{r}": None if stops is None else stops.get(r, 0.0) for r in STOP_NAMES})
        else:
            row[key] = summary[key]
    return row


METRIC_COLUMNS = tuple(flatten({k: dict.fromkeys(LATENCY_STATS) for k in SUMMARY_KEYS}))


def run_point(job: dict) -> dict:
    """Run one sweep point; module-level and plain data in and out, so it pickles for processes and Dask.

    ``job``: ``run_id``, ``label`` (for errors), ``data`` (the resolved
    scenario mapping), ``source`` and ``base_dir`` (strings). Returns the
    run's row: ``run_id``, the metric columns and ``wall_s``.
    """
    from simbatch.api import run  # the engine loads in the worker, not when the CLI starts

    start = time.perf_counter()
    try:
        out = run(from_dict(job["data"], job["source"], Path(job["base_dir"])))
    except SimbatchError as exc:
        raise SimbatchError(f"sweep run {job['label']}", str(exc)) from None
    return {"run_id": job["run_id"], **flatten(out.summary), "wall_s": time.perf_counter() - start}


def check_points(scenario: Scenario, grid: Grid, points: list[Point]) -> None:
    """Check every point before anything runs, so a typo fails at once, naming its grid axis.

    Each distinct ``workload`` section is built once (cheap next to a run).
    """
    from simbatch.engine.setup import build_backend

    built = set()
    for p in points:
        try:
            sc = from_dict(p.data, scenario.source, scenario.base_dir)
            build_backend(sc)
            key = json.dumps(p.data["workload"], sort_keys=True, default=str)
            if key not in built:
                sc.build_workload()
                built.add(key)
        except SimbatchError as exc:
            raise blame(exc, scenario.source, grid.labels) from None


def blame(exc: SimbatchError, source: str, labels: dict[str, str]) -> SimbatchError:
    """The error re-addressed to the grid axis that set the field it names, if one did."""
    prefix = f"{source}: "
    field_path = exc.where[len(prefix):] if exc.where.startswith(prefix) else None
    for key, label in labels.items():
        if field_path and (field_path == key or field_path.startswith((key + ".", key + "["))):
            return SimbatchError(label, exc.cause)
    return exc


def write_json(path: Path, obj: dict) -> None:
    """Atomically write ``obj`` as JSON."""
    text = json.dumps(json_safe(obj), indent=1, default=str) + "\n"
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def run_file(runs_dir: Path, run_id: str) -> Path:
    """A point's run file, ``runs/<run_id>.json`` (its name checked as every name that becomes a path)."""
    return runs_dir / check_path_name(f"{run_id}.json", str(runs_dir))


def read_run(path: Path) -> dict | None:
    """A run file, or None when it is missing or not a complete run (then the run is done again)."""
    return load_run(path)[0]


def load_run(path: Path) -> tuple[dict | None, str | None]:
    """``(record, None)`` for a complete run file; ``(None, None)`` when there is none;
    ``(None, why)`` when the file is there but unreadable or not a run this sweep wrote (``[]``,
    a string where a metric goes, no metrics: a file cut short or edited), so it is run again."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"unreadable ({getattr(exc, 'strerror', None) or exc})"
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return None, "not valid JSON"
    why = run_file_problem(record)
    return (None, why) if why else (record, None)


def run_file_problem(record) -> str | None:
    """What makes ``record`` no complete run file (None: it is one): an object whose ``metrics``
    hold every metric column as a number or null, and whose ``wall_s`` is a number."""
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    metrics = record.get("metrics")
    if not isinstance(metrics, dict):
        return f"'metrics': expected an object, got {_shown(metrics)}"
    missing = [k for k in METRIC_COLUMNS if k not in metrics]
    if missing:
        return f"'metrics' lacks {len(missing)} of {len(METRIC_COLUMNS)} metrics ({missing[0]}, ...)"
    for key in ("wall_s", *METRIC_COLUMNS):
        value = record.get("wall_s") if key == "wall_s" else metrics[key]
        if isinstance(value, bool) or not (isinstance(value, (int, float)) or (value is None and key != "wall_s")):
            return f"'{key}': expected a number, got {_shown(value)}"
    return None


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def label(params: dict) -> str:
    """``policy.kind=static, seed=1`` (keys that do not apply left out)."""
    return ", ".join(f"{k}={v}" for k, v in params.items() if v is not None)


def run_sweep(scenario: Scenario, grid: Grid, out_dir: str | Path, executor: Executor | None = None, *,
              progress: bool = False, note: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Run every point of ``grid`` over ``scenario`` not already in ``out_dir``; return the table.

    ``executor`` defaults to in-process. ``progress`` draws a bar on stderr;
    ``note`` receives one-line remarks (points left out, runs already done).
    The table's ``attrs`` count ``points`` (grid combinations), ``runs``
    (distinct), ``reused`` (found in ``out_dir``) and ``ran``.
    """
    note = note or (lambda message: None)
    points, notes = expand(scenario, grid)
    check_points(scenario, grid, points)
    for message in notes:
        note(message)
    runs_dir = prepare(Path(out_dir), scenario, grid)
    todo = runs_to_do(runs_dir, points, note)
    if len(todo) < len(points):
        note(f"{len(points) - len(todo)} of {len(points)} runs already done in {runs_dir}")
    bar = Progress(len(points), len(points) - len(todo)) if progress else None

    def on_done(i: int, row: dict) -> None:
        p = todo[i]
        metrics = {k: v for k, v in row.items() if k not in ("run_id", "wall_s")}
        write_json(run_file(runs_dir, p.run_id), {"run_id": p.run_id, "params": p.params, "metrics": metrics,
                                                   "wall_s": row["wall_s"], "scenario": p.data})
        if bar:
            bar.update()

    jobs = [{"run_id": p.run_id, "label": label(p.params), "data": p.data, "source": scenario.source,
             "base_dir": str(scenario.base_dir)} for p in todo]
    try:
        if jobs:
            (executor or InlineExecutor()).map(run_point, jobs, on_done)
    finally:
        if bar:
            bar.close()
    table = collect(runs_dir, points, grid, note)
    if not write_table(Path(out_dir), table):
        note("sweep.parquet not written: pyarrow is not installed (pip install 'simbatch[parquet]'); "
             "sweep.csv holds the same table")
    table.attrs.update(points=grid.size, runs=len(points), reused=len(points) - len(todo), ran=len(todo))
    return table


def runs_to_do(runs_dir: Path, points: list[Point], note: Callable[[str], None]) -> list[Point]:
    """The points without a complete run file; a file that is there but broken gets a note."""
    todo = []
    for p in points:
        path = run_file(runs_dir, p.run_id)
        record, why = load_run(path)
        if record is None:
            todo.append(p)
            if why:
                note(f"{path}: {why}; running it again")
    return todo


def prepare(out_dir: Path, scenario: Scenario, grid: Grid) -> Path:
    """Create ``out_dir/runs`` and write ``sweep.yaml``; returns the runs folder."""
    if out_dir.exists() and not out_dir.is_dir():
        raise SimbatchError(str(out_dir), "exists and is not a folder")
    runs_dir = out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    spec = {"source": scenario.source, "grid": grid.axes,
            "scenario": {k: v for k, v in scenario.data.items() if k != "sweep"}}
    text = yaml.safe_dump(json_safe(spec), sort_keys=False)
    atomic_write(out_dir / "sweep.yaml", lambda p: p.write_text(text, encoding="utf-8"))
    return runs_dir


def collect(runs_dir: Path, points: list[Point], grid: Grid, note: Callable[[str], None]) -> pd.DataFrame:
    """One row per point from its run file: ``run_id``, the grid values, the metrics, ``wall_s``."""
    rows = []
    for p in points:
        path = run_file(runs_dir, p.run_id)
        record, why = load_run(path)
        if record is None:  # written by this sweep a moment ago: something else changed it
            raise SimbatchError(str(path), f"{why or 'missing'} after its run; run the sweep again")
        rows.append({"run_id": p.run_id, **p.params, **record["metrics"], "wall_s": record["wall_s"]})
    stale = {f.stem for f in runs_dir.glob("*.json")} - {p.run_id for p in points}
    if stale:
        note(f"{len(stale)} run file(s) in {runs_dir} are not points of this grid; left out of the table")
    columns = ["run_id", *grid.axes, *METRIC_COLUMNS, "wall_s"]
    table = pd.DataFrame(rows, columns=columns)
    for key in grid.axes:  # from the points: the frame has already turned None into NaN
        table[key] = tidy_column([p.params[key] for p in points], key)
    return table


def tidy_column(values: list, name: str) -> pd.Series:
    """Grid values as one Parquet-friendly type: integers stay integers (nullable where a key
    did not apply), lists and mappings become JSON text, and a column of mixed types becomes text."""
    values = [json.dumps(v, default=str) if isinstance(v, (list, dict)) else v for v in values]
    kinds = {type(v) for v in values if v is not None}
    if kinds == {int}:
        dtype = "Int64" if None in values else "int64"
    elif kinds in ({float}, {int, float}):
        dtype = "float64"
    elif kinds in ({str}, {bool}, set()):
        dtype = object
    else:
        values, dtype = [None if v is None else str(v) for v in values], object
    return pd.Series(values, name=name, dtype=dtype)


def write_table(out_dir: Path, table: pd.DataFrame) -> bool:
    """Write ``sweep.csv`` and, where pyarrow is installed, ``sweep.parquet``, each atomically;
    returns whether the Parquet copy was written."""
    from simbatch.report.parquet_table import has_pyarrow

    atomic_write(out_dir / "sweep.csv", lambda p: table.to_csv(p, index=False))
    if not has_pyarrow():
        (out_dir / "sweep.parquet").unlink(missing_ok=True)  # an older copy would disagree with the CSV
        return False
    atomic_write(out_dir / "sweep.parquet", lambda p: table.to_parquet(p, index=False))
    return True
