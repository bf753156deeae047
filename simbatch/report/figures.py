"""The report's content: sections of notes, tables and figures, and their shared style.

``build_sections`` turns a :class:`~simbatch.report.load.ReportData` into the
sections both writers (``html.py``, ``markdown.py``) render, so the HTML and
Markdown reports always say the same thing. A section with nothing to show
is left out, and the first section says which and why. The figures themselves live in
``figures_latency.py``, ``figures_series.py`` and ``figures_timeline.py``.

Style: each policy keeps one colour (:mod:`simbatch.report.palette`, the one
the CLI's figures and the notebooks use too: Okabe-Ito, without the yellow that
vanishes on white), one line style and one marker in every figure, so lines
stay apart in grayscale and for colour-blind readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simbatch.report import capacity_section as cap
from simbatch.report import figures_series as ser
from simbatch.report import sweep_section as sw
from simbatch.report.figures_common import to_png
from simbatch.report.load import (
    ReportData,
    environment,
    policy_rows,
    run_facts,
    scenario_names,
    scenario_source,
)
from simbatch.report.table import comparison_cells


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
    numbers: bool = False  # a table of figures: all but the first column right-aligned, kept compact


@dataclass
class Section:
    """A report section: heading, paragraphs, tables and figures, in that order."""

    slug: str
    title: str
    notes: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Whether it has nothing to show beyond its own paragraphs (then it is left out)."""
        return not self.tables and not self.figures


INTROS = {
    "reproducibility": ("What ran is read from each run's summary.json; rerun it with `simbatch compare "
                        "SCENARIO` (or `simbatch run`) on the same scenario, seed and version. The environment "
                        "rows describe the machine that made this report."),
    "reproducibility-sweep": ("What the sweep ran is read from sweep.yaml; `simbatch sweep` on that scenario "
                              "with the same `--grid` values, seed and version reruns it (sweep.yaml also holds the "
                              "scenario as resolved, with any `--set` applied). The environment rows describe the "
                              "machine that made this report."),
    "comparison": ("One row per policy; latencies in ms over completed requests, throughputs per second of "
                   "simulated time, % columns are percentages (MFU and MBU while busy). Definitions: "
                   "docs/metrics.md."),
    "latency-cdfs": "Share of completed requests at or below each latency (further left is better).",
    "load-curves": "Throughput and P99 latencies against offered load, from the folder's sweep.csv.",
    "sweep-curves": "Throughput and P99 latencies against a swept field, from the folder's sweep.csv.",
    "sweep": ("One row per run of the sweep, from sweep.csv (every metric is there; definitions: "
              "docs/metrics.md). Latencies in ms over completed requests, % columns are percentages."),
    "time-series": ("Time-weighted means per time bin, summed over replicas; KV use is a percentage of the "
                    "KV blocks of all replicas."),
    "step-timeline": ("Which request held which batch slot: prefill and decode of each request, grey "
                      "cross-hatched padding where a finished request's slot stays in its padded batch, "
                      "blank idle slots."),
    "goodput-slo": ("Requests per second that met the SLO, as the TTFT target is scaled from 0.25x to 4x; "
                    "the other targets stay as they were."),
    "capacity": ("One row per configuration, ranked (by $/hour at the target rate when the search sized for "
                 "one, else by sustainable rate per GPU), from capacity.csv: the highest rate at which every SLO "
                 "held for every seed, the first rate tried that failed, and what it costs (indicative "
                 "$/GPU-hour unless --price set them; docs/capacity.md)."),
    "capacity-bars": "Each configuration's highest rate within the SLO, and what it costs.",
    "capacity-probes": ("Every run of the search, from probes.csv: the tail latency each probe measured "
                        "against the rate it offered; filled markers held the SLO, hollow ones failed (the "
                        "verdict column says why)."),
    "reproducibility-capacity": ("capacity.csv and probes.csv do not record the scenario or the command: "
                                 "rerun the `simbatch capacity` command that wrote this folder, on the same "
                                 "version. The environment rows describe the machine that made this report."),
    "control": ("The online controller's knob over simulated time, and the signals it steered by against "
                "their targets (docs/control.md); from each run's control.csv."),
}


NO_RUNS = ("the folder holds a sweep's table and no run folders (a sweep keeps each run's metrics, "
           "not its requests or steps).")


def _capacity_sections(data: ReportData) -> list[Section]:
    """The ranked configurations, their rates and costs as bars, and the probes behind them."""
    headers, rows = cap.capacity_rows(data.capacity)
    table = Section("capacity", "Capacity table", [INTROS["capacity"]], [Table(headers, rows, numbers=True)])
    bars = _figure_section("capacity-bars", "Highest rate and cost per configuration",
                           lambda: cap.plot_capacity(data.capacity))
    probes = _figure_section("capacity-probes", "The search's probes",
                             (lambda: cap.plot_probes(data.probes)) if data.probes is not None
                             else (None, "there is no probes.csv beside capacity.csv."))
    if data.probes is not None:
        headers, rows = cap.probe_rows(data.probes)
        if len(data.probes) > len(rows):
            probes.notes.append(f"The first {len(rows)} of {len(data.probes)} probes; probes.csv holds them all.")
        probes.tables.append(Table(headers, rows, numbers=True))
    return [table, bars, probes]


