"""A scenario's ``speculative:`` section: speculative decoding, and which drafts are accepted.

A proposer drafts ``num_speculative_tokens`` (k) tokens per running request; the
target model verifies the request's last token and its k drafts in one pass
and keeps the drafts up to the first one it rejects, plus one token of its own
(Leviathan, Kalman and Matias, "Fast Inference from Transformers via
Speculative Decoding", ICML 2023). Three proposers, as vLLM names them
(``--speculative-config``):

- ``draft_model``: a smaller model of the same vocabulary, k decode passes;
- ``eagle``: EAGLE's head, one decoder layer over the target's hidden states
  sharing its LM head, k passes (Li et al., "EAGLE", ICML 2024);
- ``ngram``: prompt lookup on the CPU; no GPU work.

Each draft is accepted with probability ``acceptance_rate`` (alpha),
independently, so a step emits (1 - alpha^(k+1)) / (1 - alpha) tokens on average
(the paper's equation 1). ``acceptance_rate`` is one number for every request,
or ``{mean, std}``: each request draws its own alpha from the Beta distribution
with that mean and standard deviation (acceptance differs by prompt and task).
Draws depend only on the seed and the request's id and position, never on how
the run was scheduled, so a run stays a function of its scenario and seed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simbatch.catalog.models import ModelSpec, get_model
from simbatch.core.params import parse_params, require
from simbatch.errors import SimbatchError
from simbatch.policies.iteration import IterationPolicy

METHODS = ("draft_model", "eagle", "ngram")
_STREAM = 0x5BEC  # keeps these draws apart from every other use of the scenario's seed


@dataclass(frozen=True)
class SpeculativeParams:
    """The ``speculative:`` section, checked (``acceptance_rate`` as a mean and a spread)."""

    method: str = "draft_model"
    num_speculative_tokens: int = 4
    acceptance_rate: object = None  # a number, or {mean, std}: checked in __post_init__
    draft_model: str | dict | None = None  # draft_model only: a preset name or model mapping
    draft_pass_overhead_s: float = 0.0  # CPU time each draft pass exposes (CUDA graphs: ~0)
    enabled: bool = True

    def __post_init__(self):
        require(self.method in METHODS, "method", f"unknown proposer; allowed: {', '.join(METHODS)}")
        require(1 <= self.num_speculative_tokens <= 64, "num_speculative_tokens", "must be in [1, 64]")
        require(self.draft_pass_overhead_s >= 0, "draft_pass_overhead_s", "must be >= 0")
        mean, std = _acceptance(self.acceptance_rate)
        object.__setattr__(self, "acceptance_rate", mean)
        object.__setattr__(self, "_std", std)  # not a field: the section has no such key
        if self.method == "draft_model":
            require(self.draft_model is not None, "draft_model", "missing: name the draft model (a preset "
                                                                 "such as llama-3.1-8b, or a model mapping)")
        else:
            require(self.draft_model is None, "draft_model", f"only the draft_model method takes one, "
                                                             f"not {self.method}")

    @property
    def acceptance_std(self) -> float:
        """The spread of per-request acceptance rates (0: every request has ``acceptance_rate``)."""
        return self._std

    @property
    def mean_tokens_per_step(self) -> float:
        """Tokens a verify step emits on average at a constant ``acceptance_rate`` (equation 1)."""
        a, k = self.acceptance_rate, self.num_speculative_tokens
        return float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)


def acceptance_rate_from_length(tokens_per_step: float, num_speculative_tokens: int) -> float:
    """The per-token ``acceptance_rate`` that gives ``tokens_per_step`` tokens per verify step
    with ``num_speculative_tokens`` drafts (equation 1 inverted, by bisection): how to read a
    measured "mean acceptance length", as vLLM logs it, into this section."""
    k = num_speculative_tokens
    if not 1 <= tokens_per_step <= k + 1:
        raise ValueError(f"tokens per verify step must be in [1, {k + 1}] with {k} drafts, got {tokens_per_step}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** j for j in range(k + 1)) < tokens_per_step:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _acceptance(value) -> tuple[float, float]:
    """(mean, std) of ``acceptance_rate``: a number in [0, 1], or ``{mean, std}``."""
    if value is None:
        raise ValueError("acceptance_rate: missing: the share of drafts the target accepts, e.g. 0.7 "
                         "(or {mean: 0.7, std: 0.1})")
    if isinstance(value, dict):
        unknown = set(value) - {"mean", "std"}
        if unknown or "mean" not in value:
            raise ValueError(f"acceptance_rate: expected a number or {{mean, std}}, got {value!r}")
        mean, std = value["mean"], value.get("std", 0.0)
    else:
        mean, std = value, 0.0
    for name, v in (("mean", mean), ("std", std)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            raise ValueError(f"acceptance_rate: {name} must be a number, got {v!r}")
    if not 0 <= mean <= 1:
        raise ValueError(f"acceptance_rate: must be in [0, 1], got {mean!r}")
    if std < 0 or (std > 0 and std * std >= mean * (1 - mean)):
        raise ValueError(f"acceptance_rate: std {std!r} impossible for a share of mean {mean!r} "
                         f"(a Beta distribution needs std^2 < mean x (1 - mean))")
    return float(mean), float(std)


def parse_speculative(spec, policy_classes, where: str) -> SpeculativeParams | None:
    """The ``speculative:`` section (None when absent or ``enabled: false``); ``policy_classes``
    are the classes of every policy that will serve, which must be iteration-level
    (:class:`~simbatch.policies.iteration.IterationPolicy` or a subclass: a verify step is a
    decode step)."""
    if spec is None:
        return None
    params = parse_params(SpeculativeParams, spec, where)
    if not params.enabled:
        return None
    for cls in policy_classes:
        if not issubclass(cls, IterationPolicy):
            raise SimbatchError(where, f"speculative decoding runs under an iteration-level policy (continuous, "
                                       f"chunked_prefill or a subclass of theirs), not {cls.kind} (padded batches "
                                       "do not verify drafts); in `simbatch compare` pass "
                                       "--policies continuous,chunked_prefill")
    return params


def drafter_model(params: SpeculativeParams, target: ModelSpec, where: str, base_dir=None) -> ModelSpec | None:
    """The model whose passes propose the drafts (None for n-gram lookup): the draft model, or
    for EAGLE one decoder layer of the target's shapes (its head shares the target's LM head,
    so only that layer's weights and KV are its own)."""
    if params.method == "ngram":
        return None
    if params.method == "eagle":
        return replace(target, name=f"{target.name}-eagle-head", num_layers=1, num_dense_layers=0,
                       num_experts=0, experts_per_token=0, moe_intermediate_size=0,
                       shared_expert_intermediate_size=0)
    draft = get_model(params.draft_model, f"{where}.draft_model", base_dir=base_dir)
    if draft.vocab_size != target.vocab_size:
        raise SimbatchError(f"{where}.draft_model", f"{draft.name}'s vocabulary ({draft.vocab_size:,}) is not "
                                                    f"{target.name}'s ({target.vocab_size:,}); drafts are verified "
                                                    "token by token, so both must share one tokenizer")
    return draft


