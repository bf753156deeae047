"""The bundled scenarios, found by name (``simbatch run chat``).

Their one source is the repository's ``scenarios/`` folder. A wheel ships it
inside the package as ``simbatch/scenarios`` (``setup.py`` maps the folder), so
names resolve after a plain ``pip install .``; an editable install or a
checkout reads the folder itself.
"""

from __future__ import annotations

from pathlib import Path

PACKAGED_SCENARIOS = Path(__file__).resolve().parent / "scenarios"  # a wheel's copy
SOURCE_SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"  # the source tree's


def bundled_dir() -> Path | None:
    """Where this installation's bundled scenarios are (None: nowhere).

    The wheel's copy comes last: a clone of the repository at or above the working
    directory (``pip install .`` then commands run in the clone, as the README does) reads
    its own ``scenarios/``, because the trace scenarios' paths (``../../shared/traces``)
    point beside the clone, not beside the installed package.
    """
    if (SOURCE_SCENARIOS / "classroom.yaml").is_file():
        return SOURCE_SCENARIOS  # a checkout imported in place (editable install)
    try:
        clone = checkout_scenarios(Path.cwd())
    except OSError:  # the working directory was removed
        clone = None
    if clone is not None:
        return clone
    return PACKAGED_SCENARIOS if (PACKAGED_SCENARIOS / "classroom.yaml").is_file() else None


def checkout_scenarios(start: Path) -> Path | None:
    """The ``scenarios/`` folder of the simbatch checkout at or above ``start``, if any
    (a checkout: ``scenarios/classroom.yaml`` beside the ``simbatch`` package's source)."""
    for folder in (start, *start.parents):
        if (folder / "scenarios" / "classroom.yaml").is_file() and (folder / "simbatch" / "bundled.py").is_file():
            return folder / "scenarios"
    return None


def scenarios_dir(start: Path | None = None) -> Path:
    """The bundled ``scenarios/`` folder: the installed package's or the source tree's,
    else the first one above ``start`` (default: the working directory)."""
    folder = bundled_dir()
    if folder is not None:
        return folder
    start = Path.cwd() if start is None else Path(start)
    for folder in (start, *start.parents):
        if (folder / "scenarios" / "classroom.yaml").is_file():
            return folder / "scenarios"
    raise FileNotFoundError("no bundled scenarios/ folder: reinstall simbatch (pip install .)")


def resolve_scenario_path(arg: str | Path) -> Path:
    """A file path as given, else a bundled scenario by name (``chat``, ``classroom``...)."""
    path = Path(arg)
    if _exists(path) or path.suffix in (".yaml", ".yml"):
        return path
    folder = bundled_dir()
    bundled = folder / f"{arg}.yaml" if folder is not None else path
    return bundled if bundled.exists() else path


def _exists(path: Path) -> bool:
    """``path.exists()``, False where a folder on the way may not be entered (``exists`` raises
    there): then a bundled name is still found, and any other path goes to the loader, which
    reports it in one line."""
    try:
        return path.exists()
    except OSError:
        return False
