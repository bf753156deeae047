"""The report's content: sections of notes, tables and figures, and their shared style.

``build_sections`` turns a :class:`~simbatch.report.load.ReportData` into the
sections both writers (``html.py``, ``markdown.py``) render, so the HTML and
Markdown reports always say the same thing. The figures themselves live in
``figures_latency.py``, ``figures_series.py`` and ``figures_timeline.py``.

Style: each policy keeps one colour (:mod:`simbatch.report.palette`, the one
the CLI's figures and the notebooks use too: Okabe-Ito, without the yellow that
vanishes on white), one line style and one marker in every figure, so lines
stay apart in grayscale and for colour-blind readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simbatch.report.figures_common import to_png
from simbatch.report.load import (
    ReportData,
    environment,
    policy_rows,
    run_facts,
)
from simbatch.report.table import COMPARISON_VIEW, FORMATS



@dataclass
class Figure:
    """One rendered figure: file stem, caption (also the image's alt text) and PNG bytes."""

    name: str
    caption: str
    png: bytes


@dataclass
class Table:
    """A table of already formatted cells."""

    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Section:
    """A report section: heading, paragraphs, tables and figures, in that order."""

    slug: str
    title: str
    notes: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


INTROS = {
    "reproducibility": ("What ran is read from each run's summary.json; rerun it with `simbatch compare "
                        "SCENARIO` (or `simbatch run`) on the same scenario, seed and version. The environment "
                        "rows describe the machine that made this report."),
    "comparison": ("One row per policy; latencies in ms over completed requests, throughputs per second of "
                   "simulated time, % columns are percentages (MFU and MBU while busy). Definitions: "
                   "docs/metrics.md."),
    "latency-cdfs": "Share of completed requests at or below each latency (further left is better).",
    "load-curves": "Throughput and P99 latencies against offered load, from the folder's sweep.csv.",
    "time-series": ("Time-weighted means per time bin, summed over replicas; KV use is a percentage of the "
                    "KV blocks of all replicas."),
    "step-timeline": ("Which request held which batch slot: prefill and decode of each request, grey "
                      "cross-hatched padding where a finished request's slot stays in its padded batch, "
                      "blank idle slots."),
    "goodput-slo": ("Requests per second that met the SLO, as the TTFT target is scaled from 0.25x to 4x; "
                    "the other targets stay as they were."),
    "control": ("The online controller's knob over simulated time, and the signals it steered by against "
                "their targets (docs/control.md); from each run's control.csv."),
}


def _reproducibility(data: ReportData) -> Section:
    s = Section("reproducibility", "Reproducibility",
                [f"Results folder: {data.folder}.", INTROS["reproducibility"]])
    if (data.folder / "sweep.yaml").is_file():
        s.notes.append("The sweep's grid and its scenario are in sweep.yaml beside sweep.csv.")
    if data.runs:
        s.tables.append(Table(["field", "value"], [list(r) for r in run_facts(data)], "What ran"))
        s.tables.append(Table(["run", "policy and parameters"], [list(r) for r in policy_rows(data)], "Policies"))
    s.tables.append(Table(["package", "version"], [list(r) for r in environment()], "Environment at report time"))
    return s


def comparison_rows(data: ReportData) -> Table:
    """The comparison table (as ``simbatch compare`` prints it) from the runs' summaries."""
    from simbatch.metrics import comparison_table

    table = comparison_table(data.summaries)
    rows = [[str(rec["policy"])] + [FORMATS[k](rec.get(col)) for _, col, k in COMPARISON_VIEW]
            for rec in table.to_dict("records")]
    return Table(["policy"] + [h for h, _, _ in COMPARISON_VIEW], rows)


def _comparison(data: ReportData) -> Section:
    s = Section("comparison", "Comparison table", [INTROS["comparison"]])
    if data.runs:
        s.tables.append(comparison_rows(data))
    else:
        s.notes.append("This folder holds no runs (only a sweep), so there is no table.")
    return s


def _figure_section(slug: str, title: str, made) -> Section:
    """A section around one figure-maker result: ``(fig or None, note)``, or a reason for none."""
    fig, note = made() if callable(made) else made
    s = Section(slug, title, [INTROS[slug]] + ([note] if note else []))
    if fig is not None:
        s.figures.append(Figure(slug, title, to_png(fig)))
    return s


def build_sections(data: ReportData) -> list[Section]:
    """Every section of the report, in reading order."""
    from simbatch.report import figures_latency as lat
    from simbatch.report import figures_series as ser
    from simbatch.report import figures_timeline as tl

    runs = list(data.runs.values())

    def per_run(make, *args):
        # A sweep-only folder keeps no per-request or per-step files: say so, not "no data".
        if runs:
            return lambda: make(runs, *args)
        return None, "This folder holds no run folders (only sweep.csv), so there is nothing to draw here."

    return [
        _reproducibility(data),
        _comparison(data),
        _figure_section("latency-cdfs", "Latency CDFs", per_run(lat.plot_latency_cdfs)),
        _figure_section("load-curves", "Load curves", ser.plot_load_curves(data.sweep)),
        _figure_section("time-series", "Batch size, queue and KV cache over time", per_run(ser.plot_time_series)),
        _figure_section("step-timeline", "Step timeline", per_run(tl.plot_step_timeline)),
        _figure_section("goodput-slo", "Goodput vs SLO", per_run(lat.plot_goodput_vs_slo, data.slo)),
        *_control_sections(runs),
    ]


def _control_sections(runs: list) -> list[Section]:
    """One figure per run that had an online controller (none: no section)."""
    import pandas as pd

    from simbatch.control.plot import control_figure

    s = Section("control", "Online control", [INTROS["control"]])
    for run in runs:
        path = run.folder / "control.csv"
        if not path.is_file():
            continue
        targets = {k: v for k, v in (run.summary.get("slo") or {}).items() if k in ("ttft_ms", "tpot_ms")}
        s.figures.append(Figure(f"control-{run.folder.name}", f"Online control: {run.folder.name}",
                                to_png(control_figure(pd.read_csv(path), targets))))
    return [s] if s.figures else []
