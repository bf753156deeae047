"""Validation outputs: the terminal table and the output folder (written all or nothing).

``OUT/`` receives ``validation.json``, ``steps.csv`` (every paired step, with
a ``policy`` column), ``step_scatter.png``, ``latency_cdfs.png``, each
policy's two runs as ``OUT/<policy>/measured/`` and ``OUT/<policy>/predicted/``
(the usual ``summary.json``, ``requests.csv``, ``steps.csv``, ``run.log``:
``simbatch report`` reads them), and ``profile/`` when the profile was
calibrated for this validation.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from simbatch.report.outputs import json_safe, write_run
from simbatch.validation.plots import plot_latency_cdfs, plot_step_scatter

COLUMNS = (("steps", None), ("step APE p50 %", ("step_ape", "median")), ("p90 %", ("step_ape", "p90")),
           ("decode p50 %", ("step_ape", "decode_only", "median")),
           ("prefill p50 %", ("step_ape", "prefill_heavy", "median")),
           ("mixed p50 %", ("step_ape", "mixed", "median")),
           ("fwd p50 %", ("forward_ape", "median")),
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
        row = {"policy": kind}
        for name, path in COLUMNS:
            if path is None:
                row[name] = str(v.errors["step_ape"]["steps"])
                continue
            value = _get(v.errors, path)
            signed = path[-1].endswith("_err")
            row[name] = "-" if value is None else (f"{value * 100:+.1f}" if signed else f"{value * 100:.1f}")
        rows.append(row)
    table = pd.DataFrame(rows)
    widths = {c: max(len(c), *(len(str(x)) for x in table[c])) for c in table.columns}
    lines = ["  ".join(c.ljust(widths[c]) if c == "policy" else c.rjust(widths[c]) for c in table.columns),
             "  ".join("-" * widths[c] for c in table.columns)]
    for _, r in table.iterrows():
        lines.append("  ".join(str(r[c]).ljust(widths[c]) if c == "policy" else str(r[c]).rjust(widths[c])
                               for c in table.columns))
    return "\n".join(lines)


def steps_csv(validation) -> pd.DataFrame:
    """Every policy's paired steps in one table."""
    tables = [v.pairs.assign(policy=kind) for kind, v in validation.policies.items()]
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return table[["policy", *[c for c in table.columns if c != "policy"]]] if len(table) else table


def write_validation(out_dir: str | Path, validation) -> Path:
    """Write everything into a temp sibling of ``out_dir``, then move it into place."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        (tmp / "validation.json").write_text(
            json.dumps(json_safe(validation.as_json()), indent=2, allow_nan=False) + "\n", encoding="utf-8")
        steps_csv(validation).to_csv(tmp / "steps.csv", index=False)
        plot_step_scatter(validation, tmp / "step_scatter.png")
        plot_latency_cdfs(validation, tmp / "latency_cdfs.png")
        for kind, v in validation.policies.items():
            for side, out in (("measured", v.measured), ("predicted", v.predicted)):
                write_run(tmp / kind / side, out.summary, out.requests, out.steps, out.messages)
        if validation.profile_fresh:
            shutil.copytree(validation.profile_path, tmp / "profile")
        _move_into(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _move_into(tmp: Path, out_dir: Path) -> None:
    """Each top-level entry of ``tmp`` replaces its namesake in ``out_dir`` (renames, same filesystem)."""
    out_dir.mkdir(exist_ok=True)
    for entry in sorted(tmp.iterdir()):
        dest = out_dir / entry.name
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        os.replace(entry, dest)
