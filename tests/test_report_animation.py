"""The notebook's animation player works offline (issue 15, item 9): matplotlib's to_jshtml draws
its buttons with Font Awesome from a CDN, blank without a network."""

import re

import pytest

from simbatch.report.animation import SHAPES, icon_svg, offline_jshtml, offline_player


@pytest.fixture(scope="module")
def animation():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation

    fig, ax = plt.subplots(figsize=(1, 1), dpi=20)
    (line,) = ax.plot([0, 1], [0, 1])
    anim = FuncAnimation(fig, lambda i: (line.set_ydata([0, i]), line)[1:], frames=2, blit=True)
    yield anim
    plt.close(fig)


def test_player_needs_no_network_and_every_button_shows_something(animation):
    html = offline_jshtml(animation, default_mode="once")
    assert "://" not in html  # no stylesheet, font or script from anywhere (base64 frames hold no ':')
    assert "<link" not in html and 'class="fa' not in html
    buttons = re.findall(r"<button\b[^>]*>(.*?)</button>", html, re.S)
    assert len(buttons) >= 9  # matplotlib's nine controls
    assert all("<svg" in b for b in buttons), buttons
    assert "Animation(frames" in html  # still matplotlib's player


def test_mirrored_icon_and_unknown_icon():
    assert "scale(-1,1)" in icon_svg("fa-play fa-flip-horizontal")
    assert SHAPES["fa-play"] in icon_svg("fa-play")
    assert icon_svg("fa-rocket") == "rocket"  # a future icon still labels its button
    page = ('<link rel="stylesheet"\nhref="https://maxcdn.bootstrapcdn.com/font-awesome/4.4.0/css/font-awesome.min.css">'
            '<button title="Pause"><i class="fa fa-pause"></i></button>')
    assert offline_player(page) == f'<button title="Pause">{icon_svg("fa-pause")}</button>'
