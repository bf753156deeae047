"""Cost models: backends that price a step plan in seconds.

:func:`build_cost_model` turns a scenario's ``cost_model:`` entry into a
:class:`CostModel`:

- ``{kind: auto}`` (the default when a scenario gives no ``cost_model``):
  the shipped measurements where they apply to the scenario's model, GPU and
  tensor-parallel degree (``{kind: profile}``), the roofline elsewhere;
- ``{kind: roofline, <parameters>}``: analytic, from FLOPs, bytes and
  datasheet rates (:mod:`simbatch.costmodel.roofline`);
- ``{kind: profile, path: DIR}``: fitted to a measured profile folder
  (``docs/profiles.md``; ``DIR`` relative to the scenario file);
- ``{kind: profile}``: the shipped Vidur measurements for the scenario's model
  and hardware; ``gpu: <preset>`` names the GPU the measurements (shipped or
  at ``path``) were taken on, and when it is not the scenario's hardware the
  profile is rescaled to it (:mod:`simbatch.costmodel.whatif`).

See ``docs/cost_models.md``.
"""

from __future__ import annotations

from pathlib import Path

from simbatch.catalog.hardware import GPUSpec, get_gpu
from simbatch.catalog.models import ModelSpec, get_model
from simbatch.catalog.parallelism import SLICED, ExpertLayout
from simbatch.costmodel.base import CostModel, StepCost
from simbatch.costmodel.model_terms import check_tensor_parallel
from simbatch.costmodel.roofline import RooflineCostModel
from simbatch.costmodel.roofline_params import check_params
from simbatch.errors import SimbatchError

__all__ = ["CostModel", "StepCost", "RooflineCostModel", "build_cost_model", "COST_MODEL_KINDS"]

COST_MODEL_KINDS = ("auto", "roofline", "profile")
PROFILE_KEYS = ("path", "gpu")
SHIPPED_DATA = "simbatch/costmodel/data/vidur_knots.csv"  # what describe() names as the path


def build_cost_model(spec: dict | str | None, model: ModelSpec | str | dict,
                     gpu: GPUSpec | str | dict, tensor_parallel: int = 1,
                     where: str = "cost_model", base_dir: str | Path | None = None,
                     overhead: dict | None = None, engine_where: str = "engine",
                     pipeline: tuple = (1, 0, "overlap", None), layout: ExpertLayout = SLICED) -> CostModel:
    """A cost model from its spec: ``{kind: roofline | profile, ...}``.

    ``spec`` may also be just the kind's name, or None / a dict without
    ``kind`` for the default (auto). ``base_dir`` resolves a relative
    profile ``path`` (the scenario file's folder). ``overhead``: the serving
    engine's step-overhead parameters (:meth:`simbatch.catalog.servers.EngineParams.
    overhead_params`), which then replace the cost model's own; setting them in
    both places is an error naming ``engine_where``. Errors name ``where`` and
    the field. ``pipeline``: (stages, micro-batches, schedule, link between stages or None for
    the GPU's own) of a pipeline-parallel replica (:mod:`simbatch.costmodel.pipeline`;
    roofline only). ``layout``: how the deployment lays a mixture's experts over the GPUs
    (:class:`~simbatch.catalog.parallelism.ExpertLayout`).
    """
    if spec is None:
        spec = {}
    elif isinstance(spec, str):
        spec = {"kind": spec}
    elif not isinstance(spec, dict):
        raise SimbatchError(where, f"expected a mapping with a 'kind', got {type(spec).__name__}")
    params = dict(spec)
    overhead = dict(overhead or {})
    both = [k for k in overhead if k in params]
    if both:
        raise SimbatchError(f"{where}.{both[0]}", f"set by the serving engine ({engine_where}) too; "
                                                  "give the overhead in one place")
    kind = params.pop("kind", "auto")
    if not isinstance(kind, str) or kind.strip().lower() not in COST_MODEL_KINDS:
        raise SimbatchError(f"{where}.kind",
                            f"unknown cost model kind {kind!r}; allowed: {', '.join(COST_MODEL_KINDS)}")
    model = get_model(model, "model")
    gpu = get_gpu(gpu, "gpu")
    # Check here too so that errors carry the caller's `where`.
    check_tensor_parallel(tensor_parallel, model, "tensor_parallel")
    kind = kind.strip().lower()
    stages = pipeline[0]
    if kind == "auto":
        kind = "roofline" if stages > 1 and not params else _auto_kind(params, model, gpu, tensor_parallel, where)
    if kind == "profile" and stages > 1:
        raise SimbatchError(f"{where}.kind", "pipeline parallelism is priced by the roofline only (a profile "
                                             "measures whole models); use kind roofline")
    if kind == "profile":
        return _build_profile(params, model, gpu, tensor_parallel, where, base_dir, overhead, layout)
    check_params(params, where)
    if stages > 1:
        from simbatch.costmodel.pipeline import PipelineCostModel

        return PipelineCostModel(model, gpu, tensor_parallel, *pipeline, layout=layout, **params, **overhead)
    return RooflineCostModel(model, gpu, tensor_parallel, layout=layout, **params, **overhead)


