"""Searches for a boundary of a monotone yes/no question, and two ways to drive many at once.

Each search is a generator: it yields the next point it wants to know about
and is sent back whether that point *holds*; when it has its answer it
returns it. Writing the searches this way keeps them free of simulation, so
they can be tested with a fake oracle. The searches of different candidates
are independent, so they can be driven together:

* :func:`drive` in lockstep: each round asks every live search's next point
  in one call (one ``executor.map``), and the next round waits for the
  slowest answer of this one;
* :func:`drive_concurrently` as answers come: each search is sent its answer,
  and asks its next point, as soon as that answer is known, whatever the
  other searches are waiting for (the capacity planner's way: no core idles
  while one slow probe finishes a round).

A search sees only its own answers, so each one asks the same points and
returns the same result under either driver, in whatever order answers come.

Both searches assume monotonicity (a higher rate fails if a lower one fails;
more replicas hold if fewer hold); a noisy oracle can break that, which is
why the capacity report keeps every probe.

An oracle may also answer :data:`HOPELESS` (a failure that lower rates will
not mend): the rate search then stops going down and returns what it has,
marked ``hopeless``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass

# Scale limits of the rate search: 1/64 .. 64 x the recorded rate.
FLOOR, CEILING = 1 / 64, 64.0
MAX_REPLICAS = 1024

Search = Generator[float, bool, object]


class _Hopeless:
    """A "fails, and halving the rate will not help" answer (falsy, like a failure)."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "HOPELESS"


HOPELESS = _Hopeless()


@dataclass(frozen=True)
class Bracket:
    """The boundary lies between ``lo`` (highest scale seen to hold) and ``hi``
    (lowest scale seen to fail). ``lo`` is None when even the floor failed;
    ``hi`` is None when even the ceiling held."""

    lo: float | None
    hi: float | None
    hopeless: bool = False  # the search stopped going down: the oracle said lower rates will not help


def rate_search(start: float = 1.0, tolerance: float = 0.05, floor: float = FLOOR,
                ceiling: float = CEILING) -> Generator[float, bool, Bracket]:
    """Bracket the boundary by doubling or halving from ``start``, then bisect it.

    Bisection is geometric (the midpoint of ``lo`` and ``hi`` is
    ``sqrt(lo * hi)``), as the tolerance is relative: it stops once
    ``hi / lo <= 1 + tolerance``.
    """
    if not (tolerance > 0 and floor <= start <= ceiling):
        raise ValueError("rate_search needs tolerance > 0 and floor <= start <= ceiling")
    lo = hi = None
    k = start
    if (yield k):
        lo = k
        while hi is None and k * 2 <= ceiling * (1 + 1e-9):
            k *= 2
            lo, hi = (k, None) if (yield k) else (lo, k)
    else:
        hi = k
        while lo is None and k / 2 >= floor * (1 - 1e-9):
            k /= 2
            answer = yield k
            if answer is HOPELESS:
                return Bracket(None, k, hopeless=True)
            lo, hi = (k, hi) if answer else (None, k)
    if lo is None or hi is None:
        return Bracket(lo, hi)
    while hi / lo > 1 + tolerance:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if (yield mid) else (lo, mid)
    return Bracket(lo, hi)


def fewest_search(start: int, limit: int = MAX_REPLICAS) -> Generator[int, bool, int | None]:
    """The smallest n in 1..``limit`` that holds, starting from the guess ``start``.

    From the guess it steps down (if the guess holds) or up (if it fails) by
    1, 2, 4, ... until the answer changes, then bisects the integers between.
    Returns None when even ``limit`` fails.
    """
    start = min(max(1, int(start)), limit)
    if (yield start):
        hi, lo, step = start, 0, 1  # lo: largest n known to fail (0: none)
        while hi > 1:
            n = max(1, hi - step)
            if (yield n):
                hi, step = n, step * 2
            else:
                lo = n
                break
    else:
        lo, hi, step = start, None, 1
        while hi is None:
            if lo >= limit:
                return None
            n = min(limit, lo + step)
            if (yield n):
                hi = n
            else:
                lo, step = n, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if (yield mid) else (mid, hi)
    return hi


def drive(searches: dict[Hashable, Search],
          holds: Callable[[list[tuple[Hashable, float]]], list[bool]]) -> dict[Hashable, object]:
    """Run every search to its end; returns each one's result by key.

    Each round collects the one point every live search is waiting on and
    asks ``holds`` about all of them in a single call (a list of
    ``(key, point)``, answered in order).
    """
    results: dict[Hashable, object] = {}
    pending: dict[Hashable, float] = {}
    for key, gen in searches.items():
        _advance(key, gen, None, pending, results)
    while pending:
        asked = list(pending.items())
        pending = {}
        for (key, _), answer in zip(asked, holds(asked)):
            _advance(key, searches[key], answer, pending, results)
    return results


def drive_concurrently(searches: dict[Hashable, Search], ask: Callable[[Hashable, object], None],
                       answers: Callable[[], list[tuple[Hashable, object]]],
                       then: Callable[[Hashable, object], dict[Hashable, Search] | None] | None = None,
                       ) -> dict[Hashable, object]:
    """Run every search to its end, each at its own pace; returns each one's result by key.

    ``ask(key, point)`` starts finding out whether ``point`` holds for search
    ``key`` and returns at once; ``answers()`` blocks until at least one asked
    point is answered and returns the answered ``(key, answer)`` pairs, in any
    order. Each search is sent its answer, and its next point asked, as soon as
    that answer is back. ``then(key, result)``, called as each search ends, may
    return new searches to start (the sizing of a group once its rate searches
    are done). Results are ordered as the searches were given (new ones after),
    so they do not depend on the order answers came in.
    """
    order = list(searches)
    results: dict[Hashable, object] = {}
    live = dict(searches)
    waiting: set = set()

    def step(key, answer) -> None:
        pending: dict = {}
        _advance(key, live[key], answer, pending, results)
        if key in pending:
            waiting.add(key)
            ask(key, pending[key])
            return
        del live[key]
        new = then(key, results[key]) if then else None
        for new_key, gen in (new or {}).items():
            if new_key in live or new_key in results:
                raise ValueError(f"search {new_key!r} started twice")
            live[new_key] = gen
            order.append(new_key)
            step(new_key, None)

    for key in list(searches):
        step(key, None)
    while waiting:
        for key, answer in answers():
            if key not in waiting:
                raise ValueError(f"an answer for {key!r}, which asked nothing")
            waiting.discard(key)
            step(key, answer)
    return {key: results[key] for key in order}


def _advance(key, gen: Search, answer, pending: dict, results: dict) -> None:
    """Send ``answer`` (None: start the search; HOPELESS as it is, anything else as a bool);
    file its next point or its result."""
    try:
        if answer is None:
            pending[key] = next(gen)
        else:
            pending[key] = gen.send(answer if answer is HOPELESS else bool(answer))
    except StopIteration as stop:
        results[key] = stop.value
