"""``simbatch calibrate``: measure a model's operators with torch and write a profile.

``simbatch calibrate --report DIR`` prints the fit report of an existing
profile without measuring (and without torch). ``simbatch calibrate
--from-log LOG... --scenario SCENARIO [--check LOG...]`` fits the scenario's
serving-engine overhead (:mod:`simbatch.catalog.servers`) on measured runs instead,
without torch, and reports the error on the ``--check`` logs it did not see.
"""

from __future__ import annotations

from pathlib import Path

from simbatch.commands.logs import add_log_arguments, given

NAME = "calibrate"
HELP = "time one Llama-style layer's operators with torch (CPU or GPU) and write a measured profile"


def add_arguments(p) -> None:
    p.add_argument("--model", default="small",
                   help="model preset whose shapes to measure (default: small; tiny, llama-2-7b, llama-3-8b...)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="default: float32 on CPU, bfloat16 on a GPU")
    p.add_argument("--quick", action="store_true",
                   help="fewer points and repeats (under a minute for small on 2 CPU cores)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: the cores this process may use)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs (default: 0)")
    p.add_argument("--out", type=Path, default=None,
                   help="profile folder (default: calibration/profiles/<device>-<model>-<dtype>-tp1)")
    p.add_argument("--force", action="store_true",
                   help="replace a good profile at --out even with a poor one (a busy machine's; "
                        "docs/profiles.md, 'Is a profile good?')")
    p.add_argument("--report", type=Path, default=None, metavar="DIR",
                   help="print the fit report of the existing profile DIR; measures nothing")
    p.add_argument("--from-log", dest="from_log", nargs="+", type=Path, default=None, metavar="LOG",
                   help="fit the serving engine's overhead terms (engine: step_s, per_seq_s, per_token_s, "
                        "request_s) on these measured runs of --scenario; no torch needed")
    p.add_argument("--scenario", default=None,
                   help="with --from-log: the scenario that mirrors the measured server (YAML or bundled name)")
    p.add_argument("--check", nargs="+", type=Path, default=[], metavar="LOG",
                   help="with --from-log: measured runs held out of the fit, to report its error on")
    p.add_argument("--terms", default=None,
                   help="with --from-log: comma-separated terms to fit (default: all four)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="with --from-log: override a field of --scenario (repeatable)")
    add_log_arguments(p, "--from-log")


def run(args) -> None:
    """Measure and write a profile, then print its fit report; or only the report (``--report``)."""
    if args.report is not None:
        print(report(args.report))
        return
    if args.from_log is not None:
        from simbatch.commands.calibrate_log import run_from_log

        run_from_log(args)
        return
    for flag in given(args):
        from simbatch.errors import SimbatchError

        raise SimbatchError(flag, "only with --from-log LOG")
    from simbatch.calibrate import require_torch
    from simbatch.catalog.models import get_model

    require_torch("calibrate")
    from simbatch.calibrate.runner import calibrate

    spec = get_model(args.model, "--model")
    path, profile = calibrate(spec, args.device, args.dtype, args.quick, args.out, args.seed, args.threads,
                              force=args.force)
    wall = profile.header["timing"]["wall_s"]
    print(f"wrote {path}/ ({len(profile.measurements)} measurements in {wall:.1f} s)")
    print(report(path))


def report(path: Path) -> str:
    """The fit report of the profile in ``path`` (written beside it), else its raw summary."""
    from simbatch.catalog.profiles import read_profile
    from simbatch.errors import SimbatchError
    from simbatch.report.outputs import atomic_write

    profile = read_profile(path)  # checks the folder: bad files stop here with one line
    fit = _fit_functions()
    if fit is None:
        return summary(profile)
    fit_report, format_fit_report = fit
    try:
        table = fit_report(profile)
    except ValueError as exc:  # a profile too sparse or too odd to fit
        raise SimbatchError(str(path), f"cannot fit: {exc}") from None
    try:
        atomic_write(Path(path) / "fit_report.csv", lambda p: table.to_csv(p, index=False))
    except OSError:
        pass  # a read-only profile (a shipped one, say) is still worth a report
    from simbatch.calibrate.verdict import verdict_line

    text = f"{describe(profile)}\nfit (leave-one-out error per operator):\n{format_fit_report(table)}"
    steps = step_report(profile)
    return "\n".join([text, *([steps] if steps else []), verdict_line(profile)])


def step_report(profile) -> str | None:
    """How well the operators, then the operators plus the fitted backend terms, reproduce the
    whole steps measured on the torch backend (``step_forward`` rows); None without them."""
    from simbatch.calibrate.verdict import step_errors

    e = step_errors(profile)
    if e is None:
        return None

    def us(part: str) -> str:
        return ", ".join(f"{k} {v * 1e6:.4g} us" for k, v in e.terms[part].items() if v)

    return (f"whole steps on the torch backend ({e.plans} plans): operators alone median "
            f"{e.operators_median * 100:.1f}% (worst {e.operators_worst * 100:.1f}%), "
            f"with the fitted backend terms median {e.median * 100:.1f}% (worst {e.worst * 100:.1f}%)\n"
            f"  forward terms: {us('forward') or 'none'}\n  host terms: {us('host') or 'none'}")


def _fit_functions():
    """(fit_report, format_fit_report) from the fitting side, or None where it is absent."""
    try:
        from simbatch.costmodel.fit import fit_report, format_fit_report
    except ImportError:
        return None
    return fit_report, format_fit_report


def describe(profile) -> str:
    """One line: model, device, dtype and mode of a profile."""
    h = profile.header
    mode = "quick" if h.get("quick") else "full"
    return f"{h['model'].get('name', '?')} on {h['device'].get('name') or h['device']['kind']}, {h['dtype']}, {mode}"


def summary(profile) -> str:
    """Per operator: points, the token range and the time range (ms), and the widest p90/p10."""
    m = profile.measurements
    lines = [describe(profile), f"{'op':<14}{'points':>7}{'tokens':>14}{'min ms':>11}{'max ms':>11}{'p90/p10':>9}"]
    for op, rows in m.groupby("op", sort=False):
        spread = (rows["p90_s"] / rows["p10_s"]).max()
        tokens = f"{rows['num_tokens'].min():g}-{rows['num_tokens'].max():g}"
        lines.append(f"{op:<14}{len(rows):>7}{tokens:>14}{rows['median_s'].min() * 1e3:>11.4g}"
                     f"{rows['median_s'].max() * 1e3:>11.4g}{spread:>9.2f}")
    return "\n".join(lines)

