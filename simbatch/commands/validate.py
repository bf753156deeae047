"""``simbatch validate``: measure the simulator's error, against the torch backend or measured logs.

Two modes. Without ``--against``: run the scenario on the torch backend (CPU
or GPU) and compare it with the calibrated cost model (``--device``,
``--policies``, ``--profile``, ``--dtype``, ``--threads``). With ``--against
LOG...``: replay each measured log of a real server through the scenario, as
it stands (its own policy; change it with ``--set``), and compare; no torch.
The torch-mode options then have nothing to act on, so giving one is an error
rather than silently ignored.
"""

from __future__ import annotations

from pathlib import Path

from simbatch.commands.common import add_scenario_arguments, comma_list, load, print_notes
from simbatch.commands.logs import add_log_arguments, given, read_logs

NAME = "validate"
HELP = "measure the simulator's error: against a real torch model (CPU or GPU), or against measured server logs"
# Torch-mode options (dest, flag): None by default so an explicit one can be told apart.
TORCH_OPTIONS = (("device", "--device"), ("policies", "--policies"), ("profile", "--profile"),
                 ("dtype", "--dtype"), ("threads", "--threads"), ("noise_repeats", "--noise-repeats"))
DEFAULT_DEVICE = "cpu"
DEFAULT_POLICIES = "static,dynamic,continuous,chunked_prefill"


def add_arguments(p) -> None:
    add_scenario_arguments(p)
    p.add_argument("--against", nargs="+", action="extend", default=None, metavar="LOG",
                   help="measured run logs of a real server (DistServe .exp, vLLM benchmark JSON, genai-perf, "
                        "LMBench CSV, LLMServingSim requests.jsonl, or CSV/JSONL with --columns): replay each through the scenario and report the errors, "
                        "no torch needed; several paths after one flag, or the flag repeated (put SCENARIO first)")
    add_log_arguments(p, "--against")
    p.add_argument("--device", default=None, help=f"cpu, cuda or cuda:N (default: {DEFAULT_DEVICE}; torch mode)")
    p.add_argument("--policies", default=None,
                   help="comma-separated policy kinds (default: all four; torch mode)")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="profile folder for the predictions (default: calibration/profiles/<device>-<model>-"
                        "<dtype>-tp1 when it matches, else calibrate one first)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="default: float32 on CPU, bfloat16 on a GPU")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: 1 on CPU, steadier on a shared machine; the shipped "
                        "CPU profiles are measured with 1)")
    p.add_argument("--noise-repeats", type=int, default=None, metavar="N",
                   help="execute a sample of each policy's steps N more times for the noise floor beside the "
                        "step errors (default: 5; 0 skips it; torch mode)")


def run(args) -> None:
    if args.against:
        run_against(args)
        return
    from simbatch.errors import SimbatchError

    for flag in given(args):
        raise SimbatchError(flag, "only with --against LOG")
    run_torch(args)


def run_torch(args) -> None:
    """The torch mode: the scenario on the real backend under each policy, against the cost model."""
    from simbatch.errors import SimbatchError
    from simbatch.validation import run_validation as validate

    scenario = load(args)
    if args.threads is not None and args.threads < 1:
        raise SimbatchError("--threads", f"must be >= 1, got {args.threads}")
    if args.noise_repeats is not None and args.noise_repeats < 0:
        raise SimbatchError("--noise-repeats", f"must be >= 0, got {args.noise_repeats}")
    kinds = comma_list(args.policies, "--policies") or DEFAULT_POLICIES.split(",")
    noise = {} if args.noise_repeats is None else {"noise_repeats": args.noise_repeats}
    result = validate(scenario, args.device or DEFAULT_DEVICE, kinds, profile=args.profile, dtype=args.dtype,
                      threads=args.threads, **noise)
    try:
        report_validation(args, scenario, result)
    finally:  # a profile calibrated for this run lives on only as the output's copy
        result.discard_scratch()


def report_validation(args, scenario, result) -> None:
    """Print ``result``'s table and write its folder (``--out``)."""
    from simbatch.validation import format_table, write_validation

    for kind, v in result.policies.items():
        print_notes(v.measured.messages, f"note [{kind}]")
    b = result.backend
    print(f"{scenario.name}: {b['model']} on {b['device']} ({b['dtype']}, {b['threads']} threads), "
          f"predicted by {result.cost_model['source']}; errors in % (step APE unsigned, others "
          f"predicted/measured - 1)")
    print(format_table(result))
    if args.out:
        write_validation(args.out, result)
        noise = ", noise.csv" if any(v.noise is not None for v in result.policies.values()) else ""
        profile = ", profile/ (calibrated here: reuse it with --profile)" if result.profile_fresh else ""
        print(f"wrote {args.out}/validation.json, steps.csv{noise}, step_scatter.png, latency_cdfs.png{profile} "
              "and <policy>/measured|predicted/")


def run_against(args) -> None:
    """The measured mode: every check (options, output folder, columns, logs) before any simulation."""
    from simbatch.errors import SimbatchError
    from simbatch.files.outpaths import check_out_dir
    from simbatch.validation.against import validate_runs
    from simbatch.validation.against_report import by_rate, format_against_table, write_against

    for dest, flag in TORCH_OPTIONS:
        if getattr(args, dest) is not None:
            raise SimbatchError(flag, "only for the torch mode; with --against the scenario's own policy is "
                                      "replayed (change it with --set policy.kind=...)")
    scenario = load(args)
    if args.out:
        check_out_dir(args.out)
    runs = read_logs(args, args.against)  # every log read before anything is simulated
    result = validate_runs(scenario, runs, [str(p) for p in args.against])
    for v in by_rate(result.logs):  # the table's order
        print_notes(v.measured.notes, f"note [{v.name}]")
        print_notes(v.predicted.messages, f"note [{v.name} predicted]")
    print(against_header(result))
    print(format_against_table(result))
    for v in by_rate(result.logs):
        print(f"KV [{v.name}]: {v.errors['kv_implied']['verdict']}")
    if args.out:
        write_against(args.out, result)
        extra = ", vs_rate.png" if len(result.logs) >= 2 else ""
        print(f"wrote {args.out}/validation.json, pairs/<log>.csv, cdfs/<log>.png{extra}")


def against_header(result) -> str:
    """What was replayed, against how many logs, and how to read the table."""
    from simbatch.validation.against import describe_scenario

    d = describe_scenario(result.scenario)
    slo = ", ".join(f"{k.removesuffix('_ms')} <= {v:g} ms" for k, v in (d["slo"] or {}).items()) or "none"
    cm = result.cost_model
    return (f"{d['name']}: {d['model']} on {d['hardware']} ({d['layout']}, {d['policy'].get('kind')}), "
            f"predicted by {cm.get('kind', '?')} ({cm.get('source', '?')}) against {len(result.logs)} measured "
            f"log(s); SLO {slo}; m/p = measured/predicted; errors in % (predicted/measured - 1)")
