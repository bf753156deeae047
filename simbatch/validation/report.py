"""Validation outputs: the terminal table and the output folder (written all or nothing).

``OUT/`` receives ``validation.json``, ``steps.csv`` (every paired step, with
a ``policy`` column), ``step_scatter.png``, ``latency_cdfs.png``, each
policy's two runs as ``OUT/<policy>/measured/`` and ``OUT/<policy>/predicted/``
(the usual ``summary.json``, ``requests.csv``, ``steps.csv``, ``run.log``:
``simbatch report`` reads them), ``noise.csv`` (the replayed steps of the
noise floor, simbatch.validation.noise), and ``profile/`` when the profile was
calibrated for this validation.
"""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path

import pandas as pd

from simbatch.report.outputs import json_safe, write_files, write_run
from simbatch.report.table import render
from simbatch.validation.noise import COLUMNS as NOISE_COLUMNS
from simbatch.validation.plots import plot_latency_cdfs, plot_step_scatter

COLUMNS = (("steps", None), ("step APE p50 %", ("step_ape", "median")), ("p90 %", ("step_ape", "p90")),
           ("decode p50 %", ("step_ape", "decode_only", "median")),
           ("prefill p50 %", ("step_ape", "prefill_heavy", "median")),
           ("mixed p50 %", ("step_ape", "mixed", "median")),
           ("fwd p50 %", ("forward_ape", "median")),
           ("noise p50 %", ("noise_ape", "median")), ("APE/noise", ("step_ape_over_noise",)),
           ("TTFT p50 %", ("ttft_p50_err",)), ("TTFT p99 %", ("ttft_p99_err",)),
           ("TPOT p50 %", ("tpot_p50_err",)),
           ("E2EL p50 %", ("e2el_p50_err",)), ("E2EL p99 %", ("e2el_p99_err",)),
           ("tput %", ("throughput_err",)))


def _get(errors: dict, path) -> float | None:
    value = errors
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def format_table(validation) -> str:
    """One row per policy: step APEs (unsigned) and end-to-end errors (signed), in percent."""
    rows = []
    for kind, v in validation.policies.items():
        row = [kind]
        for _, path in COLUMNS:
            if path is None:
                row.append(str(v.errors["step_ape"]["steps"]))
                continue
            value = _get(v.errors, path)
            signed = path[-1].endswith("_err")
            if value is None:
                row.append("-")
            elif path == ("step_ape_over_noise",):
                row.append(f"{value:.1f}x")
            else:
                row.append(f"{value * 100:+.1f}" if signed else f"{value * 100:.1f}")
        rows.append(row)
    return render(["policy"] + [name for name, _ in COLUMNS], rows)


def steps_csv(validation) -> pd.DataFrame:
    """Every policy's paired steps in one table."""
    tables = [v.pairs.assign(policy=kind) for kind, v in validation.policies.items()]
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return table[["policy", *[c for c in table.columns if c != "policy"]]] if len(table) else table


def write_validation(out_dir: str | Path, validation) -> Path:
    """Write everything into a temp sibling of ``out_dir``, then move it into place (all or nothing)."""
    out_dir = Path(out_dir)
    writers = {
        "validation.json": lambda p: p.write_text(
            json.dumps(json_safe(validation.as_json()), indent=2, allow_nan=False) + "\n", encoding="utf-8"),
        "steps.csv": lambda p: steps_csv(validation).to_csv(p, index=False),
        "step_scatter.png": lambda p: plot_step_scatter(validation, p),
        "latency_cdfs.png": lambda p: plot_latency_cdfs(validation, p),
    }
    for kind, v in validation.policies.items():
        writers[kind] = partial(_write_sides, v)
    noise = [v.noise.assign(policy=kind) for kind, v in validation.policies.items() if v.noise is not None]
    if noise:
        table = pd.concat(noise, ignore_index=True)
        writers["noise.csv"] = lambda p: table[["policy", *NOISE_COLUMNS]].to_csv(p, index=False)
    if validation.profile_fresh:
        writers["profile"] = lambda p: shutil.copytree(validation.profile_path, p)
    write_files(out_dir, writers)
    return out_dir


def _write_sides(v, folder: Path) -> None:
    """A policy's measured and predicted runs, each as a run folder."""
    for side, out in (("measured", v.measured), ("predicted", v.predicted)):
        write_run(folder / side, out.summary, out.requests, out.steps, out.messages)
