"""What a capacity search found, as a ranked table, CSV files and plain sentences."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from simbatch.capacity.plan import Boundary, CapacityResult, SeedVerdict, Sizing
from simbatch.capacity.search import CEILING, FLOOR
from simbatch.report.capacity_section import CAPACITY_VIEW, TARGET_VIEW
from simbatch.report.outputs import write_files
from simbatch.report.table import fmt_num, render

# (header, column, format) of the terminal table, the CSV having every column: the report's
# capacity section shows the same columns, so the one definition lives there (the layer below).
VIEW = CAPACITY_VIEW


def capacity_table(result: CapacityResult, prices: dict[str, float]) -> pd.DataFrame:
    """One row per candidate, ranked: by $/hour at the target rate when there is one,
    else by sustainable rate per GPU (ties: the other key)."""
    rows = [_row(result, b, prices) for b in result.boundaries]
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    if result.target_rate:
        keys, ascending = ["target_usd_per_hour", "max_rate_per_gpu"], [True, False]
    else:
        keys, ascending = ["max_rate_per_gpu", "usd_per_hour"], [False, True]
    table = table.sort_values(keys, ascending=ascending, na_position="last", kind="stable")
    table.insert(0, "rank", range(1, len(table) + 1))
    return table.reset_index(drop=True)


def _row(result: CapacityResult, b: Boundary, prices: dict[str, float]) -> dict:
    c, base = b.candidate, result.base_rate
    gpu = result.gpu_names[c]
    price = prices.get(gpu.lower(), math.nan)
    gpus = c.gpus_per_replica * c.replicas
    max_rate = b.lo * base if b.lo else math.nan
    (prefill_tp, prefill_pp), (decode_tp, decode_pp) = c.pool_layouts if c.split else ((None, None),) * 2
    row = {
        "policy": c.policy, "hardware": gpu, "model": c.model or "", "tp": c.tp, "pp": c.pp,
        "layout": c.layout_name, "replicas": c.replicas, "split": c.split_name,
        "prefill_tp": prefill_tp, "prefill_pp": prefill_pp, "decode_tp": decode_tp, "decode_pp": decode_pp,
        "gpus_per_replica": c.gpus_per_replica, "gpus": gpus, "max_rate": max_rate, "max_rate_per_gpu": max_rate / gpus,
        "fail_rate": b.hi * base if b.hi else math.nan, "scale_lo": b.lo, "scale_hi": b.hi,
        "usd_per_gpu_hour": price, "usd_per_hour": gpus * price,
        "usd_per_hour_per_req_s": gpus * price / max_rate if max_rate > 0 else math.nan,
        "fails_because": "; ".join(b.at_hi.reasons) if b.at_hi else "",
        "seeds_failing_at_hi": len(b.at_hi.failed_seeds) if b.at_hi else 0,
        "note": _limit_note(b),
    }
    if result.target_rate:
        s = result.sizing.get(c.with_replicas(1))
        n = s.replicas if s else None
        row.update({"target_rate": result.target_rate, "target_replicas": n,
                    "target_gpus": n * c.gpus_per_replica if n else None,
                    "target_rate_per_gpu": result.target_rate / (n * c.gpus_per_replica) if n else math.nan,
                    "target_usd_per_hour": n * c.gpus_per_replica * price if n else math.nan})
    return row


def _limit_note(b: Boundary) -> str:
    if b.lo is None and b.hopeless:
        return f"fails at every scale down to {b.hi:g}x; lower rates do not help"
    if b.lo is None:
        return f"fails at every scale down to {FLOOR:g}x"
    if b.hi is None:
        return f"holds up to {CEILING:g}x (a lower bound)"
    return ""


def format_table(table: pd.DataFrame, with_target: bool) -> str:
    """The ranked table as aligned plain text."""
    view = VIEW + (TARGET_VIEW if with_target else ())
    rows = []
    for r in table.to_dict("records"):
        model = f" {r['model']}" if r["model"] else ""
        split = f" of {r['split']}" if r.get("split", "colocated") != "colocated" else ""
        layout = f" {r['layout']}" if r["layout"] else ""
        name = f"{r['rank']:>2}. {r['policy']} on {r['hardware']}{model}{layout} x{r['replicas']}{split}"
        rows.append([name] + [f(r.get(col)) for _, col, f in view])
    return render(["configuration"] + [h for h, _, _ in view], rows)


def explain_boundary(b: Boundary, base_rate: float, gpu_name: str) -> str:
    """``continuous on a100-80gb tp1 x1: holds at 4.4 req/s (k=0.80), fails at 4.7 req/s (k=0.85): ...``."""
    head = b.candidate.label(gpu_name)
    if b.lo is None:
        stopped = f"; {b.hopeless}" if b.hopeless else ""
        return f"{head}: fails even at {_at(b.hi, base_rate)}: {_why(b.at_hi)}{stopped}"
    if b.hi is None:
        return f"{head}: holds at {_at(b.lo, base_rate)}, the highest scale searched: capacity is at least that"
    return (f"{head}: holds at {_at(b.lo, base_rate)}, fails at {_at(b.hi, base_rate)}: "
            f"{_why(b.at_hi)}{_seed_note(b)}")


def explain_sizing(s: Sizing, target_rate: float, gpu_name: str) -> str:
    """``for 10 req/s: continuous on a100-80gb tp1 needs 3 replicas (guess 3); 2 fail: ...``."""
    split = f" as {s.group.split_name}" if s.group.split else ""
    layout = f" {s.group.layout_name}" if s.group.layout_name else ""
    head = f"{s.group.policy} on {gpu_name}{' ' + s.group.model if s.group.model else ''}{layout}{split}"
    if s.replicas is None:
        return f"for {fmt_num(target_rate)} req/s: {head}: {s.note}"
    why = f"; {s.replicas - 1} fail: {_why(s.below)}" if s.below else ""
    unit = "unit(s)" if s.group.split else "replica(s)"
    return (f"for {fmt_num(target_rate)} req/s: {head} needs {s.replicas} {unit} "
            f"(linear-scaling guess {s.estimate}), verified by simulation{why}")


def explain_per_gpu(s: Sizing, target_rate: float, one_replica_rate: float) -> str:
    """Why req/s per GPU at the recommended size differs from one replica's alone (empty when
    it does not, or there is no size). Higher: the router splits the arrival stream, so each
    replica sees smaller bursts than one replica alone at the same mean rate and runs nearer
    its limit before the tail latency breaks the SLO (round-robin over n replicas turns
    Poisson arrivals into Erlang-n ones: inter-arrival CV 1/sqrt(n)). Lower: replicas come
    whole, and one fewer did not hold, so the replicas run below one replica's limit."""
    if not s.replicas or s.replicas < 2 or not one_replica_rate > 0:
        return ""
    gpus = s.replicas * s.group.gpus_per_replica
    per_gpu, alone = target_rate / gpus, one_replica_rate / s.group.gpus_per_replica
    unit = "units" if s.group.split else "replicas"  # a split candidate's unit: both pools' replicas
    head = f"  per GPU: {fmt_num(per_gpu)} req/s at {s.replicas} {unit} against {fmt_num(alone)} for one alone: "
    if per_gpu > 1.05 * alone:
        return head + ("the router splits the arrivals, so each replica sees smaller bursts than one replica "
                       "taking them all, and runs nearer its limit before the tail breaks the SLO")
    if per_gpu < 0.95 * alone:
        return head + (f"{unit} come whole and {s.replicas - 1} did not hold, so each runs below its limit "
                       f"(the rest is headroom)")
    return ""


