"""``simbatch list``: the bundled scenarios, each with its one-line description."""

from __future__ import annotations

NAME = "list"
HELP = "list the bundled scenarios (names SCENARIO may be) with their descriptions"


def add_arguments(p) -> None:
    """No options: the list is this installation's bundled scenarios."""


def run(args) -> None:
    from simbatch.files.bundled import bundled_dir, describe_bundled

    rows = describe_bundled()
    if not rows:
        from simbatch.errors import SimbatchError

        raise SimbatchError("simbatch list", "no bundled scenarios/ folder in this installation; reinstall "
                                             "simbatch (pip install .)")
    print("\n".join(format_list(rows)))
    print(f"({len(rows)} scenarios in {bundled_dir()}; run one with: simbatch run NAME)")


def format_list(rows: list[tuple[str, str]]) -> list[str]:
    """One line per scenario: its name padded to the longest, then its description."""
    width = max(len(name) for name, _ in rows)
    return [f"{name:<{width}}  {text}".rstrip() for name, text in rows]
