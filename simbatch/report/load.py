"""Read a results folder (``simbatch run`` or ``simbatch compare`` output) for a report.

A folder is either one run (``summary.json`` directly inside, and its request
and step tables as ``requests.csv`` and ``steps.csv`` or as ``requests.parquet``
and ``steps.parquet``) or a comparison (one sub-folder per policy, each a run
folder); either may also hold a
``sweep.csv`` (and the ``sweep.yaml`` that ``simbatch sweep`` writes beside it:
the scenario's file, the grid and the resolved scenario). Everything a report
shows is read from these files, so a report can be rebuilt later, elsewhere,
from the folder alone.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from simbatch.errors import SimbatchError
from simbatch.files.bundled import bundled_dir
from simbatch.files.textfile import read_text
from simbatch.files.yamlio import load_yaml
from simbatch.policies.registry import POLICY_ORDER
from simbatch.report.parquet_table import read_parquet
from simbatch.scenario.spec import read_yaml

RUN_FILES = ("summary.json", "requests.csv", "steps.csv")  # or the tables as .parquet (table_path)
# Only the step columns the figures use: a 380k-step run reads in well under a second.
STEP_COLUMNS = ("replica", "start_s", "end_s", "duration_s", "num_seqs", "num_slots", "prefill_tokens",
                "decode_tokens", "padded_tokens", "kv_used_blocks", "num_waiting")
REQUEST_COLUMNS = ("id", "arrival_s", "replica", "first_scheduled_s", "first_token_s", "finish_s",
                   "completed", "ttft_ms", "tpot_ms", "e2el_ms")
# What a capacity folder's report reads (simbatch.capacity.report writes them all).
CAPACITY_COLUMNS = ("rank", "policy", "hardware", "model", "tp", "replicas", "max_rate", "max_rate_per_gpu",
                    "fail_rate", "usd_per_hour", "usd_per_hour_per_req_s")
PROBE_COLUMNS = ("policy", "hardware", "model", "tp", "replicas", "scale", "seed", "offered_rate",
                 "request_throughput", "slo_attainment", "ttft_p99_ms", "tpot_p99_ms", "holds", "why_not")
ENV_PACKAGES = ("simbatch", "numpy", "pandas", "simpy", "matplotlib")


@dataclass
class RunData:
    """One run folder: its label (policy), summary dict and request/step tables."""

    name: str
    folder: Path
    summary: dict
    requests: pd.DataFrame
    steps: pd.DataFrame

    @property
    def kind(self) -> str:
        """The policy kind that ran (``static``, ``continuous``...)."""
        return str((self.summary.get("policy") or {}).get("kind", self.name))


@dataclass
class ReportData:
    """A results folder: its runs (in policy order), an optional sweep table and the SLO."""

    folder: Path
    runs: dict[str, RunData]
    sweep: pd.DataFrame | None
    slo: dict | None  # {"ttft_ms": ..., "tpot_ms": ...} when known, else None
    sweep_spec: dict | None = None  # sweep.yaml: {"source": file, "grid": {axis: values}, "scenario": {...}}
    capacity: pd.DataFrame | None = None  # capacity.csv: a capacity search's ranked configurations
    probes: pd.DataFrame | None = None  # probes.csv: every run of that search

    @property
    def summaries(self) -> dict[str, dict]:
        """Each run's ``summary.json``, by run name."""
        return {k: r.summary for k, r in self.runs.items()}


def _read_json(path: Path) -> dict:
    text = read_text(path, "run's summary")  # the one loader of user files (permissions, encoding)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SimbatchError(str(path), f"unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise SimbatchError(str(path), "expected a JSON object (a run's summary)")
    return data


def _read_csv(path: Path, columns: tuple[str, ...] | None) -> pd.DataFrame:
    if not path.exists():
        raise SimbatchError(str(path), "missing (a run folder holds summary.json, requests.csv and steps.csv)")
    text = read_text(path, "run's table")
    try:
        table = pd.read_csv(io.StringIO(text))
    except (ValueError, pd.errors.ParserError) as exc:
        raise SimbatchError(str(path), f"unreadable CSV: {exc}".splitlines()[0]) from None
    missing = [c for c in columns or () if c not in table.columns]
    if missing:
        raise SimbatchError(str(path), f"missing columns: {', '.join(missing)}")
    return table[list(columns)] if columns else table


