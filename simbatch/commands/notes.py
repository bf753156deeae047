"""A run's notes summarised for the terminal: one line per kind of note instead of the first few.

Two notes are of one kind when they read the same once their figures are blanked out
(``static batch cut from 32 to 26 requests`` and ``... from 32 to 29 requests``). A kind
seen once prints as it is; a kind seen more often prints once, with its count, the first
and last ``t=...s`` where its notes carry one, and each figure that varies as its median
with its range (``~27 (24-31)``). The full list stays in run.log.
"""

from __future__ import annotations

import re
import statistics

TIME = re.compile(r"^t=(?P<t>\d+(?:\.\d+)?)s: ")
FIGURE = re.compile(r"\d[\d,]*(?:\.\d+)?")


def split_note(message: str) -> tuple[float | None, str]:
    """The note's leading ``t=...s`` (None without one) and the rest of its text."""
    m = TIME.match(message)
    return (None, message) if m is None else (float(m["t"]), message[m.end():])


def template(text: str) -> str:
    """``text`` with every figure blanked to ``#``: the note's kind."""
    return FIGURE.sub("#", text)


def _typical(tokens: list[str]) -> str:
    """One figure's slot over a kind's notes: the figure itself when it never varies, else
    its median (to the notes' own precision) and range."""
    if len(set(tokens)) == 1:
        return tokens[0]
    values = [float(t.replace(",", "")) for t in tokens]
    decimals = max(len(t.partition(".")[2]) for t in tokens)
    comma = "," if any("," in t for t in tokens) else ""
    fmt = f"{{:{comma}.{decimals}f}}"
    return f"~{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def summarise_kind(notes: list[tuple[float | None, str]]) -> str:
    """One line for notes of one kind (``(time, text)`` pairs, as :func:`split_note` gives)."""
    if len(notes) == 1:
        t, text = notes[0]
        return text if t is None else f"t={t:.3f}s: {text}"
    texts = [text for _, text in notes]
    slots = list(zip(*(FIGURE.findall(text) for text in texts)))
    parts = FIGURE.split(texts[0])
    body = parts[0] + "".join(_typical(list(s)) + rest for s, rest in zip(slots, parts[1:]))
    times = [t for t, _ in notes if t is not None]
    when = f" between t={min(times):.3f}s and t={max(times):.3f}s" if times else ""
    return f"{len(notes)} times{when}: {body}"


def summarise_notes(messages: list[str]) -> list[tuple[int, str]]:
    """``(count, line)`` per kind of note, in the order each kind first appears."""
    kinds: dict[str, list[tuple[float | None, str]]] = {}
    for message in messages:
        t, text = split_note(message)
        kinds.setdefault(template(text), []).append((t, text))
    return [(len(notes), summarise_kind(notes)) for notes in kinds.values()]
