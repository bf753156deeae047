"""simbatch's version, in a module of its own so that any module may read it without
importing the package's public API (``simbatch/__init__.py`` loads :mod:`simbatch.api`)."""

__version__ = "0.1.0"  # keep equal to pyproject.toml's