def _read_table_of(path: Path, need: tuple[str, ...]) -> pd.DataFrame:
    """A whole CSV table that must hold the columns ``need`` (a one-line error naming the rest)."""
    table = _read_csv(path, None)
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise SimbatchError(str(path), f"missing columns: {', '.join(missing)}")
    return table


def table_path(folder: Path, name: str) -> Path:
    """A run folder's table ``name`` (``requests``, ``steps``): ``NAME.csv`` or ``NAME.parquet``,
    whichever is there (``simbatch run --format``); a :class:`SimbatchError` if neither or both."""
    csv, parquet = folder / f"{name}.csv", folder / f"{name}.parquet"
    # exists(), not is_file(): a folder or device by that name is read, and the loader says what it is
    if csv.exists() and parquet.exists():
        raise SimbatchError(str(folder), f"holds both {csv.name} and {parquet.name}; a run writes one (remove "
                                         "the other)")
    if not csv.exists() and not parquet.exists():
        raise SimbatchError(str(csv), f"missing (a run folder holds summary.json, and {name}.csv or "
                                      f"{name}.parquet)")
    return parquet if parquet.exists() else csv


def _read_table(folder: Path, name: str, columns: tuple[str, ...]) -> pd.DataFrame:
    path = table_path(folder, name)
    return read_parquet(path, columns) if path.suffix == ".parquet" else _read_csv(path, columns)


def check_counts(folder: Path, summary: dict, requests: pd.DataFrame) -> None:
    """A truncated or foreign request table would report a different run: its rows must be
    the summary's ``num_requests``, and its finished rows its ``completed``."""
    where = str(table_path(folder, "requests"))
    want = summary.get("num_requests")
    if isinstance(want, int) and len(requests) != want:
        raise SimbatchError(where, f"{len(requests):,} rows, but summary.json counts "
                                   f"{want:,} requests (truncated, or from another run?)")
    done = summary.get("completed")
    if isinstance(done, int) and "finish_s" in requests and int(requests["finish_s"].notna().sum()) != done:
        raise SimbatchError(where, f"{int(requests['finish_s'].notna().sum()):,} finished "
                                   f"rows, but summary.json counts {done:,} completed")


def load_run(folder: Path, name: str | None = None) -> RunData:
    """Read one run folder (``summary.json`` and the request and step tables, CSV or Parquet)."""
    summary = _read_json(folder / "summary.json")
    requests = _read_table(folder, "requests", REQUEST_COLUMNS)
    steps = _read_table(folder, "steps", STEP_COLUMNS)
    check_counts(folder, summary, requests)
    label = name or str((summary.get("policy") or {}).get("kind") or folder.name)
    return RunData(label, folder, summary, requests, steps)


def _run_folders(folder: Path) -> list[Path]:
    """Sub-folders holding a ``summary.json``, the four policies first in their usual order."""
    # Hidden folders are a writer's temporaries (simbatch.report.outputs), never a policy's run.
    subs = [p for p in folder.iterdir()
            if p.is_dir() and not p.name.startswith(".") and (p / "summary.json").is_file()]
    order = {k: i for i, k in enumerate(POLICY_ORDER)}
    return sorted(subs, key=lambda p: (order.get(p.name, len(order)), p.name))


def check_results_folder(folder: Path) -> Path:
    """``folder`` if it is a folder the user may list, else a one-line error: not there, not a
    folder, or behind (or itself) a folder the user may not enter or read."""
    try:
        if not folder.exists():
            raise SimbatchError(str(folder), "no such folder")
        if not folder.is_dir():
            raise SimbatchError(str(folder), "not a folder (give a `simbatch run`, `compare`, `sweep` or `capacity` --out folder)")
        os.listdir(folder)
    except PermissionError:
        raise SimbatchError(str(folder), "cannot read the results folder: permission denied") from None
    except OSError as exc:  # a name too long, a loop of links
        raise SimbatchError(str(folder), f"cannot read the results folder: {exc.strerror or exc}") from None
    return folder


