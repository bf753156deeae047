"""Switching a synthetic spec's kind with --set (issue 15): the fields the old kind left behind,
or the new kind's missing ones, are named with what the new kind takes and the --set that
gives it; and that --set, copied from the message, runs."""

from __future__ import annotations

import re
import shlex

import pytest

from simbatch.cli import main

SMALL = ["--set", "workload.synthetic.num_requests=20"]


def error_of(capsys, *sets: str) -> str:
    argv = ["run", "chat", *SMALL, *(a for s in sets for a in ("--set", s))]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("switch, field, said, fix", [
    ("workload.synthetic.arrival.kind=burst", "arrival.rate",
     "kind 'burst' takes no field besides kind; rate belongs to other kinds",
     "--set 'workload.synthetic.arrival={kind: burst}'"),
    ("workload.synthetic.arrival.kind=gamma", "arrival.cv",
     "kind 'gamma' needs rate and cv; cv is missing", "add --set workload.synthetic.arrival.cv=<number>"),
    ("workload.synthetic.prompt.kind=uniform", "prompt.median",
     "kind 'uniform' needs low and high; median, sigma, min and max belong to other kinds; low and high are missing",
     "--set 'workload.synthetic.prompt={kind: uniform, low: <number>, high: <number>}'"),
])
def test_a_kind_switched_by_set_says_what_the_new_kind_takes(capsys, switch, field, said, fix):
    err = error_of(capsys, switch)
    assert f": workload.synthetic.{field}: {said}; " in err and err.endswith(fix), err


def test_the_fields_kept_and_the_suggested_set_runs(capsys):
    """Switching poisson to constant keeps the rate; a lognormal prompt switched to constant is
    told to give its value, and the --set in the message (placeholder filled in) runs."""
    err = error_of(capsys, "workload.synthetic.prompt.kind=constant")
    suggested = shlex.split(re.search(r"give the whole spec at once: (--set .*)$", err).group(1))
    assert suggested == ["--set", "workload.synthetic.prompt={kind: constant, value: <number>}"]
    filled = suggested[1].replace("<number>", "64")
    assert main(["run", "chat", *SMALL, "--set", filled, "--set", "workload.synthetic.arrival.kind=constant"]) == 0
    assert "20 (20 completed)" in capsys.readouterr().out


def test_a_typo_is_still_named_with_the_allowed_fields(capsys):
    err = error_of(capsys, "workload.synthetic.arrival.rat=3")
    assert err.endswith("workload.synthetic.arrival.rat (from --set workload.synthetic.arrival.rat): "
                        "unknown key; allowed: kind, rate"), err
