"""The bundled scenarios, found by name (``simbatch run chat``).

Their one source is the repository's ``scenarios/`` folder. A wheel ships it
inside the package as ``simbatch/scenarios`` (``setup.py`` maps the folder), so
names resolve after a plain ``pip install .``; an editable install or a
checkout reads the folder itself.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # simbatch/ (this module is simbatch/files/bundled.py)
PACKAGED_SCENARIOS = PACKAGE / "scenarios"  # a wheel's copy
SOURCE_SCENARIOS = PACKAGE.parent / "scenarios"  # the source tree's


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
        source = folder / "simbatch" / "files" / "bundled.py"
        if (folder / "scenarios" / "classroom.yaml").is_file() and source.is_file():
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


def bundled_names() -> list[str]:
    """The names of this installation's bundled scenarios, sorted (empty: none found)."""
    folder = bundled_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder is not None else []


def describe_bundled() -> list[tuple[str, str]]:
    """``(name, one-line description)`` of each bundled scenario (its ``description:`` field)."""
    from simbatch.files.yamlio import load_yaml

    folder = bundled_dir()
    rows = []
    for name in bundled_names():
        data = load_yaml(folder / f"{name}.yaml", "scenario file")
        rows.append((name, str(data.get("description", "")) if isinstance(data, dict) else ""))
    return rows


def unknown_name(arg: str | Path) -> str | None:
    """Why ``arg`` names no scenario, when it looks like a bundled name (no folder, no
    ``.yaml``) and no file of that name exists: the closest bundled name, if any, and where
    the list is (``simbatch list``). None otherwise: the loader reports any other path."""
    import difflib

    text = str(arg)
    if not text or "/" in text or "\\" in text or Path(text).suffix in (".yaml", ".yml"):
        return None
    try:
        if Path(text).exists():
            return None
    except OSError:  # a name the filesystem refuses is still not a bundled one
        pass
    names = bundled_names()
    if text in names:
        return None
    close = difflib.get_close_matches(text, names, n=1, cutoff=0.6)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    return f"no scenario file or bundled scenario of that name{guess} (`simbatch list` shows the bundled ones)"
