"""Chunked prefill and the engine's step time against Sarathi-Serve's measurements.

Sarathi-Serve (OSDI'24; ``shared/measured/sarathi-serve-a100``, see its README)
measured Yi-34B at TP2 on A100-80GB PCIe GPUs with pairwise NVLink:

* figure 2: decode steps of 1-128 sequences and single prefills of 128-16384 tokens;
* figure 9: the total time to prefill 2047/4095/8191/16383 tokens in chunks of
  512/1024/2048 tokens, and unchunked (one step), and its ratio to unchunked;
* table 2: a 4-token decode batch, a 1024-token prefill, and 1021 prefill + 3
  decode tokens in one step.

Printed side by side: measured, **before** (``RooflineCostModel("yi-34b",
"a100-80gb-pcie", tensor_parallel=2)`` at its defaults: 1 ms a step outside the
kernels) and **after** (the same roofline with the ``sarathi-serve`` engine
preset: ``step_s + per_seq_s x sequences + max(kernels, launch_s)``, fitted by
``calibration/fit_sarathi_engine.py`` on figure 2 only; figure 9 and table 2 are
held out). A chunk of ``c`` tokens over ``ctx`` earlier ones is one step,
``StepPlan([0], [c], [ctx], 0)``.

Targets (issue 32 item 7): figure 9's relative overhead within 5 percentage
points for chunks of 512 and 1024 on the 2k-8k prefills; table 2 within 10 %.
What each mechanism moved, and why the rest is left: docs/cost_models.md
("Sarathi-Serve's step time").

    python benchmarks/bench_chunking.py [--measured DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pandas as pd

from simbatch.costmodel import RooflineCostModel
from simbatch.costmodel.base import chunked_prefill_seconds
from simbatch.catalog.servers import PRESETS, parse_engine
from simbatch.core.plan import StepPlan

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MEASURED = REPO.parent / "shared" / "measured" / "sarathi-serve-a100"
MODEL, GPU, TP = "yi-34b", "a100-80gb-pcie", 2
ENGINE = "sarathi-serve"
UNCHUNKED = 16384  # figure 9's "chunk size" of the unchunked runs
TARGET_PP, TARGET_CHUNKS, TARGET_LENGTHS = 5.0, (512, 1024), (2047, 4095, 8191)
TARGET_TABLE2 = 0.10
# Table 2's decode slots: its requests are 1024 prompt + 16 decode tokens, so 1024-1039
# cached tokens; 1024 is used. Four decode tokens' attention is < 1% of the step either way.
DECODE_CONTEXT = 1024


def cost_model(engine: str = "none") -> RooflineCostModel:
    """The roofline at its defaults, with ``engine``'s overhead terms (``none``: its own 1 ms)."""
    return RooflineCostModel(MODEL, GPU, tensor_parallel=TP, **parse_engine(engine, "engine").overhead_params())


prefill_seconds = chunked_prefill_seconds


