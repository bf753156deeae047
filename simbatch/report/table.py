"""Plain-text tables for the terminal (and Markdown for reports); no third-party dependency."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas only in annotations: a run writes its tables without it
    import pandas as pd


# (header with unit, comparison-table column, kind): kind picks the formatting.
COMPARISON_VIEW = (
    ("completed", "completed", "int"),
    ("req/s", "request_throughput", "num"),
    ("out tok/s", "output_throughput", "num"),
    ("TTFT p50 ms", "ttft_p50_ms", "ms"),
    ("TTFT p99 ms", "ttft_p99_ms", "ms"),
    ("TPOT p50 ms", "tpot_p50_ms", "ms"),
    ("TPOT p99 ms", "tpot_p99_ms", "ms"),
    ("ITL p99 ms", "itl_p99_ms", "ms"),
    ("E2EL p50 ms", "e2el_p50_ms", "ms"),
    ("E2EL p99 ms", "e2el_p99_ms", "ms"),
    ("queue p50 ms", "queue_p50_ms", "ms"),
    ("goodput req/s", "goodput", "num"),
    ("GPUs", "gpus", "int"),
    ("goodput/GPU", "goodput_per_gpu", "num"),
    ("SLO %", "slo_attainment", "pct"),
    ("pad %", "padding_waste_frac", "pct"),
    ("slots %", "slot_use_frac", "pct"),
    ("busy %", "busy_frac", "pct"),
    ("wait %", "waiting_frac", "pct"),
    ("MFU %", "mfu", "pct"),
    ("MBU %", "mbu", "pct"),
    ("KV peak %", "kv_peak_frac", "pct"),
    ("preempt", "preemptions", "int"),
    ("prefix hit %", "prefix_hit_frac", "pct"),
)
# Columns shown only when some row has a value (a feature most runs do not use).
OPTIONAL_VIEW = {"prefix_hit_frac"}
LATENCY_ROWS = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2EL", "e2el_ms"), ("queue", "queue_ms"))


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt_num(x) -> str:
    """A number rounded for reading: about 3-4 significant digits, thousands separated,
    never in scientific notation (0.000185, not 1.85e-04); '-' when missing. The one
    number formatter of every table simbatch prints (terminal, Markdown, HTML)."""
    if _missing(x):
        return "-"
    x = float(x)
    if x == 0:
        return "0"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    # three significant digits, trailing zeros kept so a column reads alike (0.760 beside 0.483),
    # written out where %g would use an exponent
    text = f"{x:#.3g}"
    return text if "e" not in text else f"{x:.{2 - math.floor(math.log10(a))}f}"


MS_AS_SECONDS = 10_000  # a duration of this many ms or more reads better in seconds


def fmt_ms(x) -> str:
    """A duration given in ms: ms below 10 s, seconds (with an ``s``) from 10 s on, so a
    queue of half an hour reads ``1,980 s`` rather than ``1,979,575``."""
    if _missing(x):
        return "-"
    return fmt_num(x) if abs(float(x)) < MS_AS_SECONDS else f"{fmt_num(float(x) / 1000)} s"


def fmt_pct(x) -> str:
    """A fraction as a percentage with one decimal, '-' when missing."""
    return "-" if _missing(x) else f"{100 * float(x):.1f}"


def fmt_int(x) -> str:
    """An integer count, '-' when missing."""
    return "-" if _missing(x) else f"{int(x):d}"


def fmt_duration(ms) -> str:
    """A duration given in ms, with its unit: ``123.4 ms``, or ``198.3 s`` from 10 s on."""
    text = fmt_ms(ms)
    return text if text == "-" or text.endswith(" s") else f"{text} ms"


FORMATS = {"num": fmt_num, "ms": fmt_ms, "pct": fmt_pct, "int": fmt_int}  # by COMPARISON_VIEW kind


def column_cells(header: str, values: list, kind: str) -> tuple[str, list[str]]:
    """One column's header and cells in one unit: a duration column (``kind`` ``ms``) reads in
    seconds, its header saying ``s``, when its largest value is 10 s or more (a queue of half an
    hour), else in ms; other kinds as :data:`FORMATS` writes them."""
    if kind != "ms":
        return header, [FORMATS[kind](v) for v in values]
    present = [abs(float(v)) for v in values if not _missing(v)]
    if present and max(present) >= MS_AS_SECONDS:
        head = header[:-3] + " s" if header.endswith(" ms") else header
        return head, ["-" if _missing(v) else fmt_num(float(v) / 1000) for v in values]
    return header, [fmt_num(v) for v in values]


def view_cells(records: list[dict], view) -> tuple[list[str], list[list[str]]]:
    """Headers and row cells of ``view`` (``(header, column, kind)`` triples) over ``records``,
    one unit per column (:func:`column_cells`)."""
    columns = [column_cells(h, [rec.get(col) for rec in records], k) for h, col, k in view]
    return [h for h, _ in columns], [list(row) for row in zip(*(cells for _, cells in columns))] \
        if columns else [[] for _ in records]


def render(headers: list[str], rows: list[list[str]], markdown: bool = False) -> str:
    """Align string cells: first column left, the rest right; plain text or a Markdown table."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> list[str]:
        return [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))]

    if markdown:
        rule = [":" + "-" * max(w - 1, 2) if i == 0 else "-" * max(w - 1, 2) + ":" for i, w in enumerate(widths)]
        out = [line(headers), rule, *(line(r) for r in rows)]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in out)
    out = [line(headers), ["-" * w for w in widths], *(line(r) for r in rows)]
    return "\n".join("  ".join(cells).rstrip() for cells in out)


