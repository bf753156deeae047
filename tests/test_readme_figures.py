"""The README's figures beyond its first table (and those it moved to docs/validation.md and
docs/performance.md), reproduced by the commands printed beside them
(issue 33: six of eight capacity figures had drifted from the code by up to 9 %).

The first command's table is checked line for line by tests/test_readme_commands.py. Here:
the Azure conversation trace's comparison, the accuracy section's KV pools, every row of its
latency table, and the capacity bullet's table. Each skips with a reason where ../shared,
which holds the traces and the measured logs, is absent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simbatch import load_scenario
from simbatch.api import compare
from simbatch.engine.setup import kv_budget_per_replica
from simbatch.report.table import render, view_cells
from simbatch.validation.against import validate_against

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
# The README's figures and those it moved to the docs (issue 34: the accuracy tables to
# docs/validation.md, Performance to docs/performance.md), read as one text.
README = "\n".join((ROOT / name).read_text(encoding="utf-8")
                   for name in ("README.md", "docs/validation.md", "docs/performance.md", "docs/capacity.md"))
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent (traces and measured runs)")
# The columns of the README's Azure table: (header, comparison column, kind).
AZURE_VIEW = (("completed", "completed", "int"), ("req/s", "request_throughput", "num"),
              ("out tok/s", "output_throughput", "num"), ("TTFT p50 ms", "ttft_p50_ms", "ms"),
              ("TTFT p99 ms", "ttft_p99_ms", "ms"), ("TPOT p50 ms", "tpot_p50_ms", "ms"),
              ("TPOT p99 ms", "tpot_p99_ms", "ms"), ("ITL p99 ms", "itl_p99_ms", "ms"),
              ("E2EL p50 ms", "e2el_p50_ms", "ms"), ("E2EL p99 ms", "e2el_p99_ms", "ms"),
              ("SLO %", "slo_attainment", "pct"), ("pad %", "padding_waste_frac", "pct"),
              ("MFU %", "mfu", "pct"), ("MBU %", "mbu", "pct"), ("preempt", "preemptions", "int"))


def readme_rows(first_cell: str) -> list[str]:
    """The README's Markdown table rows whose first cell starts with ``first_cell``."""
    return [line for line in README.splitlines() if re.match(rf"^\| {re.escape(first_cell)}", line)]


@needs_shared
def test_the_azure_table_is_what_compare_prints():
    """`simbatch compare scenarios/azure_conv.yaml`, the README's table cell for cell."""
    _, table = compare(load_scenario(ROOT / "scenarios" / "azure_conv.yaml"), jobs=1)
    records = table.to_dict("records")
    headers, cells = view_cells(records, AZURE_VIEW)
    ours = render(["policy", *headers], [[r["policy"], *row] for r, row in zip(records, cells)], markdown=True)
    shown = [line for line in README.splitlines() if line.startswith("| ") and "19366" in line]
    assert ours.splitlines()[2:] == shown


def test_the_kv_pools_are_what_the_scenarios_give():
    """The accuracy section's KV table: each scenario's pool, as `simbatch run` prints it."""
    for name, row in (("vllm019_llama8b_rtx4090", "vLLM 0.19, Llama-3.1-8B, RTX 4090"),
                      ("vllm_llama70b_a100_tp2", "vLLM V1 0.8.5, Llama-3.1-70B TP2, A100"),
                      ("vllm_opt13b_a100", "vLLM v0.2.3, OPT-13B, A100")):
        sc = load_scenario(name)
        tokens = kv_budget_per_replica(sc, sc.model, sc.gpu).tokens
        (line,) = readme_rows(row)
        assert f"| {tokens:,} |" in line, (name, tokens, line)


