"""How a step's tokens spread over a mixture of experts: distinct experts touched, and under
expert parallelism the load of the busiest GPU.

**Router model.** Every token picks ``k`` distinct experts of ``E``. Expert ``e``'s popularity
``p_e`` follows a Zipf law of exponent ``skew`` (``p_e`` proportional to ``(rank_e + 1) **
-skew``; 0: uniform, the default). A token draws its ``k`` experts one after another, each in
proportion to ``p`` among those not drawn yet (a Plackett-Luce draw: top-k of logits plus
Gumbel noise); tokens are independent. The skew is an ASSUMPTION: papers measure real routers
as unbalanced at inference (LASER, arXiv 2510.03293, on Mixtral-8x7B and DeepSeek-MoE-16B;
Replicate-and-Quantize, arXiv 2602.19938), but no source gives a Zipf exponent for them.

**Distinct experts.** With ``pi_e`` the chance that one token picks expert ``e``, ``T``
independent tokens touch ``sum_e 1 - (1 - pi_e) ** T`` experts on average: exact given
``pi``. For uniform routing ``pi_e = k / E`` exactly. Under skew ``pi`` has no closed form;
it is approximated by the exponential-clock view of the draw: expert ``e`` is picked when its
clock, exponential of rate ``p_e``, rings before the ``k``-th ring, and that time is taken as
the ``t`` with ``sum_e 1 - exp(-p_e t) = k``, so ``pi_e = 1 - exp(-p_e t)``
(tests/test_moe_ep.py checks it against exact draws).

**Expert parallelism.** ``E / ep`` whole experts per GPU; which experts are popular is taken
as unrelated to their ids, so the popularity ranks are dealt to experts by a fixed permutation
(seed 0; vLLM's linear placement gives GPU ``r`` experts ``r E/ep .. (r+1) E/ep - 1``). The
step waits for the busiest GPU, so what matters is the expected MAXIMUM over GPUs of the rows
(token-expert pairs) a GPU computes and of the distinct experts it reads. Neither has a closed
form; :func:`rank_load_table` estimates both once per (E, k, ep, skew) by a seeded Monte-Carlo
draw over a grid of token counts (deterministic, cached per process), drawing each expert's
row count as an independent binomial ``B(T, pi_e)`` (this ignores that a token's ``k`` picks
are distinct; tests/test_moe_ep.py checks it against exact per-token draws).

**EPLB** (DeepSeek's expert-parallel load balancer, vLLM's ``--enable-eplb`` with
``num_redundant_experts``): ``R`` extra expert slots hold copies of the most loaded experts and
the ``E + R`` replicas are packed onto the GPUs so that each GPU's expected load is as even as
whole replicas allow (deepseek-ai/EPLB ``eplb.py``: ``replicate_experts`` gives each extra
slot to the expert with the highest load per replica, ``balanced_packing`` deals the replicas
by decreasing load, each to the least loaded GPU with a free slot). The load is the expected
one, ``pi``: EPLB rebalances from observed counts, which converge to it. A token routed to an
expert with ``c`` replicas goes to one of them at random, so a replica's rows are drawn as
``B(T, pi_e / c)``; the table then takes the busiest GPU over these replicas, as without EPLB.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# Token counts of the Monte-Carlo table: 2**(i/2) for i = 0..28 (1 .. 16384), rounded.
_GRID = np.unique(np.round(2.0 ** (np.arange(29) / 2)).astype(np.int64))
_SAMPLES = 256  # draws per grid point: the max over GPUs is estimated to about 1%
_SEED = 0


def popularity(num_experts: int, skew: float) -> np.ndarray:
    """Each expert's routing weight ``p`` (summing to 1), indexed by expert id: a Zipf law
    of exponent ``skew`` over popularity ranks dealt to experts by a fixed permutation."""
    ranks = np.random.default_rng(_SEED).permutation(num_experts) if skew else np.arange(num_experts)
    weights = (ranks + 1.0) ** -float(skew)
    return weights / weights.sum()


def inclusion(num_experts: int, k: int, skew: float) -> np.ndarray:
    """Chance ``pi_e`` that one token's top-``k`` includes expert ``e`` (they sum to ``k``;
    exact when uniform, the exponential-clock approximation of the module docstring else)."""
    if k >= num_experts:
        return np.ones(num_experts)
    if not skew:
        return np.full(num_experts, k / num_experts)
    p = popularity(num_experts, skew)
    lo, hi = 0.0, 1.0
    while np.sum(-np.expm1(-p * hi)) < k:
        hi *= 2
    for _ in range(100):  # bisection on t: sum(1 - exp(-p t)) is increasing
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.sum(-np.expm1(-p * mid)) < k else (lo, mid)
    return -np.expm1(-p * hi)


def expected_distinct(pi: np.ndarray, tokens: float) -> float:
    """Experts that ``tokens`` independent tokens touch on average, given each one's ``pi``."""
    return float(np.sum(-np.expm1(tokens * np.log1p(-np.minimum(pi, 1 - 1e-16))))) if tokens else 0.0


