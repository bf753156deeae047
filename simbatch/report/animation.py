"""A matplotlib animation as an HTML/JavaScript player that works offline.

matplotlib's ``Animation.to_jshtml`` draws its buttons with Font Awesome icons
loaded from a CDN: offline (a classroom without internet, a notebook opened from
disk) every button is blank. :func:`offline_jshtml` returns the same player
with that stylesheet link removed and each icon replaced by an inline SVG
drawing, so it needs no network and no fonts. Buttons keep their titles.
"""

from __future__ import annotations

import re

_FONT_LINK = re.compile(r"<link\b[^>]*font-awesome[^>]*>\s*", re.IGNORECASE)
_ICON = re.compile(r'<i class="fa ([^"]*)"></i>')
_SVG = ('<svg viewBox="0 0 16 16" width="12" height="12" fill="currentColor" aria-hidden="true" '
        'style="vertical-align:middle">{}</svg>')
_BAR_L, _BAR_R = '<rect x="1.5" y="2" width="2" height="12"/>', '<rect x="12.5" y="2" width="2" height="12"/>'
# Shapes per Font Awesome class, in a 16 x 16 box.
SHAPES = {
    "fa-play": '<polygon points="4,2 14,8 4,14"/>',
    "fa-pause": '<rect x="3" y="2" width="3.5" height="12"/><rect x="9.5" y="2" width="3.5" height="12"/>',
    "fa-step-forward": '<polygon points="3,2 11,8 3,14"/>' + _BAR_R,
    "fa-step-backward": _BAR_L + '<polygon points="13,2 5,8 13,14"/>',
    "fa-fast-forward": '<polygon points="1,2 7,8 1,14"/><polygon points="6,2 12,8 6,14"/>' + _BAR_R,
    "fa-fast-backward": _BAR_L + '<polygon points="10,2 4,8 10,14"/><polygon points="15,2 9,8 15,14"/>',
    "fa-plus": '<rect x="7" y="2" width="2" height="12"/><rect x="2" y="7" width="12" height="2"/>',
    "fa-minus": '<rect x="2" y="7" width="12" height="2"/>',
}
MIRRORED = "fa-flip-horizontal"


def icon_svg(classes: str) -> str:
    """Inline SVG for a Font Awesome icon's classes (``"fa-play fa-flip-horizontal"``); an icon
    it does not know becomes its name as text, never a blank button."""
    names = classes.split()
    shape = next((SHAPES[n] for n in names if n in SHAPES), None)
    if shape is None:
        return " ".join(n.removeprefix("fa-") for n in names if n != MIRRORED) or "?"
    if MIRRORED in names:
        shape = f'<g transform="translate(16,0) scale(-1,1)">{shape}</g>'
    return _SVG.format(shape)


def offline_player(html: str) -> str:
    """``to_jshtml``'s output with the CDN stylesheet dropped and every icon drawn inline."""
    return _ICON.sub(lambda m: icon_svg(m.group(1)), _FONT_LINK.sub("", html))


def offline_jshtml(animation, **kwargs) -> str:
    """``animation.to_jshtml(**kwargs)`` as a player that needs no network (module docstring)."""
    return offline_player(animation.to_jshtml(**kwargs))
