"""Is a measured profile any good? The whole-step check, and the rule against overwriting.

A calibration times whole canonical steps on the torch backend (``step_forward`` rows)
beside the operators; the ``profile`` cost model, fitted on the profile, prices those
same plans. Its median error on them says whether the machine held still while it was
measured: on an idle 2-core machine it is 3-22 % (quick or full, ``tiny`` or ``small``);
with the cores shared with other work it was 30-430 %, and a model priced from such a
profile is off by as much. No torch is needed here (the check reads a profile).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from simbatch.errors import SimbatchError

POOR_MEDIAN = 0.25  # a median whole-step error above this is a poor profile (module docstring)


@dataclass(frozen=True)
class StepErrors:
    """Relative errors on the profile's whole-step plans: by the operators alone, and with the
    fitted backend terms (what the ``profile`` cost model prices with), and those terms."""

    plans: int
    operators_median: float
    operators_worst: float
    median: float
    worst: float
    terms: dict

    @property
    def good(self) -> bool:
        return self.median <= POOR_MEDIAN


def step_errors(profile) -> StepErrors | None:
    """The :class:`StepErrors` of ``profile``; None for a profile without ``step_forward`` rows."""
    if "step_forward" not in set(profile.measurements["op"]):
        return None
    from simbatch.costmodel.profile_fit import fit_profile_model
    from simbatch.costmodel.whatif import header_model

    terms = fit_profile_model(profile, header_model(profile.header), "a100-80gb", where="--report").backend_terms
    table = terms["table"]
    return StepErrors(len(table), float(table["operators_ape"].median()), float(table["operators_ape"].max()),
                      float(table["ape"].median()), float(table["ape"].max()), terms)


def verdict_line(profile) -> str:
    """``verdict: good (...)`` or ``verdict: POOR (...)`` with the median whole-step error, and
    for a poor one what to do; for a profile without whole steps, that it cannot be judged."""
    try:
        errors = step_errors(profile)
    except ValueError as exc:  # too sparse or odd to fit: the fit report says so too
        return f"verdict: not judged (cannot fit: {exc})"
    if errors is None:
        return "verdict: not judged (the profile has no whole-step rows)"
    figure = f"{_pct(errors.median)} median error on its {errors.plans} whole steps (worst {_pct(errors.worst)})"
    if errors.good:
        return f"verdict: good: {figure}"
    load = next((n for n in profile.header.get("notes") or [] if str(n).startswith("load average")), None)
    busy = f"; {load}" if load else ""
    return (f"verdict: POOR: {figure}, over the {_pct(POOR_MEDIAN)} a machine that holds still gives{busy}: "
            f"the timings moved under other work; calibrate again on an idle machine (or with --threads 1)")


def check_overwrite(new_profile, out: Path, force: bool) -> None:
    """Refuse (one line) to replace a good profile at ``out`` with a poor ``new_profile``, unless
    ``force``: a busy machine's calibration would otherwise silently undo a good one."""
    if force or not (Path(out) / "profile.yaml").is_file():
        return
    from simbatch.catalog.profiles import read_profile

    try:
        new = step_errors(new_profile)
    except ValueError:  # a new profile that cannot be judged is not refused
        return
    if new is None or new.good:
        return
    try:
        old = step_errors(read_profile(out))
    except (SimbatchError, ValueError):  # an unreadable or unfittable profile is no good one to keep
        return
    if old is not None and old.good:
        raise SimbatchError(f"--out {out}", f"holds a good profile ({_pct(old.median)} median whole-step error); "
                                            f"this calibration's is poor ({_pct(new.median)}: the machine was busy?) "
                                            f"so it was not written; calibrate again on an idle machine, write it "
                                            f"elsewhere with --out, or replace the good one with --force")


def _pct(fraction: float) -> str:
    return f"{fraction * 100:,.1f} %"