def eplb_placement(pi: np.ndarray, ep: int, redundant: int) -> np.ndarray:
    """Each GPU's replicas as their routing chance, shape ``(ep, (E + redundant) / ep)``: the
    ``redundant`` extra slots go one by one to the expert with the highest ``pi`` per replica,
    then the replicas, by decreasing chance, each to the least loaded GPU with a free slot
    (ties to the lowest index); see the module docstring."""
    copies = np.ones(len(pi), dtype=np.int64)
    for _ in range(redundant):
        copies[np.argmax(pi / copies)] += 1
    share = np.repeat(pi / copies, copies)
    slots = len(share) // ep
    load, placed = np.zeros(ep), [[] for _ in range(ep)]
    for x in share[np.argsort(-share, kind="stable")]:
        gpu = min((g for g in range(ep) if len(placed[g]) < slots), key=lambda g: (load[g], g))
        placed[gpu].append(x)
        load[gpu] += x
    return np.array(placed)


def replica_chances(num_experts: int, k: int, ep: int, skew: float, eplb: bool, redundant: int) -> np.ndarray:
    """Each GPU's experts (or, under EPLB, replicas) as their chance to receive a token's row,
    shape ``(ep, slots per GPU)``."""
    pi = inclusion(num_experts, k, skew)
    return eplb_placement(pi, ep, redundant) if eplb else pi.reshape(ep, -1)


@lru_cache(maxsize=64)
def rank_load_table(num_experts: int, k: int, ep: int, skew: float, eplb: bool = False,
                    redundant: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token counts, expected max rows over GPUs, expected max distinct experts over GPUs) of
    ``ep``-way expert parallelism, with EPLB's placement when ``eplb`` (see the module
    docstring); arrays, read-only."""
    chances = replica_chances(num_experts, k, ep, skew, eplb, redundant).ravel()
    rng = np.random.default_rng(_SEED)
    rows, distinct = [], []
    for tokens in _GRID:
        counts = rng.binomial(int(tokens), chances, size=(_SAMPLES, len(chances))).reshape(_SAMPLES, ep, -1)
        rows.append(counts.sum(axis=2).max(axis=1).mean())
        distinct.append((counts > 0).sum(axis=2).max(axis=1).mean())
    # No tokens, no load: the first point lets fractional counts (pipeline micro-batches) interpolate.
    out = (np.r_[0.0, _GRID], np.r_[0.0, rows], np.r_[0.0, distinct])
    for a in out:
        a.flags.writeable = False
    return out


class ExpertLoad:
    """Per step of ``T`` tokens: the experts touched and, under ``ep``-way expert parallelism,
    the busiest GPU's rows and distinct experts (``ep`` 1: the whole model on one group)."""

    def __init__(self, num_experts: int, k: int, ep: int = 1, skew: float = 0.0, eplb: bool = False,
                 redundant: int = 0):
        self.num_experts, self.k, self.ep, self.skew = num_experts, k, ep, float(skew)
        self.pi = inclusion(num_experts, k, skew)
        self._uniform = not skew or k >= num_experts
        eplb = bool(eplb) and ep > 1
        self._table = rank_load_table(num_experts, k, ep, float(skew), eplb, redundant) if ep > 1 else None
        if self._table is not None:  # beyond the grid: the last ratio of max to mean rows, experts by rank
            grid, rows, _ = self._table
            self._rows_ratio = rows[-1] / (grid[-1] * k / ep)
            self._pi_by_rank = replica_chances(num_experts, k, ep, float(skew), eplb, redundant)

    def distinct(self, tokens: float) -> float:
        """Distinct experts ``tokens`` tokens touch on average (all GPUs together)."""
        E, k = self.num_experts, self.k
        if self._uniform:  # the closed form the roofline has always used (bit-identical)
            return E * -math.expm1(tokens * math.log1p(-k / E)) if k < E else float(E)
        return expected_distinct(self.pi, tokens)

    def busiest(self, tokens: float) -> tuple[float, float]:
        """(rows, distinct experts) of the GPU with the most of each, expected; without expert
        parallelism the whole step's (``tokens * k`` rows)."""
        if self._table is None:
            return tokens * self.k, self.distinct(tokens)
        grid, rows, distinct = self._table
        if tokens <= grid[-1]:
            return float(np.interp(tokens, grid, rows)), float(np.interp(tokens, grid, distinct))
        most = max(expected_distinct(pi, tokens) for pi in self._pi_by_rank)
        return tokens * self.k / self.ep * self._rows_ratio, most