def _at(k: float, base_rate: float) -> str:
    return f"{fmt_num(k * base_rate)} req/s (k={k:.3g})"


def _why(v: SeedVerdict | None) -> str:
    if v is None or v.holds:
        return "-"
    seeds = f" [{len(v.failed_seeds)}/{v.num_seeds} seeds]" if v.num_seeds > 1 else ""
    return ", ".join(v.reasons) + seeds


def _seed_note(b: Boundary) -> str:
    """Spread of the boundary over seeds: each seed's lowest failing scale among the probes."""
    if len(b.seed_hi) < 2:
        return ""
    his = [k for k in b.seed_hi.values() if k is not None]
    never = len(b.seed_hi) - len(his)
    spread = f"per-seed first failure k={min(his):.3g}..{max(his):.3g}" if his else ""
    if never:
        spread += f"{', ' if spread else ''}{never} seed(s) never failed in the probes"
    return f"; {spread}"


def write_capacity(out_dir: str | Path, table: pd.DataFrame, probes: list[dict]) -> list[Path]:
    """Write ``capacity.csv`` (the ranked table) and ``probes.csv`` (every run), all or nothing."""
    probes_df = pd.DataFrame(probes)
    return write_files(Path(out_dir), {"capacity.csv": lambda p: table.to_csv(p, index=False),
                                   "probes.csv": lambda p: probes_df.to_csv(p, index=False)})
