"""Which class each ``policy.kind`` names: the built-in policies and the user's own.

``register_policy(cls)`` adds a class from Python; ``load_policy_file(path)`` imports a
file and registers every policy class it defines (the CLI's ``--policy-file``). A file
is imported once per process, whatever path spelling names it; process pools re-load
the same files in their workers (:func:`loaded_files`), so ``--jobs`` works too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import sys
import traceback
from pathlib import Path

from simbatch.errors import SimbatchError
from simbatch.files.outpaths import check_path_name
from simbatch.files.textfile import read_text
from simbatch.policies.base import Policy
from simbatch.policies.chunked_prefill import ChunkedPrefillPolicy
from simbatch.policies.continuous import ContinuousPolicy
from simbatch.policies.dynamic import DynamicPolicy
from simbatch.policies.static import StaticPolicy

BUILTIN = (StaticPolicy, DynamicPolicy, ContinuousPolicy, ChunkedPrefillPolicy)
BUILTIN_KINDS = tuple(cls.kind for cls in BUILTIN)
# The order in which compare's tables, the reports' figures and validation show the built-in
# kinds (as the lessons go: static, dynamic, continuous, chunked prefill); defined here only.
POLICY_ORDER = BUILTIN_KINDS
POLICIES: dict[str, type[Policy]] = {cls.kind: cls for cls in BUILTIN}
# resolved path -> the classes it registered
_LOADED: dict[str, list[type[Policy]]] = {}


def register_policy(cls: type[Policy], *, replace: bool = False) -> type[Policy]:
    """Make ``cls`` the policy of ``policy.kind: <cls.kind>``; returns it (usable as a decorator).

    The class must subclass :class:`Policy`, name a ``kind`` and have a ``Params``
    dataclass. A built-in kind cannot be replaced; another user class of the same
    kind only with ``replace=True``.
    """
    where = f"policy class {getattr(cls, '__qualname__', cls)!r}"
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise SimbatchError(where, "is not a subclass of simbatch.policies.Policy")
    kind = cls.__dict__.get("kind")
    if not isinstance(kind, str) or not kind.isidentifier():
        raise SimbatchError(where, "needs its own `kind = \"name\"` (a Python identifier)")
    check_path_name(kind, f"{where}: kind")  # it names the policy's folder in `simbatch compare --out`
    params = getattr(cls, "Params", None)
    if not (isinstance(params, type) and dataclasses.is_dataclass(params)):
        raise SimbatchError(where, "needs a `Params` dataclass (its fields are the policy's knobs)")
    if kind in BUILTIN_KINDS and POLICIES.get(kind) is not cls:
        raise SimbatchError(where, f"kind {kind!r} is a built-in policy; choose another name")
    current = POLICIES.get(kind)
    if current is not None and current is not cls and not replace and not same_class(current, cls):
        raise SimbatchError(where, f"kind {kind!r} is already registered by {current.__module__}."
                                   f"{current.__qualname__}")
    POLICIES[kind] = cls
    return cls


def same_class(a: type, b: type) -> bool:
    """The same class from the same file (a file imported again, e.g. by a test)."""
    return a.__qualname__ == b.__qualname__ and a.__module__ == b.__module__


def load_policy_file(path: str | Path) -> list[type[Policy]]:
    """Import the Python file ``path`` and register each policy class it defines; returns them.
    Any failure is a one-line :class:`SimbatchError` naming the file (and line)."""
    path = Path(path)
    # The one loader of user files says why a file cannot be read (missing, a folder, permission
    # denied, not UTF-8) in the words every other input uses; the import below reads it again.
    read_text(path, "policy file")
    key = str(path.resolve())
    if key in _LOADED:
        return _LOADED[key]
    # One module name per file, the same in every process (a worker re-imports by path).
    name = f"simbatch_policy_{path.stem}_{hashlib.sha1(key.encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(module)
    except SimbatchError:
        del sys.modules[name]
        raise
    except SyntaxError as exc:
        del sys.modules[name]
        raise SimbatchError(f"{path}:{exc.lineno}", f"SyntaxError: {exc.msg}") from None
    except Exception as exc:  # the user's code: report where in their file it failed
        del sys.modules[name]
        lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
        at = f"{path}:{lines[-1]}" if lines else str(path)
        raise SimbatchError(at, f"{type(exc).__name__}: {exc}") from None
    classes = [v for v in vars(module).values()
               if isinstance(v, type) and issubclass(v, Policy) and v.__module__ == name and "kind" in v.__dict__]
    if not classes:
        raise SimbatchError(str(path), "defines no policy class (a Policy subclass with its own `kind`)")
    for cls in classes:
        register_policy(cls)
    _LOADED[key] = classes
    return classes


def loaded_files() -> tuple[str, ...]:
    """The policy files this process has loaded (what a worker process must load too)."""
    return tuple(_LOADED)


def load_policy_files(paths) -> None:
    """:func:`load_policy_file` on each of ``paths`` (a process pool's worker initialiser)."""
    for p in paths:
        load_policy_file(p)
