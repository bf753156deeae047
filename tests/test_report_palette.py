"""One set of policy colours (issue 15, item 9): the reports' figures, the CLI's comparison.png
and the classroom notebooks all read simbatch.report.palette, and none keeps its own copy."""

import re
from pathlib import Path

import pytest

from simbatch import POLICY_ORDER
from simbatch.report import plots
from simbatch.report.figures_common import policy_style
from simbatch.report.palette import OTHER_COLOURS, POLICY_COLOURS, policy_colour, policy_colours

ROOT = Path(__file__).resolve().parents[1]
CELLS = sorted((ROOT / "notebooks" / "_cells").glob("*.py"))
HEX = re.compile(r"#[0-9A-Fa-f]{6}\b")
POLICY_WORDS = re.compile(r"\b(static|dynamic|continuous|chunked[_ ]prefill)\b")


def test_every_policy_has_its_own_colour():
    assert set(POLICY_ORDER) <= set(POLICY_COLOURS)
    colours = [POLICY_COLOURS[k] for k in POLICY_ORDER] + list(OTHER_COLOURS)
    assert len(set(c.lower() for c in colours)) == len(colours)
    assert all(HEX.fullmatch(c) for c in colours)


def test_other_policies_take_the_remaining_colours_in_turn():
    got = policy_colours(["continuous", "tgi", "static", "mine"])
    assert got == {"continuous": POLICY_COLOURS["continuous"], "tgi": OTHER_COLOURS[0],
                   "static": POLICY_COLOURS["static"], "mine": OTHER_COLOURS[1]}
    assert policy_colour("dynamic", 5) == POLICY_COLOURS["dynamic"]


@pytest.mark.parametrize("kind", POLICY_ORDER)
def test_report_figures_use_the_palette(kind):
    assert policy_style(kind)["color"] == POLICY_COLOURS[kind]


def test_cli_comparison_plot_uses_the_palette(tmp_path, monkeypatch):
    drawn = []
    real = plots._bar
    monkeypatch.setattr(plots, "_bar", lambda ax, x, h, w, color, hatch: (drawn.append(color),
                                                                        real(ax, x, h, w, color, hatch)))
    summaries = {k: {"ttft_ms": {"median": 10.0 * (i + 1), "p99": 30.0 * (i + 1)},
                     "tpot_ms": {"median": 5.0, "p99": 9.0}, "e2el_ms": {"median": 100.0, "p99": 300.0},
                     "output_throughput": 50.0 * (i + 1)}
                 for i, k in enumerate(reversed(POLICY_ORDER))}  # not in the usual order: colour by name
    plots.plot_comparison(summaries, tmp_path / "c.png")
    # three latency panels (p50 and p99 bars) and the throughput panel, each policy in turn
    per_policy = [POLICY_COLOURS[k] for k in summaries]
    assert drawn == [c for c in per_policy for _ in (0, 1)] * 3 + per_policy


@pytest.mark.parametrize("path", CELLS, ids=[p.stem for p in CELLS])
def test_notebooks_keep_no_policy_colours_of_their_own(path):
    text = path.read_text(encoding="utf-8")
    own = [line.strip() for line in text.splitlines() if HEX.search(line) and POLICY_WORDS.search(line)]
    assert not own, f"{path.name} colours a policy by hand; use simbatch.report.palette.POLICY_COLOURS: {own}"
    if "POLICY_COLOURS[" in text:
        assert "from simbatch.report.palette import POLICY_COLOURS" in text