def load_fit():
    """calibration/fit_sarathi_engine.py as a module."""
    path = REPO / "calibration" / "fit_sarathi_engine.py"
    spec = importlib.util.spec_from_file_location("fit_sarathi_engine", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def table2_plans() -> dict[tuple[int, int], StepPlan]:
    """(prefill tokens, decode tokens) -> the step; decode slots come first."""
    def plan(prefill: int, decodes: int) -> StepPlan:
        rids = list(range(1, decodes + 1)) + ([0] if prefill else [])
        new = [1] * decodes + ([prefill] if prefill else [])
        ctx = [DECODE_CONTEXT] * decodes + ([0] if prefill else [])
        return StepPlan(request_ids=rids, num_new_tokens=new, num_context_tokens=ctx,
                        num_decode_slots=decodes)
    return {(0, 4): plan(0, 4), (1024, 0): plan(1024, 0), (1021, 3): plan(1021, 3)}


def figure9(measured: Path, cm: RooflineCostModel) -> pd.DataFrame:
    """Figure 9's rows with predicted ms and relative overhead beside the measured ones."""
    d = pd.read_csv(measured / "figure-9_chunking-overhead.csv")
    d["pred_ms"] = [prefill_seconds(cm, L, c) * 1e3 for L, c in zip(d.prefill_length, d.chunk_size)]
    base = d[d.chunk_size == UNCHUNKED].set_index("prefill_length").pred_ms
    d["pred_rel"] = d.pred_ms / d.prefill_length.map(base)
    d["meas_rel"] = d.prefill_execution_time_relative
    d["err_pp"] = (d.pred_rel - d.meas_rel) * 100
    return d


def table2(measured: Path, cm: RooflineCostModel) -> pd.DataFrame:
    """Table 2's three batches with the predicted ms beside the measured ones."""
    d = pd.read_csv(measured / "table-2_results.csv")
    plans = table2_plans()
    d["pred_ms"] = [cm.step_cost(plans[(int(p), int(q))]).seconds * 1e3
                    for p, q in zip(d.batch_num_prefill_tokens, d.batch_num_decode_tokens)]
    d["err"] = d.pred_ms / d.batch_execution_time - 1
    return d


def figure2(measured: Path, cm: RooflineCostModel) -> pd.DataFrame:
    """Figure 2's rows the preset was fitted on, predicted beside measured (ms)."""
    rows, _ = load_fit().figure2_rows(measured)
    return pd.DataFrame({"row": [r.label for r in rows], "meas_ms": [r.seconds * 1e3 for r in rows],
                         "pred_ms": [cm.step_cost(r.plan).seconds * 1e3 for r in rows]})


def targets(f9: pd.DataFrame, t2: pd.DataFrame) -> dict[str, bool]:
    """Each target's name -> met."""
    out = {}
    for chunk in TARGET_CHUNKS:
        rows = f9[(f9.chunk_size == chunk) & f9.prefill_length.isin(TARGET_LENGTHS)]
        out[f"figure 9, chunk {chunk}, 2k-8k: relative overhead within {TARGET_PP:.0f} pp"] = \
            bool((rows.err_pp.abs() <= TARGET_PP).all())
    for _, r in t2.iterrows():
        name = f"{int(r.batch_num_prefill_tokens)} prefill + {int(r.batch_num_decode_tokens)} decode"
        out[f"table 2, {name}: within {TARGET_TABLE2:.0%}"] = bool(abs(r.err) <= TARGET_TABLE2)
    return out


def same_step_bound(a: float, b: float) -> tuple[float, float]:
    """The prediction closest to both of two measurements of one step, and its error on each
    (the smallest worst relative error any single prediction can have): 2ab / (a + b)."""
    p = 2 * a * b / (a + b)
    return p, abs(p / a - 1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--measured", type=Path, default=DEFAULT_MEASURED,
                    help=f"folder holding Sarathi-Serve's CSVs (default: {DEFAULT_MEASURED})")
    args = ap.parse_args(argv)
    if not (args.measured / "figure-9_chunking-overhead.csv").is_file():
        sys.exit(f"error: no figure-9_chunking-overhead.csv under {args.measured} (give --measured DIR)")
    before, after = cost_model(), cost_model(ENGINE)
    p = before.params
    print(f"{MODEL} TP{TP} on {GPU}, roofline defaults: compute_eff {p['compute_eff']}, "
          f"bw_eff {p['bw_eff']}, gemm_tile_tokens {p['gemm_tile_tokens']:g}, "
          f"gemm_ramp_tokens {p['gemm_ramp_tokens']:g}")
    preset = PRESETS[ENGINE]
    fitted = load_fit().fit_figure2(args.measured)[0]
    print(f"before: step_overhead_s {p['step_overhead_s'] * 1e3:g} ms; after: engine {ENGINE}, "
          + ", ".join(f"{k} {preset[k] * 1e3:.3g} ms" for k in ("launch_s", "step_s", "per_seq_s")))
    print("  (calibration/fit_sarathi_engine.py on figure 2 gives "
          + ", ".join(f"{k} {fitted[k] * 1e3:.2f}" for k in ("launch_s", "step_s", "per_seq_s")) + " ms)")

    f2b, f2a = figure2(args.measured, before), figure2(args.measured, after)
    print("\nFigure 2 (fitted on): one step (ms)")
    print(f"{'row':<14}{'meas':>8}{'before':>8}{'after':>8}{'err b':>8}{'err a':>8}")
    for (_, b), (_, a) in zip(f2b.iterrows(), f2a.iterrows()):
        print(f"{b.row:<14}{b.meas_ms:8.1f}{b.pred_ms:8.1f}{a.pred_ms:8.1f}"
              f"{b.pred_ms / b.meas_ms - 1:+8.1%}{a.pred_ms / a.meas_ms - 1:+8.1%}")

    f9b, f9a = figure9(args.measured, before), figure9(args.measured, after)
    print("\nFigure 9 (held out): total prefill time (ms) and relative to unchunked")
    print(f"{'prompt':>6}{'chunk':>6}{'meas':>8}{'before':>8}{'after':>8}{'err b':>7}{'err a':>7}"
          f"{'rel':>7}{'rel b':>7}{'rel a':>7}{'pp b':>7}{'pp a':>7}")
    for (_, b), (_, a) in zip(f9b.iterrows(), f9a.iterrows()):
        m = b.prefill_execution_time
        print(f"{int(b.prefill_length):6d}{int(b.chunk_size):6d}{m:8.1f}{b.pred_ms:8.1f}{a.pred_ms:8.1f}"
              f"{b.pred_ms / m - 1:+7.1%}{a.pred_ms / m - 1:+7.1%}{b.meas_rel:7.3f}{b.pred_rel:7.3f}"
              f"{a.pred_rel:7.3f}{b.err_pp:+7.1f}{a.err_pp:+7.1f}")

    t2b, t2a = table2(args.measured, before), table2(args.measured, after)
    print(f"\nTable 2 (held out): one step (ms); decode contexts {DECODE_CONTEXT}")
    print(f"{'prefill':>8}{'decode':>8}{'meas':>8}{'before':>8}{'after':>8}{'err b':>8}{'err a':>8}")
    for (_, b), (_, a) in zip(t2b.iterrows(), t2a.iterrows()):
        print(f"{int(b.batch_num_prefill_tokens):8d}{int(b.batch_num_decode_tokens):8d}"
              f"{b.batch_execution_time:8.1f}{b.pred_ms:8.1f}{a.pred_ms:8.1f}{b.err:+8.1%}{a.err:+8.1%}")
    fig2_dec4 = float(f2a[f2a.row == "decode x4"].meas_ms.iloc[0])
    t2_dec4 = float(t2a[t2a.batch_num_prefill_tokens == 0].batch_execution_time.iloc[0])
    best, err = same_step_bound(fig2_dec4, t2_dec4)
    print(f"Same step twice: a decode of 4 over ~1024 tokens is {fig2_dec4:.1f} ms in figure 2 and "
          f"{t2_dec4:.1f} ms in table 2;\n  no prediction is within {err:.1%} of both (best {best:.1f} ms).")

    print("\nTargets:              before   after")
    met_b, met_a = targets(f9b, t2b), targets(f9a, t2a)
    for name in met_b:
        print(f"  {name:<58}{'MET' if met_b[name] else 'no':>6}{'MET' if met_a[name] else 'no':>8}")


if __name__ == "__main__":
    main()