def comparison_cells(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers and formatted cells of the comparison table (``metrics.comparison_table``): the
    terminal's, the Markdown's and the HTML report's. Optional columns only when some row has a value."""
    view = [(h, col, k) for h, col, k in COMPARISON_VIEW
            if col not in OPTIONAL_VIEW or (col in table and table[col].notna().any())]
    records = table.to_dict("records")
    headers, cells = view_cells(records, view)
    return ["policy"] + headers, [[str(rec["policy"])] + row for rec, row in zip(records, cells)]


# The columns compare prints unless asked for all (issue 34 §7: the whole view is 24 columns,
# 255 characters): what a user reads first, the throughput, the two latencies at the median
# and the tail, the SLO share, and the padding that tells padded batching apart.
CORE_COLUMNS = ("req/s", "TTFT p50", "TTFT p99", "TPOT p50", "ITL p99", "SLO %", "pad %")


def format_comparison(table: pd.DataFrame, wide: bool = False) -> str:
    """The comparison table (see ``metrics.comparison_table``) as aligned plain text: the policy
    and :data:`CORE_COLUMNS`, with a last line saying how many columns more ``comparison.csv``
    holds; ``wide`` prints every column. The same text on a terminal and in a pipe."""
    headers, rows = comparison_cells(table)
    if wide:
        return render(headers, rows)
    keep = [0] + [i for i, h in enumerate(headers) if any(h.startswith(c + " ") or h == c for c in CORE_COLUMNS)]
    narrow = render([headers[i] for i in keep], [[r[i] for i in keep] for r in rows])
    return f"{narrow}\n({len(headers) - len(keep)} more columns in comparison.csv; --wide prints them all)"


def format_comparison_markdown(table: pd.DataFrame) -> str:
    """The comparison table as a Markdown (GitHub) table."""
    return render(*comparison_cells(table), markdown=True)


def format_summary(summary: dict, title: str) -> str:
    """One run's summary as a compact aligned block for the terminal."""
    s = summary
    cm = s.get("cost_model")
    priced_by = f" (priced by the {cm.get('kind')} cost model)" if isinstance(cm, dict) and cm.get("kind") else ""
    head = [
        f"== {title}{priced_by} ==",
        f"requests      {s['num_requests']} ({s['completed']} completed) in {fmt_num(s['duration_s'])} s",
        f"throughput    {fmt_num(s['request_throughput'])} req/s, {fmt_num(s['output_throughput'])} output tok/s,"
        f" {fmt_num(s['total_token_throughput'])} total tok/s",
    ]
    lat_rows = [
        [name] + [fmt_ms((s[key] or {}).get(stat)) for stat in ("mean", "median", "p90", "p99")]
        for name, key in LATENCY_ROWS
    ]
    lat = render(["latency (ms)", "mean", "p50", "p90", "p99"], lat_rows)
    tail = [
        f"goodput       {fmt_num(s['goodput'])} req/s, SLO attainment {fmt_pct(s['slo_attainment'])} %",
        f"padding waste {fmt_pct(s['padding_waste_frac'])} % of tokens, slots used {fmt_pct(s['slot_use_frac'])} %,"
        f" busy {fmt_pct(s['busy_frac'])} %, requests waiting {fmt_pct(s.get('waiting_frac'))} % of the time",
        f"MFU {fmt_pct(s['mfu'])} %, MBU {fmt_pct(s['mbu'])} % (while busy), KV peak {fmt_pct(s['kv_peak_frac'])} %",
        f"preemptions   {s['preemptions']}",
    ]
    stops = s.get("admission_stops")
    if stops:  # what held the queue back, while requests waited (docs/metrics.md)
        tail.append("queue held by " + ", ".join(f"{k} {fmt_pct(v)} %" for k, v in stops.items())
                    + " of the steps with requests waiting")
    if isinstance(cm, dict):  # which cost model priced the steps, and from what data
        tail.append(f"cost model    {cm.get('kind')} ({cm.get('source')})")
    engine = s.get("engine")
    if isinstance(engine, dict):  # what the serving engine adds: overhead, front end, memory
        ms = {k: 1e3 * (engine.get(k) or 0.0) for k in ("step_s", "per_seq_s", "request_s")}
        tail.append(f"engine        {engine.get('preset')}: {ms['step_s']:.3g} ms/step + {ms['per_seq_s']:.3g} ms/seq"
                    f" + {1e6 * (engine.get('per_token_s') or 0.0):.3g} us/token, front end {ms['request_s']:.3g} ms"
                    + (f", kernels at least {1e3 * engine['launch_s']:.3g} ms a step (launch)"
                       if engine.get("launch_s") else "")
                    + (", KV less the profiling pass" if engine.get("profile_activations") else "")
                    + (f", KV less {100 * engine['reserve_fraction']:.3g} % of memory"
                       if engine.get("reserve_fraction") else ""))
    return "\n".join(head + [lat] + tail + feature_lines(s))


def feature_lines(s: dict) -> list[str]:
    """One line each for the features a run used: prefix cache, controller, speculative decoding,
    disaggregation."""
    lines = []
    pc = s.get("prefix_cache")
    if isinstance(pc, dict):
        lines.append(f"prefix cache  {fmt_pct(pc.get('token_hit_rate'))} % of prompt tokens hit, "
                     f"{fmt_pct(pc.get('request_hit_rate'))} % of requests, {fmt_int(pc.get('tokens_saved'))} tokens saved")
    ctl = s.get("control")
    if isinstance(ctl, dict):
        lines.append(f"control       {ctl.get('kind')} on {ctl.get('knob')}: {fmt_num(ctl.get('start'))} -> "
                     f"{fmt_num(ctl.get('final'))} (mean {fmt_num(ctl.get('mean'))}, {ctl.get('decisions')} decisions)")
    spec = s.get("speculative")
    if isinstance(spec, dict):
        lines.append(f"speculative   {spec.get('method')} x {spec.get('num_speculative_tokens')} drafts: "
                     f"{fmt_num(spec.get('tokens_per_verify_step'))} tokens per verify step, "
                     f"{fmt_pct(spec.get('draft_acceptance_rate'))} % of drafts accepted")
    dis = s.get("disaggregation")
    if isinstance(dis, dict):
        pre, dec = dis.get("prefill") or {}, dis.get("decode") or {}
        transfer = (dis.get("transfer_ms") or {}).get("mean")
        lines.append(f"split         {pre.get('replicas')} prefill ({fmt_pct(pre.get('busy_frac'))} % busy) + "
                     f"{dec.get('replicas')} decode ({fmt_pct(dec.get('busy_frac'))} % busy), "
                     f"KV transfer {fmt_num(transfer)} ms mean over {(dis.get('link') or {}).get('name')}")
    return lines
