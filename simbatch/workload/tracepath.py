"""Where a scenario's trace file is, and what to do when it is not there.

A trace path in a scenario is relative to the scenario's folder. The bundled trace
scenarios (``azure_conv``, ``azure_code``, ``mooncake_conv``, ``prefix_cache``) read
``../../shared/traces/...``, beside a clone of the repository: the traces are not
shipped. After a plain ``pip install .`` the bundled scenarios sit inside the installed
package, where that path means nothing to a user, so the message then says where the
file must go and how to point at it instead (docs/scenarios.md, "Traces").
"""

from __future__ import annotations

import os
from pathlib import Path

from simbatch.errors import SimbatchError


def trace_path(base_dir: Path, trace: str, where: str) -> Path:
    """``trace`` resolved against the scenario's folder ``base_dir``; a file that is not
    there is a one-line error at ``<where>.trace`` saying where it must go and how to give
    another path (``--set <field>.trace=PATH``). Other reasons a file cannot be read are
    left to the reader (:mod:`simbatch.files.textfile`)."""
    path = Path(base_dir) / trace
    if _missing(path):
        raise SimbatchError(f"{where}.trace", missing_trace(path, trace, base_dir, _field(where)))
    return path


def missing_trace(path: Path, trace: str, base_dir: Path, field: str) -> str:
    """The cause of a missing trace: inside an installed package, what the file is and
    where it goes; elsewhere, the full path it was looked for at."""
    hint = f"--set {field}.trace=/path/to/{Path(trace).name}"
    if _inside_installed_package(base_dir):
        in_clone = Path(os.path.normpath(Path("scenarios") / trace)).parent.as_posix()
        return (f"{Path(trace).name} is not in this installation (simbatch ships no traces, and a bundled "
                f"scenario's relative paths are read inside the installed package): point at your copy with "
                f"{hint}, or run from a clone of the repository with the file in <clone>/{in_clone}/ "
                f"(docs/scenarios.md, 'Traces')")
    return (f"trace file not found: {os.path.normpath(os.path.abspath(path))} (the path is relative to the "
            f"scenario's folder); put the file there, or point at it with {hint}")


def _missing(path: Path) -> bool:
    """True when nothing is at ``path``; a path that cannot even be looked at (a folder the
    user may not enter) is the reader's to report."""
    try:
        return not path.exists()
    except OSError:
        return False


def _field(where: str) -> str:
    """The dotted field of ``"<scenario file>: <field>"`` (``workload``, ``workload.synthetic.prompt``)."""
    return where.rpartition(": ")[2] or "workload"


def _inside_installed_package(base_dir: Path) -> bool:
    """True when ``base_dir`` is the bundled scenarios' folder of an installed package (the
    wheel's copy inside site-packages), not a checkout's ``scenarios/``."""
    from simbatch.files.bundled import PACKAGED_SCENARIOS

    try:
        return Path(base_dir).resolve() == PACKAGED_SCENARIOS
    except OSError:
        return False