@needs_shared
@pytest.mark.parametrize("scenario, logs, label", [
    ("vllm_opt13b_a100", "distserve-opt13b-a100/vllm-*.exp", r"vLLM \d+-"),
    ("distserve_opt13b_a100", "distserve-opt13b-a100/distserve-c21d11-*.exp", r"DistServe \d"),
    ("distserve_opt13b_a100_c21d12", "distserve-opt13b-a100/distserve-c21d12-*.exp", "DistServe c21d12"),
    ("vllm_llama70b_a100_tp2", "llmd-vllm-2025/exp-0-llama-3.1-70b-a100-tp2/*.csv", "vLLM V1 70B"),
    ("vllm_llama4scout_fp8_h100_tp4", "llmd-vllm-2025/exp-4-llama-4-scout-fp8-h100-tp4/*.csv", "vLLM V1 Scout"),
    ("vllm019_llama8b_rtx4090", "llmservingsim-vllm0.19/RTX4090/Llama-3.1-8B/vllm/requests.jsonl",
     "vLLM 0.19 RTX 4090"),
])
def test_the_accuracy_rows_are_what_validate_prints(scenario, logs, label):
    """Every row of the accuracy section's latency table: measured / predicted TTFT and TPOT
    p50/p90 and SLO attainment (where the scenario has an SLO), as `simbatch validate ...
    --against` computes them for the logs of the command printed above the table."""
    paths = sorted((SHARED / "measured").glob(logs))
    result = validate_against(load_scenario(scenario), paths)
    shown = [line for line in README.splitlines() if re.match(rf"^\| {label}", line)]
    assert len(shown) == len(result.logs) > 0
    for v in sorted(result.logs, key=lambda v: v.errors["offered_rate"]):
        e = v.errors
        cells = [f"{e[f'{k}_measured']:,.0f} / {e[f'{k}_predicted']:,.0f}"
                 for k in ("ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "tpot_p90_ms")]
        met = e.get("attainment_measured")
        cells.append("-" if met is None else f"{met:.2f} / {e['attainment_predicted']:.2f}")
        rate = f"{e['offered_rate']:.2f}"
        assert any(f"| {rate} | " + " | ".join(cells) + " |" in line for line in shown), (v.name, cells, shown)


@needs_shared
def test_the_capacity_table_is_what_the_printed_command_prints(capsys):
    """The capacity bullet's table, from the command printed above it (about 40 s on 2 cores)."""
    from simbatch.cli import main

    block = re.search(r"```bash\n(simbatch capacity azure_conv .*?)\n```", README, re.S)
    assert block, "docs/capacity.md: no capacity command before its table"
    argv = block.group(1).replace("\\\n", " ").split()[1:]
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(printed) if line.startswith("configuration"))
    ours = [line.rstrip() for line in printed[start:start + 10]]
    shown = re.compile(r"\n(configuration .*?)\n```", re.S).search(README, block.end()).group(1).split("\n")
    assert ours == [line.rstrip() for line in shown]


def performance_rows(label: str) -> list[list[str]]:
    """The rows of the Performance section's block ``(label) speed_...``, split into cells."""
    block = re.search(rf"^\({label}\) speed_{label} .*?\npolicy .*?\n(.*?)(?:\n\n|\n```)", README, re.S | re.M)
    assert block, f"README: no Performance block ({label})"
    return [line.split() for line in block.group(1).splitlines()]


@needs_shared
@pytest.mark.parametrize("label", ["a", "b"])
def test_the_performance_counts_are_what_the_benchmark_runs(label):
    """The Performance section's requests and steps columns for (a) and (b), from the
    benchmark's own scenario under each row's policy (its times and MiB are one machine's
    measurement, labelled as such in the README, and not a test's to reproduce)."""
    from simbatch.api import run
    from simbatch.scenario.spec import from_dict

    path = ROOT / "benchmarks" / "scenarios" / f"speed_{label}.yaml"
    rows = performance_rows(label)
    assert rows
    for cells in rows:
        kind, _, variant = cells[0].partition("+")
        requests, steps = int(cells[-6]), int(cells[-5])
        scenario = load_scenario(path).with_policy(kind)
        if variant == "streams2":
            scenario = from_dict({**scenario.data, "policy": {**scenario.data["policy"], "streams": 2}},
                                 scenario.source, scenario.base_dir)
        out = run(scenario)
        assert (len(out.result.workload), sum(out.result.log.replica_num_steps)) == (requests, steps), cells[0]


@needs_shared
def test_the_two_replica_sentence_is_what_compare_gives():
    """The Azure section's "With --set cluster.replicas=2 ..." sentence: attainment, TTFT and TPOT
    p99 of the iteration-level policies and static batching's throughput, from that command."""
    _, table = compare(load_scenario(ROOT / "scenarios" / "azure_conv.yaml", ["cluster.replicas=2"]), jobs=1)
    row = {r["policy"]: r for r in table.to_dict("records")}
    c, cp, st = row["continuous"], row["chunked_prefill"], row["static"]
    text = " ".join(README.split())
    expected = (f"meet the SLO for {100 * c['slo_attainment']:.1f} % and {100 * cp['slo_attainment']:.1f} % of "
                f"requests (TTFT p99 {c['ttft_p99_ms']:.0f} ms vs {cp['ttft_p99_ms']:.0f} ms, TPOT p99 "
                f"{c['tpot_p99_ms']:.0f} ms vs {cp['tpot_p99_ms']:.0f} ms), while static batching still falls "
                f"behind ({st['request_throughput']:.2f} req/s)")
    assert expected in text, expected
