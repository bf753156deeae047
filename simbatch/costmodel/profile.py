"""The ``profile`` cost model: a step priced from measured operator timings.

Each part of a step comes from the profile's fitted operators
(:mod:`simbatch.costmodel.fit`): ``linear`` is the QKV, O, MLP-up, MLP-down and
per-layer misc curves at the step's tokens times the layers; ``misc`` the
once-per-step ops (embedding); attention the fitted prefill / decode models
over the step's summed pairs, KV tokens, batch and context. A part the profile
did not measure (Vidur: attention, LM head; one GPU: all-reduce) falls back to
the roofline, re-targeted to this device (its efficiencies refitted to the
measured linear curves). On the A100 data the roofline was fitted to, the
fallback is the roofline itself; on a slower or faster device it moves with
the device.

A measured profile may also hold whole steps timed on the torch backend
(``step_forward``, ``step_host``: docs/profiles.md). From those, backend
terms cover what the operators miss, linear in the step's work: forward-pass time the operator sum does not explain (cache-cold
weights, the paged-KV gather, glue operators), added to ``misc``, and the
backend's host time per step (building the step's index tensors), added to
``overhead``. Profiles without those rows price exactly as before.

A mixture of experts prices its routed experts (part ``experts``) from the measured
``mlp_up`` / ``mlp_down`` curves at each touched expert's rows, and its shared experts,
dense layers and routers in ``linear`` (:mod:`simbatch.costmodel.profile_moe`); a dense
model's prices do not change.

Every fit (curves, efficiencies, backend terms) is done by
:func:`simbatch.costmodel.profile_fit.fit_profile_model`, the one way to build
this model from a profile; the class only prices with what it is given.

Lookups are cached per token count and attention is three multiply-adds, so
:meth:`ProfileCostModel.step_cost` stays a few microseconds (it runs once per
simulated step).
"""

from __future__ import annotations

from operator import mul

from simbatch.catalog.hardware import GPUSpec, get_gpu
from simbatch.catalog.models import ModelSpec, get_model
from simbatch.catalog.parallelism import SLICED, ExpertLayout
from simbatch.core.plan import StepPlan
from simbatch.costmodel.base import StepCost
from simbatch.costmodel.fit import FittedProfile
from simbatch.costmodel.model_terms import check_tensor_parallel
from simbatch.costmodel.profile_moe import ProfileExperts, mlp_layer_weight
from simbatch.costmodel.roofline import RooflineCostModel
from simbatch.costmodel.roofline_params import DEFAULT_PARAMS
from simbatch.costmodel.work import PricedByWork, plan_work

# The roofline's counting (plan_work, counts, attn_seconds) is reused on purpose: its
# counting of tokens, pairs, KV reads, FLOPs and bytes stays the one definition.
GEMMS = ("qkv_proj", "o_proj", "mlp_up", "mlp_down")
MLP_OPS = ("mlp_up", "mlp_down")
LINEAR_OPS = (*GEMMS, "misc_layer")
OVERHEAD_PARAMS = ("step_overhead_s", "per_seq_overhead_s", "per_token_overhead_s")
# Features of the backend terms, per step (see backend_features).
BACKEND_FEATURES = ("step", "slots", "tokens", "decode_kv_tokens", "prefill_context_tokens")
STEP_OPS = ("step_forward", "step_host")


def profile_origin(header: dict) -> str:
    """Where a profile's numbers come from: ``measured:<device>``, ``vidur:<file>`` or
    ``derived:<from> -> <gpu>`` (the header's ``origin`` when it has one)."""
    if header.get("origin"):
        return str(header["origin"])
    device = (header.get("device") or {}).get("name", "unknown device")
    return f"{header.get('source', 'measured')}:{device}"


