"""The one set of policy colours: notebooks, the CLI's figures and the reports all read it.

Okabe-Ito colours (apart for the common colour-vision deficiencies), without the
yellow that vanishes on white. The padded policies (static, dynamic) are warm,
the iteration-level ones (continuous, chunked prefill) cool, so a figure reads
"padded vs not" at a glance. Policies beyond the four (a plugin's, say) take the
remaining colours in turn. This module imports nothing, so anything may read it.
"""

from __future__ import annotations

from collections.abc import Iterable

POLICY_COLOURS = {
    "static": "#D55E00",  # vermilion
    "dynamic": "#E69F00",  # orange
    "continuous": "#0072B2",  # blue
    "chunked_prefill": "#009E73",  # bluish green
}
OTHER_COLOURS = ("#CC79A7", "#56B4E9", "#000000")  # reddish purple, sky blue, black


def policy_colour(name: str, index: int = 0) -> str:
    """The colour of policy ``name``; one not in :data:`POLICY_COLOURS` takes the ``index``-th
    of :data:`OTHER_COLOURS` (its position among the unknown ones being drawn)."""
    return POLICY_COLOURS.get(name) or OTHER_COLOURS[index % len(OTHER_COLOURS)]


def policy_colours(names: Iterable[str]) -> dict[str, str]:
    """Each name's colour: the four policies their own, any others the remaining ones in turn."""
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in POLICY_COLOURS]
    return {n: policy_colour(n, unknown.index(n) if n in unknown else 0) for n in names}