def _reproducibility(data: ReportData) -> Section:
    names = ", ".join(scenario_names(data)) or "-"
    if not data.runs and data.sweep is None:  # a capacity search's folder
        return Section("reproducibility", "Reproducibility",
                       [f"Results folder: {data.folder}.", INTROS["reproducibility-capacity"]],
                       [Table(["package", "version"], [list(r) for r in environment()], "Environment at report time")])
    s = Section("reproducibility", "Reproducibility",
                [f"Scenario {names}, from {scenario_source(data)}.", f"Results folder: {data.folder}.",
                 INTROS["reproducibility" if data.runs else "reproducibility-sweep"]])
    if data.sweep is not None and data.runs:
        s.notes.append("The sweep's grid and its resolved scenario are in sweep.yaml beside sweep.csv.")
    s.tables += _what_ran(data, s.notes)
    s.tables.append(Table(["package", "version"], [list(r) for r in environment()], "Environment at report time"))
    return s


def _what_ran(data: ReportData, notes: list[str]) -> list[Table]:
    """The runs' facts and policies, else the sweep's; then the sweep's grid (``notes``: what is unknown)."""
    tables = []
    if data.runs:
        tables.append(Table(["field", "value"], [list(r) for r in run_facts(data)], "What ran"))
        tables.append(Table(["run", "policy and parameters"], [list(r) for r in policy_rows(data)], "Policies"))
    elif data.sweep_spec:
        tables.append(Table(["field", "value"], sw.spec_facts(data.sweep_spec), "What the sweep ran"))
    else:
        notes.append("There is no sweep.yaml beside sweep.csv, so what the sweep ran is not known here.")
    if data.sweep is not None:
        axes = sw.sweep_axes(data.sweep, data.sweep_spec)
        tables.append(Table(["swept field", "values"], sw.grid_rows(data.sweep, axes, data.sweep_spec), "Grid"))
    return tables


def comparison_rows(data: ReportData) -> Table:
    """The comparison table (as ``simbatch compare`` prints it) from the runs' summaries."""
    from simbatch.metrics import comparison_table

    headers, rows = comparison_cells(comparison_table(data.summaries))
    return Table(headers, rows, numbers=True)


def _comparison(data: ReportData) -> Section:
    s = Section("comparison", "Comparison table", [INTROS["comparison"]])
    if data.runs:
        s.tables.append(comparison_rows(data))
    else:
        s.notes.append(NO_RUNS)
    return s


def _sweep(data: ReportData) -> Section:
    s = Section("sweep", "Sweep table", [INTROS["sweep"]])
    if data.sweep is None:
        s.notes.append(ser.NO_SWEEP)
        return s
    headers, rows = sw.sweep_rows(data.sweep, sw.sweep_axes(data.sweep, data.sweep_spec))
    if len(data.sweep) > len(rows):
        s.notes.append(f"The first {len(rows)} of {len(data.sweep)} runs; sweep.csv holds them all.")
    s.tables.append(Table(headers, rows, numbers=True))
    return s


def _curves(data: ReportData) -> Section:
    """Load curves over workload.rate_scale, or curves over whichever numeric field was swept."""
    if data.sweep is None:
        return _figure_section("load-curves", "Load curves", ser.plot_load_curves(None))
    x, group = sw.curve_axes(data.sweep, sw.sweep_axes(data.sweep, data.sweep_spec))
    if x is None:
        return _figure_section("sweep-curves", "Sweep curves",
                               (None, "no numeric field (other than the seed) was swept over several values."))
    if x == ser.LOAD_X:
        return _figure_section("load-curves", "Load curves", lambda: ser.plot_load_curves(data.sweep, x, group))
    return _figure_section("sweep-curves", f"Sweep curves over {x}",
                           lambda: ser.plot_load_curves(data.sweep, x, group))


def _figure_section(slug: str, title: str, made) -> Section:
    """A section around one figure-maker result: ``(fig or None, note)``, or a reason for none."""
    fig, note = made() if callable(made) else made
    s = Section(slug, title, [INTROS[slug]] + ([note] if note else []))
    if fig is not None:
        s.figures.append(Figure(slug, title, to_png(fig)))
    return s


def build_sections(data: ReportData) -> list[Section]:
    """Every section of the report that has something to show, in reading order: the results
    first, the reproducibility block (what ran, where, with what) last; the first section
    ends with a note naming the sections left out and why."""
    from simbatch.report import figures_latency as lat
    from simbatch.report import figures_timeline as tl

    runs = list(data.runs.values())

    def per_run(make, *args):
        # A sweep keeps each run's metrics, not its requests and steps.
        if runs:
            return lambda: make(runs, *args)
        return None, NO_RUNS

    if data.capacity is not None and not runs and data.sweep is None:  # a capacity search's folder
        return keep_shown([*_capacity_sections(data), _reproducibility(data)])
    candidates = [
        *(_capacity_sections(data) if data.capacity is not None else ()),
        _comparison(data),
        _sweep(data),
        _figure_section("latency-cdfs", "Latency CDFs", per_run(lat.plot_latency_cdfs)),
        _curves(data),
        _figure_section("time-series", "Batch size, queue and KV cache over time", per_run(ser.plot_time_series)),
        _figure_section("step-timeline", "Step timeline", per_run(tl.plot_step_timeline)),
        _figure_section("goodput-slo", "Goodput vs SLO", per_run(lat.plot_goodput_vs_slo, data.slo)),
        *_control_sections(runs),
        _reproducibility(data),
    ]
    return keep_shown(candidates)


def keep_shown(sections: list[Section]) -> list[Section]:
    """The sections with something to show; the first says which others were left out, and why
    (each empty section's last note; those left out for one reason are named together)."""
    shown = [s for s in sections if not s.empty]
    why: dict[str, list[str]] = {}
    for s in sections:
        if s.empty:
            why.setdefault(s.notes[-1] if len(s.notes) > 1 else "nothing to show.", []).append(s.title)
    if shown and why:
        shown[0].notes.append("Not in this report: " + " ".join(f"{_and(titles)}: {reason.rstrip('.')}."
                                                                for reason, titles in why.items()))
    return shown


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


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
