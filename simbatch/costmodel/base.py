"""The backend interface: one function from a step plan to seconds, with a breakdown."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Protocol

from simbatch.core.plan import StepPlan


class _Record(tuple):
    """A tuple whose fields also have names (built as ``Kind((a, b, ...))``).

    Not a ``NamedTuple``: its generated ``__new__`` is a Python call, and these
    records are built for every simulated step (with a NamedTuple the Azure
    conversation trace simulated 12 % slower, 0.95 -> 1.07 s; this subclass of
    tuple, built by tuple's own constructor, cost nothing measurable).
    """

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in zip(self._fields, self))})"


def _named(cls):
    """Give each of ``cls._fields`` a read-only property for its position."""
    for i, name in enumerate(cls._fields):
        setattr(cls, name, property(itemgetter(i), doc=f"field {i}: {name}"))
    return cls


@_named
class AttnWork(_Record):
    """One attention kernel's work, summed over its slots: ``(pairs, kv_tokens, q_tokens)``
    (a slot with ``q`` queries over ``c`` cached tokens scores ``q*c + q*(q+1)/2`` causal
    pairs, reads ``c + q`` KV tokens and has ``q`` query tokens)."""

    __slots__ = ()
    _fields = ("pairs", "kv_tokens", "q_tokens")


NO_ATTN = AttnWork((0, 0, 0))


@_named
class StepWork(_Record):
    """What one step computes, summed over its slots: ``(tokens, rows, decode, prefill)``,
    the rows through the linear layers, the logit rows (slots computing at least one token, plus
    every draft a decode slot verifies under speculative decoding),
    and the decode and prefill slots' :class:`AttnWork`. What a cost model prices
    (``roofline.plan_work`` builds it from a :class:`StepPlan`; the engine's fast paths
    build the same integers directly, so their prices are bit-identical)."""

    __slots__ = ()
    _fields = ("tokens", "rows", "decode", "prefill")


@dataclass(slots=True)
class StepCost:
    """The price of one step.

    ``seconds`` is the step's wall time; ``breakdown`` splits it by part
    (e.g. ``linear``, ``attn_prefill``, ``attn_decode``, ``lm_head``,
    ``allreduce``, ``overhead``), summing to ``seconds``. ``useful_flops`` and
    ``useful_bytes`` count only work on kept tokens (padding excluded), per
    GPU, for MFU/MBU.
    """

    seconds: float
    breakdown: dict[str, float] = field(default_factory=dict)
    useful_flops: float = 0.0
    useful_bytes: float = 0.0


class CostModel(Protocol):
    """Anything that prices a step plan."""

    name: str

    def step_cost(self, plan: StepPlan) -> StepCost:
        """Seconds (and breakdown) for one engine step executing ``plan``."""
        ...

    def describe(self) -> dict:
        """What this cost model is, for ``summary.json`` (``kind``, ``source``, parameters)."""
        ...


class FastPrices(Protocol):
    """What a cost model may offer the engine's fast path besides :meth:`CostModel.step_cost`:
    the price of a step the engine describes by its counts instead of a plan. Each must give
    the seconds :meth:`~CostModel.step_cost` gives the equivalent plan, bit for bit (the fast
    path's results are the step-by-step engine's). A backend without one (the torch backend)
    has those steps run one by one; :func:`fast_price` is how the engine asks.
    :class:`simbatch.costmodel.work.PricedByWork` implements them all."""

    def decode_cost(self, num_seqs: int, context_sum: int) -> StepCost:
        """A steady decode step: ``num_seqs`` unpadded decodes over ``context_sum`` tokens."""
        ...

    def mixed_cost(self, num_decodes: int, context_sum: int, chunk_new: list[int], chunk_ctx: list[int],
                   streams: int = 1) -> StepCost:
        """Chunked prefill's mixed step: the decodes, then chunks of ``chunk_new`` over ``chunk_ctx``."""
        ...

    def padded_decode_cost(self, num_slots: int, num_live: int, context: int) -> StepCost:
        """A padded batch's decode step: ``num_slots`` rows at ``context``, ``num_live`` of them live."""
        ...

    def padded_decode_costs(self, num_slots: int, num_live: list[int], contexts) -> tuple[list, list, list]:
        """A run of padded decode steps at once: (seconds, useful FLOPs, useful bytes), a list each."""
        ...

    def price_streams(self, parts: list[tuple]) -> StepCost:
        """A step of micro-batches on two streams, each ``(work, kept, live)``."""
        ...


FAST_PRICES = tuple(name for name in FastPrices.__dict__ if not name.startswith("_"))


def fast_price(backend, name: str):
    """``backend``'s fast-path price ``name`` (a method of :class:`FastPrices`), or None when it
    offers none; any other name is a programming error, so the interface stays the one list."""
    if name not in FAST_PRICES:
        raise ValueError(f"{name!r} is not a fast price ({', '.join(FAST_PRICES)})")
    return getattr(backend, name, None)


def chunked_prefill_seconds(cost_model: CostModel, length: int, chunk: int) -> float:
    """Seconds to prefill a ``length``-token prompt alone in chunks of ``chunk`` tokens, one
    step per chunk, each over the KV of the chunks before it (Sarathi-Serve's Figure 9 setup)."""
    total, done = 0.0, 0
    while done < length:
        c = min(chunk, length - done)
        total += cost_model.step_cost(StepPlan(request_ids=[0], num_new_tokens=[c],
                                               num_context_tokens=[done], num_decode_slots=0)).seconds
        done += c
    return total
