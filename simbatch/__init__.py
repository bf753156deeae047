"""simbatch: simulate LLM-inference batching policies on request traces.

The public API (``load_scenario``, ``run``, ``compare``, ``validate``, ``validate_against``) lives in
:mod:`simbatch.api` and is loaded on first use, so ``import simbatch`` stays
light.
"""

from simbatch.version import __version__  # noqa: F401  (simbatch.__version__)

_API = ("load_scenario", "run", "compare", "validate", "validate_against", "write_compare", "RunOutput",
        "POLICY_ORDER")


def __getattr__(name):
    if name == "scenarios_dir":
        from simbatch.files.bundled import scenarios_dir

        return scenarios_dir
    if name in _API:
        import simbatch.api as api

        return getattr(api, name)
    raise AttributeError(f"module 'simbatch' has no attribute {name!r}")


__all__ = [*_API, "scenarios_dir"]
