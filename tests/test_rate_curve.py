"""workload.rate_curve: traffic that rises and falls (issue 36 §1), its arrivals and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2

from simbatch.errors import SimbatchError
from simbatch.workload import Workload, build_workload
from simbatch.workload.rate_curve import RateCurve, parse_rate_curve, warp_arrivals

W = "s.yaml: workload"
LENGTHS = {"prompt": {"kind": "constant", "value": 100}, "output": {"kind": "constant", "value": 10}}


def build(spec: dict, base_dir: Path = Path("."), seed: int = 0) -> Workload:
    return build_workload(spec, base_dir=base_dir, seed=seed, where=W)


def error_of(spec: dict, base_dir: Path = Path(".")) -> str:
    with pytest.raises(SimbatchError) as info:
        build(spec, base_dir)
    return str(info.value)


def counts_fit(arrivals: np.ndarray, edges: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """Pearson's statistic of the arrivals' counts per interval against ``expected``, and the
    99.9 % point of its chi-square distribution (an interval count of a Poisson process is
    Poisson, so the statistic is about chi-square with one degree per interval)."""
    observed = np.histogram(arrivals, bins=edges)[0]
    assert observed.sum() == len(arrivals)  # every arrival falls inside the curve
    stat = float(np.sum((observed - expected) ** 2 / expected))
    return stat, float(chi2.ppf(0.999, len(expected)))


def write_csv(tmp_path: Path, text: str, name: str = "traffic.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_csv_curve_gives_each_interval_its_rate(tmp_path):
    # Four ten-minute intervals at 1, 4, 0.5 and 2 req/s.
    write_csv(tmp_path, "t_s,rate\n0,1\n600,4\n1200,0.5\n1800,2\n")
    w = build({"synthetic": LENGTHS, "rate_curve": {"csv": "traffic.csv"}}, tmp_path)
    edges = np.array([0, 600, 1200, 1800, 2400.0])  # the last interval as long as the one before
    expected = np.array([1, 4, 0.5, 2]) * 600
    stat, bound = counts_fit(w.arrival_s, edges, expected)
    assert stat < bound
    assert abs(len(w) - expected.sum()) < 4 * np.sqrt(expected.sum())
    assert np.all(np.diff(w.arrival_s) >= 0)
    assert set(w.prompt_tokens) == {100} and any("rate curve: traffic.csv" in n for n in w.notes)


def test_a_uniform_arrival_would_fail_the_same_check(tmp_path):
    # The check above can fail: the same number of arrivals spread evenly over the span
    # (what ignoring the curve would give) is far outside the bound.
    edges = np.array([0, 600, 1200, 1800, 2400.0])
    expected = np.array([1, 4, 0.5, 2]) * 600
    even = np.linspace(0, 2400, int(expected.sum()), endpoint=False)
    stat, bound = counts_fit(even, edges, expected)
    assert stat > 10 * bound


def test_the_diurnal_shape_has_its_ratio_peak_and_mean():
    curve = parse_rate_curve({"shape": "diurnal", "mean_rate": 50, "peak_to_trough": 4, "peak_hour": 14},
                             Path("."), "rc")
    assert curve.duration_s == 86400 and len(curve.rates) == 1440
    assert curve.expected == pytest.approx(50 * 86400, rel=1e-12)
    assert curve.rates.max() / curve.rates.min() == pytest.approx(4, rel=1e-3)
    peak = curve.edges[int(np.argmax(curve.rates))] / 3600
    trough = curve.edges[int(np.argmin(curve.rates))] / 3600
    assert 13.9 < peak < 14.1 and (1.9 < trough < 2.1)


def test_diurnal_arrivals_per_hour_follow_the_curve():
    w = build({"synthetic": LENGTHS,
               "rate_curve": {"shape": "diurnal", "mean_rate": 0.5, "peak_to_trough": 4, "peak_hour": 9}})
    curve = parse_rate_curve({"shape": "diurnal", "mean_rate": 0.5, "peak_to_trough": 4, "peak_hour": 9},
                             Path("."), "rc")
    hours = np.arange(25) * 3600.0
    cum = curve.cumulative()[::60]  # 60 one-minute intervals an hour
    stat, bound = counts_fit(w.arrival_s, hours, np.diff(cum))
    assert stat < bound
    per_hour = np.histogram(w.arrival_s, bins=hours)[0]
    assert int(np.argmax(per_hour)) in (8, 9) and int(np.argmin(per_hour)) in (20, 21)


def test_weekends_run_at_their_factor():
    curve = parse_rate_curve({"shape": "diurnal", "mean_rate": 10, "weekend_factor": 0.5,
                              "duration_s": 7 * 86400, "interval_s": 3600}, Path("."), "rc")
    per_day = np.diff(curve.cumulative()[::24])
    assert per_day[:5] == pytest.approx([per_day[0]] * 5)
    assert per_day[5:] == pytest.approx([per_day[0] / 2] * 2)
    assert curve.expected == pytest.approx(10 * 7 * 86400)


def test_rate_scale_multiplies_the_curve_not_the_clock(tmp_path):
    write_csv(tmp_path, "t_s,rate\n0,2\n100,1\n")
    one = build({"synthetic": LENGTHS, "rate_curve": {"csv": "traffic.csv", "duration_s": 400}}, tmp_path)
    two = build({"synthetic": LENGTHS, "rate_curve": {"csv": "traffic.csv", "duration_s": 400},
                 "rate_scale": 3}, tmp_path)
    assert one.arrival_s.max() < 400 and two.arrival_s.max() < 400 and two.arrival_s.max() > 350
    assert len(two) / len(one) == pytest.approx(3, rel=0.15)


def test_a_trace_lends_its_rows_in_order_and_again_from_the_top(tmp_path):
    rows = [{"prompt": 10 + i, "output": 2, "arrival_s": float(i)} for i in range(20)]
    w = build({"requests": rows, "rate_curve": {"csv": "traffic.csv", "duration_s": 100}},
              write_csv(tmp_path, "t_s,rate\n0,1\n").parent)
    assert len(w) > 20
    assert list(w.prompt_tokens[:25]) == [10 + (i % 20) for i in range(25)]
    assert any("reused in file order" in n for n in w.notes)


def test_warp_keeps_the_traces_order_and_burstiness_and_follows_the_curve():
    # A trace of bursts: pairs 0.1 s apart, pairs 10 s apart.
    trace = np.sort(np.concatenate([np.arange(50) * 10.0, np.arange(50) * 10.0 + 0.1]))
    curve = RateCurve(np.array([0.0, 1000.0, 2000.0]), np.array([0.1, 0.3]), "two steps", "warp")
    times, rows = warp_arrivals(curve, trace)
    assert len(times) == 400 and np.all(np.diff(times) >= 0)
    assert list(rows[:100]) == list(range(100)) and list(rows[100:105]) == list(range(5))
    per_interval = np.histogram(times, bins=curve.edges)[0]
    assert abs(per_interval[0] - 100) <= 2 and abs(per_interval[1] - 300) <= 2
    gaps = np.diff(times[:100])
    assert gaps[0::2].max() < gaps[1::2].min() / 20  # the pairs stay pairs: its burstiness is kept


def test_warp_through_build_replays_a_traces_own_arrivals():
    rows = [{"prompt": 10, "output": 2, "arrival_s": t} for t in (0.0, 0.5, 1.0, 5.0)]
    w = build({"requests": rows, "rate_curve": {"shape": "diurnal", "mean_rate": 0.01, "duration_s": 3600,
                                                "arrivals": "warp"}})
    assert len(w) == 36 and w.arrival_s.max() < 3600


@pytest.mark.parametrize("text,where,cause", [
    ("time,rate\n0,1\n", ":1", "expected the header 't_s,rate'"),
    ("t_s,rate\n0,1\n0,2\n", ":3", "is not after the row before"),
    ("t_s,rate\n0,1\n10,-2\n", ":3", "rate must be >= 0"),
    ("t_s,rate\n0,1\n10,x\n", ":3", "rate: expected a number"),
    ("t_s,rate\n0,1\n10,1,3\n", ":3", "expected 2 fields"),
    ("t_s,rate\n0,0\n10,0\n", "rate_curve", "rates are all 0"),
    ("t_s,rate\n", "traffic.csv", "no rows after the header"),
])
def test_a_bad_csv_is_one_line_naming_file_and_line(tmp_path, text, where, cause):
    write_csv(tmp_path, text)
    message = error_of({"synthetic": LENGTHS, "rate_curve": {"csv": "traffic.csv"}}, tmp_path)
    assert where in message and cause in message and "\n" not in message


@pytest.mark.parametrize("curve,extra,field,cause", [
    ({"shape": "weekly", "mean_rate": 1}, {}, "rate_curve.shape", "unknown 'weekly'"),
    ({"shape": "diurnal"}, {}, "rate_curve.mean_rate", "missing"),
    ({"shape": "diurnal", "mean_rate": 1, "peak_hour": 25}, {}, "rate_curve.peak_hour", "0 to 24"),
    ({"shape": "diurnal", "mean_rate": 1, "peak_to_trough": 0.5}, {}, "rate_curve.peak_to_trough", ">= 1"),
    ({"shape": "diurnal", "mean_rate": 1, "csv": "x.csv"}, {}, "rate_curve", "exactly one of csv"),
    ({"shape": "diurnal", "mean_rate": 1, "arrivals": "warp"}, {}, "rate_curve.arrivals", "synthetic"),
    ({"shape": "diurnal", "mean_rate": 1, "arrivals": "even"}, {}, "rate_curve.arrivals", "unknown 'even'"),
    ({"shape": "diurnal", "mean_rate": 1}, {"num_requests": 5}, "synthetic.num_requests", "rate_curve"),
    ({"csv": "t.csv", "peak_hour": 3}, {}, "rate_curve.peak_hour", "only for shape: diurnal"),
])
def test_bad_curve_settings_name_their_field(curve, extra, field, cause):
    message = error_of({"synthetic": {**LENGTHS, **extra}, "rate_curve": curve})
    assert f"{W}.{field}" in message and cause in message


def test_a_one_row_csv_needs_its_end(tmp_path):
    write_csv(tmp_path, "t_s,rate\n0,1\n")
    message = error_of({"synthetic": LENGTHS, "rate_curve": {"csv": "traffic.csv"}}, tmp_path)
    assert "rate_curve.duration_s" in message and "one row" in message


def test_a_day_through_the_cli_and_its_error(tmp_path):
    write_csv(tmp_path, "t_s,rate\n0,0.2\n300,1\n600,0.2\n")
    scenario = tmp_path / "day.yaml"
    scenario.write_text(
        "name: day\nworkload:\n  synthetic: {prompt: {kind: constant, value: 200}, output: {kind: constant, value: 20}}\n"
        "  rate_curve: {csv: traffic.csv, duration_s: 900}\n"
        "model: llama-2-7b\nhardware: a100-80gb\npolicy: {kind: continuous}\nseed: 3\n", encoding="utf-8")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "simbatch", "run", str(scenario), "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    n = summary["num_requests"]
    assert abs(n - 420) < 4 * np.sqrt(420)  # 0.2 x 300 + 1 x 300 + 0.2 x 300 expected
    assert "rate curve: traffic.csv" in done.stdout + done.stderr
    # A bad row is one line, exit code 2, and no run folder.
    write_csv(tmp_path, "t_s,rate\n0,0.2\n300,fast\n")
    bad = tmp_path / "bad"
    done = subprocess.run([sys.executable, "-m", "simbatch", "run", str(scenario), "--out", str(bad)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "traffic.csv:3" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not bad.exists()