class ProfileCostModel(PricedByWork):
    """Prices a :class:`StepPlan` from a profile's fitted operators (module docstring).

    The constructor only assembles what :func:`simbatch.costmodel.profile_fit.fit_profile_model`
    fitted (operator curves, the roofline fallback's efficiencies, the backend
    terms); build one from a profile with that function.
    """

    name = "profile"

    def __init__(self, fitted: FittedProfile, fallback_efficiency: dict[str, float],
                 model: ModelSpec | str | dict, gpu: GPUSpec | str | dict, tensor_parallel: int = 1, *,
                 source: str, path: str | None = None, overhead: dict | None = None,
                 backend_terms: dict | None = None, layout: ExpertLayout = SLICED):
        self.model = get_model(model, "model")
        self.gpu = get_gpu(gpu, "gpu")
        self.tensor_parallel = check_tensor_parallel(tensor_parallel, self.model, "tensor_parallel")
        self.source, self.path = source, path
        self.fitted = fitted
        self.fallback_efficiency = dict(fallback_efficiency)
        engine = overhead  # a serving engine's overhead (simbatch.catalog.servers) wins over the profile's
        overhead = {k: DEFAULT_PARAMS[k] for k in OVERHEAD_PARAMS}
        overhead.update(fitted.overhead or {})
        overhead.update(engine or {})
        self._overhead = overhead
        self._floor = overhead.get("launch_floor_s", 0.0)  # an engine's launch floor (roofline.DEFAULT_PARAMS)
        self._roof = RooflineCostModel(self.model, self.gpu, self.tensor_parallel, layout=layout,
                                       **self.fallback_efficiency, **overhead)
        self._moe = self.model.is_moe
        # The roofline's rule: with all2all dispatch the MoE layers' second all-reduce is an all-to-all.
        self._a2a = self._moe and layout.expert_dispatch == "all2all" and self._roof.expert_parallel > 1
        self._experts = None
        if self._moe:
            self._experts = ProfileExperts(fitted.curves["mlp_up"], fitted.curves["mlp_down"], self.model,
                                           layout, self.tensor_parallel, self._roof.expert_parallel, self.gpu,
                                           self.fallback_efficiency)
        self._precompute()
        self.backend_terms = backend_terms
        self._forward_terms = self._host_terms = None
        if backend_terms:
            self._forward_terms = tuple(backend_terms["forward"].values())
            self._host_terms = tuple(backend_terms["host"].values())

    def describe(self) -> dict:
        """Kind, source, path, what was measured and what falls back to the roofline."""
        fitted = self.fitted
        measured = sorted([*fitted.curves, *fitted.attn] + (["step_overhead"] if fitted.overhead else [])
                          + (list(STEP_OPS) if self.backend_terms else []))
        out = {"kind": "profile", "source": self.source, "path": self.path, "model": self.model.name,
               "gpu": self.gpu.name, "tensor_parallel": self.tensor_parallel, "measured": measured,
               "roofline_fallback": self._fallback_parts(),
               "fallback_efficiency": {k: round(v, 4) for k, v in self.fallback_efficiency.items()},
               **self._overhead}
        if self.backend_terms:
            out["backend_terms"] = {part: {k: float(f"{v:.4g}") for k, v in terms.items()}
                                    for part, terms in self.backend_terms.items()
                                    if part in ("forward", "host")}
        if self._moe:  # the roofline's expert layout keys, and how the experts are priced
            roof = self._roof.describe()
            out.update({k: roof[k] for k in ("expert_parallel", "expert_dispatch", "attention_data_parallel",
                                             "eplb", "redundant_experts", "routing_skew") if k in roof})
            out["experts"] = self._experts.describe()
        return out

    def _fallback_parts(self) -> list[str]:
        f = self.fitted
        parts = [p for p in ("lm_head", "attn_prefill", "attn_decode") if p not in f.curves and p not in f.attn]
        if self.tensor_parallel > 1 and "allreduce" not in f.curves:
            parts.append("allreduce")
        if self._moe:  # never in a profile: the router GEMM, and the experts' all-to-all
            parts += ["router"] + (["all_to_all"] if self._a2a else [])
        return parts + ([] if f.overhead else ["overhead"])

    def _precompute(self) -> None:
        """Per-step multipliers and attention coefficients (scaled to all layers)."""
        f, layers = self.fitted, self.model.num_layers
        per = {op: layers if f.scopes.get(op, "layer") == "layer" else 1 for op in f.curves}
        reduces = 2
        if self._moe:  # the measured MLP runs as dense layers and shared experts only (profile_moe)
            per.update(dict.fromkeys(MLP_OPS, mlp_layer_weight(self.model)))
            if self._a2a:  # the MoE layers' second all-reduce is an all-to-all
                reduces = 2 - self.model.num_moe_layers / layers
        self._lin_ops = [(f.curves[op], per[op]) for op in LINEAR_OPS if op in f.curves and per[op]]
        self._misc = (f.curves["misc_step"], per["misc_step"]) if "misc_step" in f.curves else None
        self._lm = (f.curves["lm_head"], per["lm_head"]) if "lm_head" in f.curves else None
        # Two all-reduces per layer (after O and after the MLP down projection).
        self._ar = (f.curves["allreduce"], reduces * per["allreduce"]) if "allreduce" in f.curves else None
        self._pre = _all_layers(f.attn.get("attn_prefill"), layers)
        self._dec = _all_layers(f.attn.get("attn_decode"), layers)
        # Memo tables: a run prices the same few thousand token counts over and over.
        self._by_tokens: dict[int, tuple[float, float, float]] = {}
        self._by_rows: dict[int, float] = {}

    def price(self, work: tuple, kept: tuple, live: int) -> StepCost:
        """The step's cost from its summed work (``roofline.plan_work``); ``live``: non-padding slots."""
        tokens, rows, dec, pre = work
        lin = self._by_tokens.get(tokens)
        if lin is None:
            lin = self._by_tokens[tokens] = self._token_parts(tokens)
        lm = self._by_rows.get(rows)
        if lm is None:
            lm = self._by_rows[rows] = self._lm_head(rows)
        misc = lin[2]
        if self._forward_terms is not None and tokens:
            misc += sum(map(mul, self._forward_terms, (1.0, rows, tokens, dec[1], pre[1] - pre[2])))
        bd = {
            "linear": lin[0],
            "lm_head": lm,
            "attn_prefill": self._attn(self._pre, pre, True),
            "attn_decode": self._attn(self._dec, dec, False),
            "allreduce": lin[1],
            "overhead": self.overhead(work, live),
            "misc": misc,
        }
        if self._moe:
            bd["experts"] = lin[3]
            if lin[4] is not None:
                bd["all_to_all"] = lin[4]
        if self._floor:
            bd["launch_wait"] = self.launch_wait(sum(v for k, v in bd.items() if k != "overhead"))
        flops, nbytes = self._roof.counts(kept)
        return StepCost(sum(bd.values()), bd, flops, nbytes)

    def overhead(self, work: tuple, live: int) -> float:
        """The engine's overheads, plus the host time the fitted step terms measured."""
        tokens, rows, dec, pre = work
        over, host = self._overhead, 0.0
        if self._forward_terms is not None and tokens:
            host = sum(map(mul, self._host_terms, (1.0, rows, tokens, dec[1], pre[1] - pre[2])))
        return (over["step_overhead_s"] + over["per_seq_overhead_s"] * live
                + over["per_token_overhead_s"] * tokens + host)

    def bounds(self, work: tuple) -> tuple[float, float]:
        """(compute-bound, memory-bound) seconds for two-stream overlap: the measured kernel
        time of ``work``, split by the roofline's ratio of compute to memory time (the
        roofline says which resource binds and by how much; the measurement says how long)."""
        cost = self.price(work, work, 0)
        kernels = (cost.seconds - cost.breakdown["allreduce"] - cost.breakdown["overhead"]
                   - cost.breakdown.get("launch_wait", 0.0))
        if self._moe:
            kernels -= cost.breakdown.get("all_to_all", 0.0)
        c, m = self._roof.bounds(work)
        top = max(c, m)
        return (kernels * c / top, kernels * m / top) if top > 0 else (0.0, 0.0)

    def _token_parts(self, tokens: int) -> tuple:
        """(linear, all-reduce, misc) seconds of a step computing ``tokens`` rows; for a mixture
        of experts also its routed experts' and all-to-all's (None without one)."""
        if not tokens:
            return (0.0, 0.0, 0.0, 0.0, 0.0 if self._a2a else None) if self._moe else (0.0, 0.0, 0.0)
        lin = sum(curve(tokens) * n for curve, n in self._lin_ops)
        misc = self._misc[0](tokens) * self._misc[1] if self._misc else 0.0
        roof = None  # the re-targeted roofline's parts of this step, where needed
        if self.tensor_parallel == 1:
            ar = 0.0
        elif self._ar:
            ar = self._ar[0](tokens) * self._ar[1]
        else:
            roof = self._roof.step_cost(StepPlan([0], [tokens], [0])).breakdown
            ar = roof["allreduce"]
        if not self._moe:
            return lin, ar, misc
        a2a = None
        if self._a2a:
            roof = roof or self._roof.step_cost(StepPlan([0], [tokens], [0])).breakdown
            a2a = roof["all_to_all"]
        return lin + self._experts.router(tokens), ar, misc, self._experts.routed(tokens), a2a

    def _lm_head(self, rows: int) -> float:
        """LM head seconds for ``rows`` logit rows (fitted, else the scaled roofline)."""
        if not rows:
            return 0.0
        if self._lm:
            return self._lm[0](rows) * self._lm[1]
        return self._roof.step_cost(StepPlan(list(range(rows)), [1] * rows, [0] * rows)).breakdown["lm_head"]

    def _attn(self, coefs: list[float] | None, sums: tuple, prefill: bool) -> float:
        """Fitted attention over one kernel's summed work, else the scaled roofline's.

        The fitted intercept is paid once per step and kernel (one varlen call
        for all slots), the slopes on the summed pairs and KV tokens (prefill)
        or the batch and its total context (decode).
        """
        pairs, kv_tokens, queries = sums
        if not queries:
            return 0.0
        if not coefs:
            return self._roof.attn_seconds(sums)
        a, b, c = coefs
        if prefill:
            return a + b * pairs + c * kv_tokens
        return a + b * queries + c * (kv_tokens - queries)