def drafter_memory(params: SpeculativeParams, drafter: ModelSpec | None,
                   tensor_parallel: int) -> tuple[float, float]:
    """(weight bytes, KV bytes per token) the drafter adds on each GPU: the draft model's own;
    for EAGLE its layer and the layer that fuses token and feature (2h x h), its embedding and
    LM head being the target's; none for n-gram lookup."""
    if drafter is None:
        return 0.0, 0.0
    weights = drafter.weight_bytes
    if params.method == "eagle":
        h, dt = drafter.hidden_size, drafter.dtype_bytes
        weights += 2 * h * h * dt - drafter.vocab_size * h * dt * (1 if drafter.tied_embeddings else 2)
    return weights / tensor_parallel, float(drafter.kv_bytes_per_token_per_gpu(tensor_parallel))


class Acceptance:
    """Which drafts the target accepts, drawn per request and output position.

    For request ``r`` the draws are fixed by (seed, r): its alpha, then one
    uniform per output position; position ``p``'s draft is accepted when its
    uniform is below alpha. A verify step of a request that has emitted ``g``
    tokens drafts positions ``g .. g + k - 1`` and keeps the leading accepted
    ones. Counts what it decides (``drafted``, ``accepted``, ``steps``).
    """

    def __init__(self, params: SpeculativeParams, seed: int):
        self.params = params
        self.seed = seed
        self._runs: dict[int, list[int]] = {}  # request -> accepted drafts in a row from each position
        self.steps = self.drafted = self.accepted = 0

    def accept(self, rid: int, generated: int, output_tokens: int, drafts: int) -> int:
        """Drafts kept (0 .. ``drafts``) by the verify step of request ``rid`` after ``generated``
        of its ``output_tokens`` tokens."""
        runs = self._runs.get(rid)
        if runs is None:
            runs = self._runs[rid] = self._draw(rid, output_tokens)
        kept = min(runs[generated], drafts)
        self.steps += 1
        self.drafted += drafts
        self.accepted += kept
        return kept

    def forget(self, rid: int) -> None:
        """Request ``rid`` finished: drop its draws."""
        self._runs.pop(rid, None)

    def _draw(self, rid: int, output_tokens: int) -> list[int]:
        p = self.params
        rng = np.random.default_rng((self.seed, _STREAM, rid))
        alpha = p.acceptance_rate
        if p.acceptance_std > 0:
            nu = alpha * (1 - alpha) / p.acceptance_std ** 2 - 1
            alpha = rng.beta(alpha * nu, (1 - alpha) * nu)
        ok = rng.random(output_tokens) < alpha
        pos = np.arange(output_tokens)
        rejected = np.flatnonzero(~ok)
        next_reject = np.append(rejected, output_tokens)[np.searchsorted(rejected, pos)]
        return (next_reject - pos).tolist()

    def stats(self) -> dict:
        """What the run's verify steps did: their count, the drafts proposed and accepted, the
        share of drafts accepted (vLLM's ``draft_acceptance_rate``: below the per-token
        ``acceptance_rate``, since the drafts after a rejection are lost whatever they were)
        and the tokens emitted per verify step (vLLM's mean acceptance length)."""
        s = self.steps
        return {"verify_steps": s, "drafted": self.drafted, "accepted": self.accepted,
                "draft_acceptance_rate": self.accepted / self.drafted if self.drafted else None,
                "tokens_per_verify_step": (s + self.accepted) / s if s else None}


def describe(params: SpeculativeParams, drafter: ModelSpec | None) -> dict:
    """The section as it ran, for ``summary.json``."""
    out = {"method": params.method, "num_speculative_tokens": params.num_speculative_tokens,
           "acceptance_rate": params.acceptance_rate, "expected_tokens_per_step": round(params.mean_tokens_per_step, 4)}
    if params.acceptance_std:
        out["acceptance_std"] = params.acceptance_std
    if drafter is not None:
        out["drafter"] = drafter.name
    return out