def load_results(folder) -> ReportData:
    """Read a ``run``, ``compare``, ``sweep`` or ``capacity`` output folder; a :class:`SimbatchError`
    if it is not one."""
    folder = check_results_folder(Path(folder))
    if (folder / "summary.json").is_file():
        single = load_run(folder)
        runs = {single.name: single}
    else:
        runs = {p.name: load_run(p, p.name) for p in _run_folders(folder)}
    sweep, capacity, probes = (_read_table_of(folder / name, need) if (folder / name).is_file() else None
                               for name, need in (("sweep.csv", ()), ("capacity.csv", CAPACITY_COLUMNS),
                                                  ("probes.csv", PROBE_COLUMNS)))
    if not runs and sweep is None and capacity is None:
        raise SimbatchError(str(folder), "no results: expected summary.json, policy sub-folders, sweep.csv "
                                         "or capacity.csv")
    spec = read_sweep_spec(folder) if sweep is not None else None
    return ReportData(folder, runs, sweep, find_slo(runs) or sweep_slo(spec), spec, capacity, probes)


def read_sweep_spec(folder: Path) -> dict | None:
    """``sweep.yaml`` beside ``sweep.csv`` (None when absent); a :class:`SimbatchError` if unreadable."""
    path = folder / "sweep.yaml"
    if not path.is_file():
        return None
    spec = load_yaml(path, "sweep.yaml")
    if not isinstance(spec, dict) or not isinstance(spec.get("grid") or {}, dict):
        raise SimbatchError(str(path), "expected the mapping simbatch sweep writes (source, grid, scenario)")
    return spec


def sweep_slo(spec: dict | None) -> dict | None:
    """The SLO every run of a sweep was scored against: its scenario's, unless the grid varies it."""
    if not spec or any(str(axis).startswith("slo") for axis in spec.get("grid") or {}):
        return None
    slo = (spec.get("scenario") or {}).get("slo")
    if not isinstance(slo, dict):
        return None
    return {k: float(v) for k, v in slo.items() if isinstance(v, (int, float))} or None


def bundled_scenario(name) -> Path | None:
    """The bundled scenario file called ``name`` (``scenarios/<name>.yaml``), if there is one."""
    folder = bundled_dir()
    path = folder / f"{name}.yaml" if folder is not None and name else None
    return path if path is not None and path.is_file() else None


def scenario_source(data: ReportData) -> str:
    """Which scenario file the results came from, and how that is known.

    A run's ``summary.json`` may name it (``scenario_file``); a sweep's ``sweep.yaml``
    does (``source``). Otherwise only the scenario's name is recorded, and the
    bundled scenario of that name is given as such.
    """
    recorded = [s.get("scenario_file") for s in data.summaries.values() if s.get("scenario_file")]
    if recorded:
        return _distinct(recorded)
    if data.sweep_spec and data.sweep_spec.get("source"):
        return f"{data.sweep_spec['source']} (from sweep.yaml)"
    names = scenario_names(data)
    bundled = bundled_scenario(names[0]) if len(names) == 1 else None
    if bundled is not None:
        return f"{bundled} (the bundled scenario of that name; summary.json records only the name)"
    return f"not recorded (summary.json records the name only: {', '.join(names) or '-'})"


def scenario_names(data: ReportData) -> list[str]:
    """The scenario names the runs (or the sweep) record, each once."""
    names = [s.get("scenario") for s in data.summaries.values()]
    names.append(((data.sweep_spec or {}).get("scenario") or {}).get("name"))
    return list(dict.fromkeys(str(n) for n in names if n))


def meets_targets(requests: pd.DataFrame, targets: dict) -> np.ndarray:
    """Mask of requests that completed within every target (a NaN TPOT passes, as in ``summarize``)."""
    ok = np.array(requests["completed"], dtype=bool)
    for key, target in targets.items():
        values = requests[key].to_numpy(float)
        ok &= (values <= target) | (np.isnan(values) & (key == "tpot_ms"))
    return ok


