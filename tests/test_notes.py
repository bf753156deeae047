"""A run's notes on the terminal: one summarised line per kind of note, not the first few."""

from __future__ import annotations

from simbatch.commands.common import MAX_NOTES, print_notes
from simbatch.commands.notes import summarise_notes


def cut(t: float, fit: int) -> str:
    return (f"t={t:.3f}s: static batch cut from 32 to {fit} requests: padded KV reservation "
            "(longest prompt + longest output per slot) would exceed the 7,523 free blocks")


def test_many_notes_of_one_kind_are_one_line(capsys):
    messages = ["clipped 17 of 400 requests to prompt + output <= 4096 tokens"]
    messages += [cut(44.696 + i, 24 + i % 7) for i in range(589)]
    print_notes(messages, "note [static]")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "note [static]: clipped 17 of 400 requests to prompt + output <= 4096 tokens"
    assert lines[1] == ("note [static]: 589 times between t=44.696s and t=632.696s: static batch cut from 32 to "
                        "~27 (24-30) requests: padded KV reservation (longest prompt + longest output per slot) "
                        "would exceed the 7,523 free blocks (all 589 in run.log with --out)")
    assert len(lines) == 2


def test_a_figure_that_varies_keeps_its_precision_and_commas():
    (count, line), = summarise_notes(["queue held 1,200.5 tokens", "queue held 2,400.25 tokens",
                                      "queue held 1,000.75 tokens"])
    assert count == 3 and line == "3 times: queue held ~1,200.50 (1,000.75-2,400.25) tokens"


def test_single_notes_print_as_they_are_and_kinds_beyond_the_limit_are_counted(capsys):
    kinds = [f"kind {chr(97 + k)} said something" for k in range(MAX_NOTES + 2)]
    print_notes(kinds + [cut(1.0, 20)], "note")
    lines = capsys.readouterr().err.splitlines()
    assert lines[:MAX_NOTES] == [f"note: {k}" for k in kinds[:MAX_NOTES]]
    assert lines[MAX_NOTES:] == ["note: ... and 3 more kinds of note, 3 notes (all in run.log with --out)"]
    assert summarise_notes([cut(1.0, 20)]) == [(1, cut(1.0, 20))]
