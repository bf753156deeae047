"""Reading and writing measured-operator profiles (the format of ``docs/profiles.md``).

A profile is a folder: ``profile.yaml`` (what was measured, on what, how) and
``measurements.csv`` (one row per operator and shape). :func:`read_profile`
checks both and stops at the first problem with one line naming the file and
line (or field); :func:`write_profile` checks the same rules, writes a temp
sibling folder and renames it into place, so a profile folder is never half
written. Nothing here needs torch.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from simbatch.errors import SimbatchError
from simbatch.files.textfile import read_text

FORMAT = "simbatch-profile/1"
HEADER_FILE = "profile.yaml"
MEASUREMENTS_FILE = "measurements.csv"
SOURCES = ("measured", "vidur", "derived")
SCOPES = ("layer", "step")
# The operators and the scope each is measured in (docs/profiles.md).
OP_SCOPES = {
    "qkv_proj": "layer", "o_proj": "layer", "mlp_up": "layer", "mlp_down": "layer",
    "attn_prefill": "layer", "attn_decode": "layer", "misc_layer": "layer", "allreduce": "layer",
    "lm_head": "step", "misc_step": "step", "step_overhead": "step",
    # Whole steps on the torch backend (a canonical plan each; docs/profiles.md). Optional:
    # profiles without them (Vidur imports, older calibrations) stay valid.
    "step_forward": "step", "step_host": "step",
    # The machine-speed probe's forward pass at calibration (simbatch.validation.noise.probe_ms):
    # no cost model prices from it; validate compares it with the probe before each run.
    "speed_probe": "step",
}
COLUMNS = ["op", "scope", "num_tokens", "context_tokens", "batch_size", "context_spread",
           "tensor_parallel", "median_s", "p10_s", "p90_s", "repeats"]
# Columns that may be left empty (an imported profile may not know them).
_OPTIONAL = ("context_tokens", "batch_size", "context_spread", "tensor_parallel", "p10_s", "p90_s", "repeats")
_REQUIRED_HEADER = ("format", "source", "device", "dtype", "tensor_parallel", "model")
_MODEL_INTS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
               "vocab_size")


@dataclass(slots=True)
class Profile:
    """One profile: the ``profile.yaml`` mapping and the ``measurements.csv`` table."""

    header: dict
    measurements: pd.DataFrame


def measurement_row(op: str, num_tokens: int, stats, *, context_tokens: float = 0, batch_size: int = 1,
                    context_spread: float = 1.0, tensor_parallel: int = 1) -> dict:
    """One ``measurements.csv`` row; ``stats`` has ``median_s``, ``p10_s``, ``p90_s``, ``repeats``."""
    return {"op": op, "scope": OP_SCOPES[op], "num_tokens": num_tokens, "context_tokens": context_tokens,
            "batch_size": batch_size, "context_spread": context_spread, "tensor_parallel": tensor_parallel,
            "median_s": stats.median_s, "p10_s": stats.p10_s, "p90_s": stats.p90_s, "repeats": stats.repeats}


def read_profile(path: str | Path) -> Profile:
    """The profile in folder ``path`` (or the folder of a ``profile.yaml`` given directly), checked."""
    folder = Path(path)
    if folder.name == HEADER_FILE and folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise SimbatchError(str(folder), "no such profile folder")
    header = _read_header(folder / HEADER_FILE)
    return Profile(header, _read_measurements(folder / MEASUREMENTS_FILE))


def write_profile(profile: Profile, path: str | Path) -> Path:
    """Write ``profile`` as folder ``path``, all or nothing; returns the folder.

    An existing profile folder at ``path`` is replaced whole (a stale
    ``fit_report.csv`` goes with it); any other existing, non-empty folder is
    refused rather than overwritten.
    """
    folder = Path(path)
    check_header(profile.header, HEADER_FILE)
    table = check_measurements(profile.measurements, MEASUREMENTS_FILE)
    check_destination(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp's folders are private
        (tmp / HEADER_FILE).write_text(dump_header(profile.header), encoding="utf-8")
        table.to_csv(tmp / MEASUREMENTS_FILE, index=False, float_format="%.6g")
        _swap_in(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def check_destination(path: str | Path) -> None:
    """Refuse to write a profile over anything but a profile folder or an empty one."""
    folder = Path(path)
    if folder.exists() and not _replaceable(folder):
        raise SimbatchError(str(folder), f"exists and is not a profile folder (no {HEADER_FILE}); "
                                         "choose another output folder")


def dump_header(header: dict) -> str:
    """``profile.yaml`` text: top-level keys in order, small mappings inline, notes one per line."""
    # default_flow_style=None writes innermost collections inline ({kind: cpu, ...}),
    # which keeps model and device on a line each; notes would be one long line
    # that way, so they are written as a block list after the rest.
    body = {k: v for k, v in header.items() if k != "notes"}
    text = "".join(yaml.safe_dump({k: v}, sort_keys=False, default_flow_style=_flow(v), width=120,
                                  allow_unicode=True) for k, v in body.items())
    if "notes" in header:
        notes = header["notes"]
        text += yaml.safe_dump({"notes": notes}, default_flow_style=False if notes else None, width=120,
                               allow_unicode=True)
    return text


def _flow(value) -> bool | None:
    # None (inline innermost) for collections, False (block) for a scalar: with
    # None, yaml would write {key: scalar} itself inline
    return None if isinstance(value, (dict, list)) else False


def check_header(header, where: str, lines: dict[str, int] | None = None) -> dict:
    """``header`` if it follows the format, else a one-line error naming the field (and its line)."""
    lines = lines or {}

    def bad(field: str, cause: str):
        line = lines.get(field) or lines.get(field.split(".")[0])
        raise SimbatchError(f"{where}:{line}" if line else where, f"{field}: {cause}")

    if not isinstance(header, dict):
        raise SimbatchError(where, "expected a mapping of profile fields")
    for key in _REQUIRED_HEADER:
        if key not in header:
            bad(key, "missing")
    if header["format"] != FORMAT:
        bad("format", f"expected {FORMAT}, got {header['format']!r}")
    if header["source"] not in SOURCES:
        bad("source", f"expected one of {', '.join(SOURCES)}, got {header['source']!r}")
    device = header["device"]
    if not isinstance(device, dict) or not isinstance(device.get("kind"), str) or not device["kind"]:
        bad("device.kind" if isinstance(device, dict) else "device", "needs a mapping with a 'kind' string")
    if not isinstance(header["dtype"], str):
        bad("dtype", f"expected a dtype name such as float32 or bfloat16, got {header['dtype']!r}")
    if not _is_int(header["tensor_parallel"]) or header["tensor_parallel"] < 1:
        bad("tensor_parallel", f"must be a positive integer, got {header['tensor_parallel']!r}")
    model = header["model"]
    if not isinstance(model, dict):
        bad("model", "expected a mapping of model shapes")
    for key in _MODEL_INTS:
        if not _is_int(model.get(key)) or model[key] < 1:
            bad(f"model.{key}", f"must be a positive integer, got {model.get(key)!r}")
    return header


def check_measurements(table: pd.DataFrame, where: str) -> pd.DataFrame:
    """``table`` with numeric columns typed, if every row follows the format (else a one-line error)."""
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise SimbatchError(where, f"missing column(s) {', '.join(missing)}")
    if table.empty:
        raise SimbatchError(where, "no measurements")
    table = table.reset_index(drop=True)
    numeric = {c: pd.to_numeric(table[c], errors="coerce") for c in COLUMNS[2:]}
    for i in range(len(table)):
        _check_row(table, numeric, i, f"{where}:{i + 2}")  # line 1 is the header
    return table.assign(**numeric)


def _check_row(table: pd.DataFrame, numeric: dict, i: int, where: str) -> None:
    op, scope = table.at[i, "op"], table.at[i, "scope"]
    if op not in OP_SCOPES:
        raise SimbatchError(where, f"op: unknown operator {op!r}; known: {', '.join(OP_SCOPES)}")
    if scope not in SCOPES:
        raise SimbatchError(where, f"scope: expected layer or step, got {scope!r}")
    for col, value in ((c, numeric[c][i]) for c in COLUMNS[2:]):
        if math.isnan(value):
            if col in _OPTIONAL and pd.isna(table.at[i, col]):
                continue
            raise SimbatchError(where, f"{col}: expected a number, got {table.at[i, col]!r}")
        low = 1 if col in ("batch_size", "context_spread", "tensor_parallel", "repeats") else 0
        if not math.isfinite(value) or value < low or (col == "median_s" and value <= 0):
            raise SimbatchError(where, f"{col}: must be {'> 0' if col == 'median_s' else f'>= {low}'}, got {value}")
    p10, med, p90 = (numeric[c][i] for c in ("p10_s", "median_s", "p90_s"))
    # 1e-9 relative slack: a round trip through 6 significant digits may reorder equal values
    if (not math.isnan(p10) and p10 > med * (1 + 1e-9)) or (not math.isnan(p90) and p90 < med * (1 - 1e-9)):
        raise SimbatchError(where, f"p10_s <= median_s <= p90_s does not hold ({p10}, {med}, {p90})")


def _read_header(path: Path) -> dict:
    if not path.exists():
        raise SimbatchError(str(path), "missing (every profile folder has one)")
    text = read_text(path, "profile header")  # the one loader of user files (a folder, no permission...)
    try:
        header = yaml.safe_load(text)
        lines = _key_lines(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise SimbatchError(where, f"not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    header = check_header(header, str(path), lines)
    if "created" in header and not isinstance(header["created"], str):
        header["created"] = str(header["created"])  # YAML reads an unquoted timestamp as a datetime
    return header


def _key_lines(text: str) -> dict[str, int]:
    """Line of each top-level and second-level key (``model.hidden_size``), for error messages."""
    node = yaml.compose(text)
    lines: dict[str, int] = {}
    if not isinstance(node, yaml.MappingNode):
        return lines
    for key, value in node.value:
        lines[str(key.value)] = key.start_mark.line + 1
        if isinstance(value, yaml.MappingNode):
            for sub, _ in value.value:
                lines[f"{key.value}.{sub.value}"] = sub.start_mark.line + 1
    return lines


def _read_measurements(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise SimbatchError(str(path), "missing (every profile folder has one)")
    text = read_text(path, "profile's measurements")
    try:
        table = pd.read_csv(io.StringIO(text), dtype={"op": str, "scope": str}, keep_default_na=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise SimbatchError(str(path), f"not a readable CSV ({' '.join(str(exc).split())})") from None
    return check_measurements(table, str(path))


def _replaceable(folder: Path) -> bool:
    return folder.is_dir() and ((folder / HEADER_FILE).is_file() or not any(folder.iterdir()))


def _swap_in(tmp: Path, folder: Path) -> None:
    """Rename ``tmp`` to ``folder``; an existing ``folder`` is moved aside first and removed after."""
    if not folder.exists():
        os.rename(tmp, folder)
        return
    old = folder.with_name(f".{folder.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(folder, old)
    try:
        os.rename(tmp, folder)
    except BaseException:
        os.rename(old, folder)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