def _slo_matches(run: RunData, slo: dict) -> bool:
    """Whether ``slo`` reproduces the run's recorded goodput (so it is the SLO it ran with)."""
    goodput, duration = run.summary.get("goodput"), run.summary.get("duration_s")
    if goodput is None or not duration or not set(slo) <= {"ttft_ms", "tpot_ms", "e2el_ms"}:
        return False
    return bool(np.isclose(meets_targets(run.requests, slo).sum() / duration, goodput, rtol=1e-9, atol=0))


def find_slo(runs: dict[str, RunData]) -> dict | None:
    """The SLO targets the runs were scored against, or None when unknown.

    ``summary.json`` records goodput but not the targets behind it. A ``slo``
    key is used when present; otherwise the bundled scenario of the same name
    is read, and its SLO kept only if it reproduces every run's goodput.
    """
    if not runs:
        return None
    first = next(iter(runs.values()))
    if isinstance(first.summary.get("slo"), dict):
        return {k: float(v) for k, v in first.summary["slo"].items()}
    path = bundled_scenario(first.summary.get("scenario"))
    try:
        slo = read_yaml(path).get("slo") if path is not None else None
    except SimbatchError:
        return None
    if not isinstance(slo, dict) or not slo:
        return None
    slo = {k: float(v) for k, v in slo.items() if v is not None}
    return slo if all(_slo_matches(r, slo) for r in runs.values()) else None


def _distinct(values) -> str:
    """Values that should agree across runs, joined when they do not."""
    seen = list(dict.fromkeys(str(v) for v in values if v is not None))
    return " / ".join(seen) if seen else "-"


def _params(d: dict | None, skip=()) -> str:
    return ", ".join(f"{k}={v}" for k, v in (d or {}).items() if k not in skip) or "-"


def run_facts(data: ReportData) -> list[tuple[str, str]]:
    """What ran, as (field, value) rows, read from the summaries (enough to rerun it)."""
    s = list(data.summaries.values())
    model = [(x.get("model") or {}) for x in s]
    hw = [(x.get("hardware") or {}) for x in s]
    cost = [(x.get("cost_model") or {}) for x in s]
    work = [(x.get("workload") or {}) for x in s]
    return [
        ("scenario", _distinct(x.get("scenario") for x in s)),
        ("scenario file", scenario_source(data)),
        ("seed", _distinct(x.get("seed") for x in s)),
        ("simbatch version (run)", _distinct(x.get("simbatch_version") for x in s)),
        ("model", _distinct(f"{m.get('name')} ({(m.get('num_params') or 0) / 1e9:.2f} B params, "
                            f"{m.get('kv_bytes_per_token')} KV bytes/token)" for m in model)),
        ("hardware", _distinct(f"{h.get('replicas')} x {h.get('name')} replica(s), tensor parallel {h.get('tensor_parallel')}"
                               for h in hw)),
        ("KV cache", _distinct(f"{h.get('kv_blocks_per_replica')} blocks/replica of {h.get('kv_block_size')} "
                               f"tokens, {h.get('kv_mode')}" for h in hw)),
        ("cost model", _distinct(f"{c.get('kind')} ({c.get('source')}): {_params(c, ('kind', 'source'))}"
                                 for c in cost)),
        ("workload", _distinct(f"{w.get('source')}, {w.get('num_requests')} requests" for w in work)),
        ("SLO", _params(data.slo) if data.slo else "not recorded in summary.json"),
    ]


def policy_rows(data: ReportData) -> list[tuple[str, str]]:
    """(run, policy kind and parameters) rows."""
    return [(name, f"{r.kind}: {_params(r.summary.get('policy'), ('kind',))}") for name, r in data.runs.items()]


def environment() -> list[tuple[str, str]]:
    """Python and library versions at report time, and when the report was made (UTC)."""
    rows = [("python", platform.python_version())]
    for pkg in ENV_PACKAGES:
        try:
            rows.append((pkg, metadata.version(pkg)))
        except metadata.PackageNotFoundError:
            rows.append((pkg, "not installed"))
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return rows + [("platform", platform.platform()), ("report made", now)]
