"""Fit synthetic workload specs to the three real traces and check them by regenerating.

For each trace (Azure conversation, Azure code, Mooncake conversation) this
prints the spec :func:`simbatch.workload.fit_synthetic` fits, as YAML ready to
paste under ``workload: synthetic:`` in a scenario, then compares the trace
with a workload regenerated from that spec (seed 0): mean prompt, mean output
and arrival rate. The traces are not shipped; see ``shared/traces/README.md``.

    python calibration/fit_workloads.py [--traces DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from simbatch.workload import build_workload, describe_workload, fit_synthetic, read_azure, read_mooncake

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO.parent / "shared" / "traces"
TRACES = [("Azure conversation", "AzureLLMInferenceTrace_conv.csv", read_azure),
          ("Azure code", "AzureLLMInferenceTrace_code.csv", read_azure),
          ("Mooncake conversation", "mooncake_conversation_trace.jsonl", read_mooncake)]
SEED = 0


def spec_yaml(spec: dict) -> str:
    """The spec in the scenarios' style: one line per key, leaf mappings in flow style."""
    return yaml.safe_dump(spec, default_flow_style=None, sort_keys=False, width=120)


def compare(trace, regenerated) -> str:
    """A small table of mean prompt, mean output and rate: trace vs regenerated."""
    a, b = describe_workload(trace), describe_workload(regenerated)
    rows = [("mean prompt", "prompt_mean"), ("mean output", "output_mean"), ("rate (req/s)", "rate")]
    lines = [f"{'':14}{'trace':>10}{'regenerated':>13}{'diff':>8}"]
    for label, key in rows:
        x, y = a[key], b[key]
        lines.append(f"{label:14}{x:10.2f}{y:13.2f}{y / x - 1:+8.1%}")
    return "\n".join(lines)


def fit_one(title: str, path: Path, reader) -> None:
    """Read one trace, fit it, print the spec and the trace-vs-regenerated table."""
    trace = reader(path)
    spec = fit_synthetic(trace)
    regenerated = build_workload({"synthetic": spec}, base_dir=path.parent, seed=SEED,
                                 where=f"{path.name} (fitted)")
    print(f"## {title}: {path.name} ({len(trace):,} requests)\n")
    print(spec_yaml(spec))
    print(f"Trace vs regenerated (seed {SEED}):")
    print(compare(trace, regenerated) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Parse ``--traces`` and fit every trace found there."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES,
                    help=f"folder holding the trace files (default: {DEFAULT_TRACES})")
    args = ap.parse_args(argv)
    if not args.traces.is_dir():
        sys.exit(f"error: trace folder {args.traces} not found (give --traces DIR)")
    for title, name, reader in TRACES:
        path = args.traces / name
        if not path.is_file():
            sys.exit(f"error: {path} not found")
        fit_one(title, path, reader)


if __name__ == "__main__":
    main()
