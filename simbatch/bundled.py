"""The scenarios shipped in a source checkout's ``scenarios/`` folder, found by name."""

from __future__ import annotations

from pathlib import Path

SOURCE_SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def scenarios_dir(start: Path | None = None) -> Path:
    """The bundled ``scenarios/`` folder: the source tree's (an editable install or a
    checkout), else the first one above ``start`` (default: the working directory)."""
    if (SOURCE_SCENARIOS / "classroom.yaml").is_file():
        return SOURCE_SCENARIOS
    start = Path.cwd() if start is None else Path(start)
    for folder in (start, *start.parents):
        if (folder / "scenarios" / "classroom.yaml").is_file():
            return folder / "scenarios"
    raise FileNotFoundError("no bundled scenarios/ folder: work inside a simbatch checkout")


def resolve_scenario_path(arg: str | Path) -> Path:
    """A file path as given, else a bundled scenario by name (``chat``, ``classroom``...)."""
    path = Path(arg)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    bundled = SOURCE_SCENARIOS / f"{arg}.yaml"
    return bundled if bundled.exists() else path