def canonical_plan(tokens: int, seqs: int, context: int) -> StepPlan:
    """The step a ``step_forward`` / ``step_host`` row measured (docs/profiles.md): ``seqs``
    sequences with ``context`` cached tokens each computing ``tokens`` rows in all; all
    decodes when ``tokens == seqs``, else ``seqs - 1`` decodes and one prefill chunk of the
    remaining rows (a whole prompt when ``context`` is 0). Request ids are ``0 .. seqs - 1``."""
    tokens, seqs, context = int(tokens), int(seqs), int(context)
    if seqs < 1 or tokens < seqs:
        raise ValueError(f"a step plan needs 1 <= sequences <= rows, got {seqs} and {tokens}")
    if tokens == seqs:
        return StepPlan(list(range(seqs)), [1] * seqs, [context] * seqs, num_decode_slots=seqs)
    d = seqs - 1
    return StepPlan(list(range(seqs)), [1] * d + [tokens - d], [context] * seqs, num_decode_slots=d)


def backend_features(plan: StepPlan) -> tuple[float, ...]:
    """:data:`BACKEND_FEATURES` of a plan, as :meth:`ProfileCostModel.price` computes them."""
    (tokens, rows, dec, pre), _, _ = plan_work(plan)
    return (1.0, float(rows), float(tokens), float(dec[1]), float(pre[1] - pre[2]))


def _all_layers(fit, layers: int) -> list[float] | None:
    """An attention fit's (a, b, c) for all layers, or None when not measured."""
    return None if fit is None else [layers * fit.a, layers * fit.b, layers * fit.c]
