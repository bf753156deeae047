"""Named variants of a scenario, for ``simbatch compare``: the same workload under a few
field settings side by side (with and without a prefix cache, a controller, a knob...).

```yaml
variants:
  cache: {kv_cache.prefix_caching: true}
  no_cache: {kv_cache.prefix_caching: false}
```

Each variant is a mapping of dotted fields (as ``--set`` takes them) to values,
applied on top of the scenario. Every variant is checked when the scenario is
loaded, so a typo fails before anything runs, naming the variant and the field.
"""

from __future__ import annotations

import copy
from typing import Callable

from simbatch.errors import SimbatchError
from simbatch.files.outpaths import check_path_name
from simbatch.scenario.dotted import set_dotted

# What `simbatch compare --out DIR [--report]` writes beside the run folders: no variant may take
# these names (a variant's folder would replace the table, or the table the variant's folder).
COMPARE_FILES = ("comparison.csv", "comparison.png", "report.html", "report.md", "report_files")


def variant_data(data: dict, overrides: dict, label: str) -> dict:
    """``data`` (without its ``variants``) with the dotted ``overrides`` applied."""
    out = copy.deepcopy({k: v for k, v in data.items() if k != "variants"})
    for key, value in overrides.items():
        if key == "policy.kind" and (out.get("policy") or {}).get("kind") != value:
            out["policy"] = {}  # as --set does: another kind starts from its own defaults
        set_dotted(out, str(key), value, f"{label}.{key}")
    return out


def check_variants(data: dict, source: str, from_dict: Callable[[dict, str], object]) -> dict[str, dict]:
    """The scenario's ``variants`` (name -> overrides), each checked as a whole scenario by
    ``from_dict`` (:func:`simbatch.scenario.spec.from_dict`, handed down: this module is below it)."""
    spec = data.get("variants")
    if spec is None:
        return {}
    where = f"{source}: variants"
    if not isinstance(spec, dict) or not spec:
        raise SimbatchError(where, "expected a mapping of names to {dotted.field: value} mappings")
    names = [variant_name(name, where) for name in spec]
    for name, overrides in zip(names, spec.values()):
        here = f"{where}.{name}"
        if not isinstance(overrides, dict):
            raise SimbatchError(here, "expected a mapping of dotted fields to values, e.g. {kv_cache.prefix_caching: false}")
        if "variants" in overrides or any(str(k).startswith("variants.") for k in overrides):
            raise SimbatchError(here, "a variant cannot define variants")
        try:
            from_dict(variant_data(data, overrides, here), source)
        except SimbatchError as exc:
            cause = exc.where.removeprefix(f"{source}: ")
            raise SimbatchError(here, f"{cause}: {exc.cause}") from None
    return {name: dict(v) for name, v in zip(names, spec.values())}


def variant_name(name, where: str) -> str:
    """A variant's name, checked as the name of its run folder under ``compare --out``
    (:func:`simbatch.files.outpaths.check_path_name`): ``../x`` or ``/abs/x`` would write outside
    ``--out``, ``a/b`` would nest folders the report cannot find. A YAML number (``64:``) is
    refused with the quotes that make it a name."""
    if isinstance(name, (int, float)) and not isinstance(name, bool):
        raise SimbatchError(where, f"variant name {name!r} is a number; quote it to make it a name: '{name}'")
    return check_path_name(name, where, reserved=COMPARE_FILES)
