"""Scenarios: one YAML file says what to simulate; ``--set`` overrides any field.

A scenario is checked as a whole when it is loaded, so a typo fails before
anything runs, with the file and the dotted field in the message.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from simbatch.catalog.hardware import GPUSpec, get_gpu
from simbatch.catalog.models import ModelSpec, get_model
from simbatch.catalog.parallelism import ExpertLayout
from simbatch.catalog.servers import EngineParams, parse_engine, with_engine_defaults
from simbatch.control.params import ControlParams, controller_knob, parse_control
from simbatch.core.params import parse_params
from simbatch.errors import SimbatchError
from simbatch.files.yamlio import compose, load_yaml, read_text
from simbatch.policies import PolicySpec, parse_policy, parse_policy_spec, policy_class
from simbatch.policies.chunked_prefill import ChunkedPrefillPolicy
from simbatch.scenario.cluster import ClusterParams, expert_layout, parse_cluster
from simbatch.scenario.disaggregation import DisaggregationParams, parse_disaggregation
from simbatch.scenario.overrides import override, policy_knobs
from simbatch.scenario.quantization import apply_quantization
from simbatch.scenario.sections import KVCacheParams, SLOParams
from simbatch.scenario.speculative import SpeculativeParams, drafter_model, parse_speculative

if TYPE_CHECKING:
    from simbatch.workload import Workload

TOP_LEVEL = ("name", "description", "workload", "model", "quantization", "hardware", "cluster", "policy",
             "policies", "cost_model", "kv_cache", "slo", "seed", "sweep", "control", "disaggregation",
             "variants", "engine", "speculative")


@dataclass(frozen=True)
class Scenario:
    """A checked scenario, parsed once into typed, frozen specs that the engine reads.

    ``data`` is the resolved YAML mapping, kept for reports, run ids and re-runs;
    every ``with_*`` change and ``--set`` override goes through :func:`from_dict`
    again, so the specs never disagree with it. The workload section stays a
    mapping until :meth:`build_workload` (building it reads the trace)."""

    data: dict
    source: str  # file name, used in error messages
    base_dir: Path  # paths inside the scenario are relative to it
    model: ModelSpec
    experts: ExpertLayout  # how the deployment lays the model's experts over its GPUs (catalog.parallelism)
    gpu: GPUSpec  # the top-level hardware (a replica group or pool may name its own)
    policy: PolicySpec  # the top-level policy
    group_policies: tuple[PolicySpec, ...] = ()  # one per replica group, in cluster.groups order
    control: ControlParams | None = None  # None: no controller (absent or disabled)
    cluster: ClusterParams = field(default_factory=ClusterParams)
    kv_cache: KVCacheParams = field(default_factory=KVCacheParams)
    slo: SLOParams = field(default_factory=SLOParams)
    disaggregation: DisaggregationParams | None = None  # None: no such section
    engine: EngineParams = field(default_factory=EngineParams)  # the serving engine's overhead and memory
    speculative: SpeculativeParams | None = None  # None: no speculative decoding
    drafter: ModelSpec | None = None  # the model whose passes propose drafts (None: none, or n-gram)
    # Where the top-level policy's knobs came from (:func:`policy_knobs`): "policy",
    # "policies.<kind>" or "defaults", plus any "--set policy.<knob>"; printed by `simbatch run`.
    policy_source: str = field(default="policy", compare=False)

    def build_workload(self, seed: int | None = None) -> Workload:
        """The scenario's requests (``seed``: the scenario's unless given)."""
        from simbatch.workload import build_workload  # pandas, only when a run needs it

        return build_workload(self.data["workload"], base_dir=self.base_dir,
                              seed=self.seed if seed is None else seed, where=self.where("workload"))

    @property
    def is_disaggregated(self) -> bool:
        """True when a prefill pool and a decode pool serve (the section is present and enabled)."""
        return self.disaggregation is not None and self.disaggregation.enabled

    @property
    def layouts(self) -> list[str]:
        """Layouts ``simbatch compare`` puts side by side (``disaggregation.layouts``; empty: none)."""
        return list(self.disaggregation.layouts) if self.disaggregation is not None else []

    @property
    def name(self) -> str:
        return str(self.data.get("name", Path(self.source).stem))

    @property
    def seed(self) -> int:
        return int(self.data.get("seed", 0))

    def where(self, field_path: str) -> str:
        """``"<file>: <field>"`` for error messages."""
        return f"{self.source}: {field_path}"

    def with_policy(self, kind: str) -> "Scenario":
        """The same scenario under policy ``kind``, its knobs chosen by :func:`policy_knobs`
        (``policies.<kind>``, the current policy's when it is already ``kind``, else the defaults)."""
        data = copy.deepcopy(self.data)
        old = data["policy"].get("kind")
        params, origin = policy_knobs(data, kind)
        data["policy"] = {**params, "kind": kind}
        groups = (data.get("cluster") or {}).get("replicas")
        for group in groups if isinstance(groups, list) else []:
            # A group's own policy stays only if it is of this kind (its knobs may not fit another).
            if isinstance(group, dict) and isinstance(group.get("policy"), dict) \
                    and group["policy"].get("kind", old) != kind:
                del group["policy"]
        control = data.get("control")
        if isinstance(control, dict):  # a controller that cannot drive this policy is dropped
            new_cls = policy_class({"kind": kind}, f"{self.source}: policy")
            if controller_knob(control.get("kind", "slo"), new_cls) is None:
                del data["control"]
        for name in ("prefill", "decode"):  # a disaggregated pool's own policy: the same rule
            pool = (data.get("disaggregation") or {}).get(name)
            if isinstance(pool, dict) and isinstance(pool.get("policy"), dict) \
                    and pool["policy"].get("kind", old) != kind:
                del pool["policy"]
        return replace(from_dict(data, self.source, self.base_dir), policy_source=origin)

    def with_router(self, router: str) -> "Scenario":
        """The same scenario with ``cluster.router`` set to ``router``."""
        data = copy.deepcopy(self.data)
        data["cluster"] = {**(data.get("cluster") or {}), "router": router}
        return from_dict(data, self.source, self.base_dir)

    @property
    def variants(self) -> list[str]:
        """Names of the scenario's ``variants`` (see :mod:`simbatch.scenario.variants`; empty: none)."""
        return list(self.data.get("variants") or {})

    def with_variant(self, name: str) -> "Scenario":
        """The scenario with variant ``name``'s fields applied (and no variants of its own)."""
        from simbatch.scenario.variants import variant_data

        overrides = (self.data.get("variants") or {}).get(name)
        if overrides is None:
            raise SimbatchError(self.where("variants"), f"no variant {name!r}; defined: {', '.join(self.variants)}")
        return from_dict(variant_data(self.data, overrides, self.where(f"variants.{name}")),
                         self.source, self.base_dir)

    def with_layout(self, layout: str) -> "Scenario":
        """The same scenario served ``colocated`` (by ``cluster``) or ``disaggregated`` (by the
        ``disaggregation`` pools): sets ``disaggregation.enabled``."""
        data = copy.deepcopy(self.data)
        data["disaggregation"] = {**(data.get("disaggregation") or {}), "enabled": layout == "disaggregated"}
        return from_dict(data, self.source, self.base_dir)


def read_yaml(path: Path) -> dict:
    """Read a scenario file through :func:`simbatch.files.yamlio.load_yaml`: unreadable files,
    invalid YAML, duplicate keys and alias bombs become ``file:line`` messages."""
    data = load_yaml(path, "scenario file")
    if not isinstance(data, dict):
        raise SimbatchError(str(path), "a scenario must be a YAML mapping (key: value lines)")
    return data


def from_dict(data: dict, source: str = "<scenario>", base_dir: Path | None = None) -> Scenario:
    """Check a scenario mapping and return a :class:`Scenario`."""
    for key in data:
        if key not in TOP_LEVEL:
            raise SimbatchError(f"{source}: {key}", f"unknown field; allowed: {', '.join(TOP_LEVEL)}")
    for key in ("workload", "model", "hardware", "policy"):
        if data.get(key) is None:
            raise SimbatchError(f"{source}: {key}", "missing (required)")
    if not isinstance(data["policy"], dict):
        raise SimbatchError(f"{source}: policy", "must be a mapping with a kind, e.g. {kind: continuous}")
    check_name(data, source)
    model = get_model(data["model"], f"{source}: model", base_dir=base_dir)  # config: paths are relative
    gpu = get_gpu(data["hardware"], f"{source}: hardware")
    # An engine release's scheduler defaults fill the knobs the policy leaves out (vLLM V1's budget
    # and sequence cap by GPU: simbatch.catalog.servers), in the data itself, so reports show what ran.
    chunked = issubclass(policy_class(data["policy"], f"{source}: policy"), ChunkedPrefillPolicy)
    data = {**data, "policy": with_engine_defaults(data["policy"], data.get("engine"), gpu.name, gpu.memory_bytes,
                                                   chunked)}
    policy = parse_policy_spec(data["policy"], source, max_context=model.max_context)
    policies = data.get("policies") or {}
    if not isinstance(policies, dict):
        raise SimbatchError(f"{source}: policies", f"expected a mapping of policy kind to its knobs, e.g. "
                                                   f"{{static: {{batch_size: 8}}}}, got {policies!r}")
    for kind, params in policies.items():
        if params is not None and not isinstance(params, dict):
            raise SimbatchError(f"{source}: policies.{kind}", f"expected a mapping of knobs, got {params!r}")
        parse_policy({**(params or {}), "kind": kind}, f"{source}: policies.{kind}")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SimbatchError(f"{source}: seed", f"expected a non-negative integer, got {seed!r}")
    model = apply_quantization(model, data.get("quantization"), f"{source}: quantization")
    # checked against the policy it will drive
    slo = parse_params(SLOParams, data.get("slo"), f"{source}: slo")
    control = parse_control(data.get("control"), policy.cls, slo.as_dict(), f"{source}: control")
    cluster = parse_cluster(data.get("cluster"), f"{source}: cluster")
    group_policies = tuple(
        policy if group.policy is None else
        parse_policy_spec(group.policy_spec(data["policy"]), source, f"cluster.replicas[{i}].policy",
                          model.max_context)
        for i, group in enumerate(cluster.groups))
    disaggregation = parse_disaggregation(data.get("disaggregation"), data["policy"], source, model.max_context)
    experts = expert_layout(model, cluster, disaggregation, source)
    speculative, drafter = _speculative(data, model, (policy, *group_policies), disaggregation, cluster, source,
                                       base_dir)
    if data.get("variants") is not None:
        from simbatch.scenario.variants import check_variants  # below this module: it is handed from_dict

        check_variants(data, source, from_dict)
    return Scenario(
        data=data, source=source, base_dir=Path(base_dir or "."),
        model=model, experts=experts, gpu=gpu, policy=policy, group_policies=group_policies,
        control=control, cluster=cluster,
        kv_cache=parse_params(KVCacheParams, data.get("kv_cache"), f"{source}: kv_cache"),
        slo=slo,
        disaggregation=disaggregation,
        engine=parse_engine(data.get("engine"), f"{source}: engine"),
        speculative=speculative, drafter=drafter,
    )


def _speculative(data: dict, model: ModelSpec, policies, disaggregation, cluster, source: str, base_dir):
    """The ``speculative`` section and its drafter's model (both None when absent or off)."""
    where = f"{source}: speculative"
    params = parse_speculative(data.get("speculative"), [p.cls for p in policies], where)
    if params is None:
        return None, None
    if disaggregation is not None and disaggregation.enabled:
        raise SimbatchError(where, "speculative decoding in disaggregated pools is not modelled yet; "
                                   "set speculative.enabled to false or serve colocated")
    if cluster.pipeline_parallel > 1:
        raise SimbatchError(where, "speculative decoding on a pipeline is not modelled yet; set "
                                   "cluster.pipeline_parallel to 1")
    return params, drafter_model(params, model, where, base_dir)


def check_name(data: dict, source: str) -> None:
    """``name`` names output folders (``runs/<name>-sweep``), so it must be a plain file
    name (:func:`simbatch.files.outpaths.check_path_name`); ``description`` is free text."""
    from simbatch.files.outpaths import check_path_name

    name = data.get("name")
    if name is not None:
        check_path_name(name, f"{source}: name")
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise SimbatchError(f"{source}: description", f"expected text, got {type(description).__name__}")


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read, override and check the scenario at ``path`` (or a bundled one by name, e.g. ``"chat"``)."""
    from simbatch.files.bundled import resolve_scenario_path, unknown_name

    cause = unknown_name(path)
    if cause is not None:
        raise SimbatchError(str(path), cause)
    path = resolve_scenario_path(path)
    data, origin = override(read_yaml(path), overrides or [])
    return replace(from_dict(data, str(path), path.resolve().parent), policy_source=origin)


def field_lines(path: Path) -> dict[str, int]:
    """Line (1-based) of every dotted field in a YAML file, e.g. ``{"policy.max_num_seqs": 12}``."""
    try:
        root = compose(read_text(path), str(path))
    except SimbatchError:
        return {}
    lines: dict[str, int] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = f"{prefix}.{key.value}" if prefix else str(key.value)
                lines[name] = key.start_mark.line + 1
                walk(value, name)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[f"{prefix}[{i}]"] = item.start_mark.line + 1
                walk(item, f"{prefix}[{i}]")

    try:
        walk(root, "")
    except RecursionError:  # deeper than any scenario: the lines found so far will do
        pass
    return lines


def locate(error: SimbatchError, path: Path, overrides: list[str]) -> SimbatchError:
    """Add the line of the offending field to an error about scenario ``path``.

    ``"s.yaml: policy.max_num_seqs"`` becomes ``"s.yaml:7: policy.max_num_seqs"``
    (the deepest field that has a line), or names ``--set`` when the value
    came from the command line.
    """
    prefix = f"{path}: "
    if not error.where.startswith(prefix):
        return error
    field_path = error.where[len(prefix):]
    for item in overrides:
        key = item.partition("=")[0].strip()
        if field_path == key or field_path.startswith(key + ".") or field_path.startswith(key + "["):
            return SimbatchError(f"{error.where} (from --set {key})", error.cause)
    lines = field_lines(path)
    probe = field_path
    while probe and probe not in lines:
        stripped = re.sub(r"(\.[^.\[]*|\[\d+\])$", "", probe)  # drop the last ".name" or "[i]"
        probe = "" if stripped == probe else stripped
    if not probe:
        return error
    return SimbatchError(f"{path}:{lines[probe]}: {field_path}", error.cause)
