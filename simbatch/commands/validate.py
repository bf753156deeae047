"""``simbatch validate``: run a scenario on the torch backend and compare it with the calibrated cost model."""

from __future__ import annotations

from pathlib import Path

from simbatch.commands.common import add_scenario_arguments, load, print_notes

NAME = "validate"
HELP = "run a scenario on a real torch model (CPU or GPU) and measure the simulator's error"


def add_arguments(p) -> None:
    add_scenario_arguments(p)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--policies", default="static,dynamic,continuous,chunked_prefill",
                   help="comma-separated policy kinds (default: all four)")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="profile folder for the predictions (default: calibration/profiles/<device>-<model>-"
                        "<dtype>-tp1 when it matches, else calibrate one first)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="default: float32 on CPU, bfloat16 on a GPU")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: 1 on CPU, steadier on a shared machine; the shipped "
                        "CPU profiles are measured with 1)")


def run(args) -> None:
    from simbatch.errors import SimbatchError
    from simbatch.validation import format_table, write_validation
    from simbatch.validation import run_validation as validate

    scenario = load(args)
    if args.threads is not None and args.threads < 1:
        raise SimbatchError("--threads", f"must be >= 1, got {args.threads}")
    kinds = [k.strip() for k in args.policies.split(",") if k.strip()]
    result = validate(scenario, args.device, kinds, profile=args.profile, dtype=args.dtype, threads=args.threads)
    for kind, v in result.policies.items():
        print_notes(v.measured.messages, f"note [{kind}]")
    b = result.backend
    print(f"{scenario.name}: {b['model']} on {b['device']} ({b['dtype']}, {b['threads']} threads), "
          f"predicted by {result.cost_model['source']}; errors in % (step APE unsigned, others "
          f"predicted/measured - 1)")
    print(format_table(result))
    if args.out:
        write_validation(args.out, result)
        print(f"wrote {args.out}/validation.json, steps.csv, step_scatter.png, latency_cdfs.png "
              "and <policy>/measured|predicted/")
