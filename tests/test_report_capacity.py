"""`simbatch report` on a `simbatch capacity --out` folder (issue 36 §6): it said "no results";
now the ranked table, the rate and cost bars and every probe, read from the folder's CSVs."""

from __future__ import annotations

import pandas as pd
import pytest
from capacitykit import TINY_SCENARIO

from simbatch.cli import main
from simbatch.report.capacity_section import configuration
from simbatch.report.table import fmt_num

SCENARIO = TINY_SCENARIO


@pytest.fixture(scope="module")
def capacity_folder(tmp_path_factory):
    """A real capacity search: two policies on two GPUs, sized for 30 req/s (about 5 s)."""
    tmp = tmp_path_factory.mktemp("cap")
    path = tmp / "s.yaml"
    path.write_text(SCENARIO)
    out = tmp / "cap"
    assert main(["capacity", str(path), "--slo", "ttft_p99_ms=300", "--policies", "continuous,chunked_prefill",
                 "--hardware", "a100-80gb,h100-sxm", "--seeds", "0", "--tolerance", "0.2", "--target-rate", "30",
                 "--executor", "inline", "--out", str(out)]) == 0
    return out


def test_a_capacity_folder_gets_its_table_bars_and_probes(capacity_folder, capsys):
    assert main(["report", str(capacity_folder)]) == 0
    assert "report.html" in capsys.readouterr().out
    md = (capacity_folder / "report.md").read_text(encoding="utf-8")
    assert md.startswith("# simbatch report: cap capacity search")
    for title in ("## Capacity table", "## Highest rate and cost per configuration", "## The search's probes",
                  "## Reproducibility"):
        assert title in md, title
    assert "## Comparison table" not in md and "no run folders" not in md  # not a compare's report
    # every ranked row, in rank order, with its highest rate and its $/hour at the target
    table = pd.read_csv(capacity_folder / "capacity.csv")
    rows = [line for line in md.splitlines() if line.startswith("| ") and ". " in line.split("|")[1]]
    assert len(rows) == len(table)
    for line, r in zip(rows, table.to_dict("records")):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == f"{r['rank']}. {configuration(r)}"
        assert cells[1] == fmt_num(r["max_rate"]) and cells[-1] == fmt_num(r["target_usd_per_hour"])
    # every probe, each with its verdict
    probes = pd.read_csv(capacity_folder / "probes.csv")
    last = [line.strip("|").split("|")[-1].strip() for line in md.splitlines() if line.startswith("| ")]
    verdicts = [v for v in last if v == "holds" or v.startswith("fails")]
    assert len(verdicts) == len(probes) and verdicts.count("holds") == probes["holds"].sum()
    assert all(v == "holds" or v.startswith("fails: ") for v in verdicts)  # a failure says why
    for name in ("capacity-bars", "capacity-probes"):
        assert (capacity_folder / "report_files" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_capacity_table_without_a_column_is_a_one_line_error(capacity_folder, tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    pd.read_csv(capacity_folder / "capacity.csv").drop(columns="max_rate").to_csv(broken / "capacity.csv",
                                                                                  index=False)
    assert main(["report", str(broken)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"simbatch: error: {broken / 'capacity.csv'}: missing columns: max_rate"
    assert not (broken / "report.html").exists()


def test_an_empty_folder_names_capacity_among_what_it_expected(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "sweep.csv or capacity.csv" in capsys.readouterr().err