def _auto_kind(params: dict, model: ModelSpec, gpu: GPUSpec, tp: int, where: str) -> str:
    """``profile`` when measurements ship for this model, GPU and TP degree, else ``roofline``."""
    from simbatch.costmodel.vidur import shipped_profile

    if params:
        raise SimbatchError(f"{where}.{next(iter(params))}", "kind auto takes no parameters; "
                                                             "choose kind roofline or profile to set them")
    if not model.is_dense_standard:  # measurements cover dense 16-bit models only
        return "roofline"
    return "profile" if shipped_profile(gpu.name, model.name, tp) is not None else "roofline"


def _build_profile(params: dict, model: ModelSpec, gpu: GPUSpec, tp: int, where: str,
                   base_dir: str | Path | None, overhead: dict | None = None,
                   layout: ExpertLayout = SLICED) -> CostModel:
    """A :class:`ProfileCostModel` from ``{path?, gpu?}`` (see the module docstring)."""
    from simbatch.costmodel.profile_fit import fit_profile_model, unpriced_features  # pandas-heavy: load on use
    from simbatch.costmodel.vidur import describe_shipped, shipped_profile
    from simbatch.costmodel.whatif import derive_profile

    for key in params:
        if key not in PROFILE_KEYS:
            raise SimbatchError(f"{where}.{key}", f"unknown profile parameter; allowed: {', '.join(PROFILE_KEYS)}")
    unpriced = unpriced_features(model)  # a mixture of experts is priced from the measured MLP
    if unpriced:
        raise SimbatchError(f"{where}.kind", f"a profile measures dense 16-bit models; {model.name} has "
                                             f"{' and '.join(unpriced)}: use kind roofline")
    measured_on = get_gpu(params["gpu"], f"{where}.gpu") if "gpu" in params else gpu
    if "path" in params:
        path = _profile_dir(params["path"], base_dir, f"{where}.path")
        profile = _read(path, f"{where}.path")
    else:
        path = SHIPPED_DATA
        profile = shipped_profile(measured_on.name, model, tp)  # an MoE: the dense model of its layers
        if profile is None:
            raise SimbatchError(where, f"no shipped profile for {model.name} on {measured_on.name} at "
                                       f"tensor_parallel {tp}; shipped: {describe_shipped()}; give path: DIR "
                                       f"(a profile folder), or gpu: one of those to rescale it to {gpu.name}")
    if measured_on.name != gpu.name:
        try:
            profile = derive_profile(profile, measured_on, gpu)
        except ValueError as exc:
            raise SimbatchError(where, f"cannot rescale the profile to {gpu.name}: {exc}") from None
    return fit_profile_model(profile, model, gpu, tp, path=str(path), where=where, overhead=overhead,
                             layout=layout)


def _profile_dir(value, base_dir: str | Path | None, where: str) -> Path:
    """The profile folder ``value`` names, relative to ``base_dir``; it must hold profile.yaml."""
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise SimbatchError(where, f"expected a folder path, got {value!r}")
    path = Path(base_dir or ".") / Path(value).expanduser()
    if not (path / "profile.yaml").is_file():
        raise SimbatchError(where, f"no profile at {path} (expected a folder with profile.yaml "
                                   "and measurements.csv, as `simbatch calibrate` writes)")
    return path


def _read(path: Path, where: str):
    """``read_profile`` with its errors as one-line SimbatchErrors naming the field."""
    from simbatch.catalog.profiles import read_profile

    try:
        return read_profile(path)
    except SimbatchError as exc:
        raise SimbatchError(where, exc.cause if exc.where == str(path) else str(exc)) from None
    except (OSError, ValueError, KeyError) as exc:
        raise SimbatchError(where, f"cannot read the profile at {path}: {exc}") from None
