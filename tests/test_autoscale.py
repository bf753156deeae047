"""cluster.autoscale (issue 36 §2-§3): the fleet's states, the controller's rules, the
provisioning delay, draining, GPU-hours and cost, and bad settings."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from simbatch import load_scenario, run
from simbatch.catalog.prices import GPU_HOUR_USD
from simbatch.errors import SimbatchError
from simbatch.metrics.fleet import replicas_table

LENGTHS = "prompt: {kind: constant, value: 400}, output: {kind: constant, value: 60}"


def scenario(tmp_path, autoscale: str, rate: float = 6.0, n: int = 2400, replicas: int = 1):
    path = tmp_path / "fleet.yaml"
    path.write_text(
        f"name: fleet\nworkload:\n  synthetic: {{num_requests: {n}, arrival: {{kind: poisson, rate: {rate}}}, {LENGTHS}}}\n"
        f"model: llama-2-7b\nhardware: a100-80gb\n"
        f"cluster: {{replicas: {replicas}, autoscale: {autoscale}}}\n"
        "policy: {kind: continuous, max_num_seqs: 64}\nslo: {ttft_ms: 1000}\nseed: 1\n", encoding="utf-8")
    return load_scenario(path)


def timeline(out) -> dict:
    return replicas_table(out.result.fleet)


def test_a_schedule_with_no_delay_is_followed_to_the_second_and_priced(tmp_path):
    out = run(scenario(tmp_path, "{metric: schedule, min: 1, max: 3, schedule: [[100, 3], [250, 2]], "
                                 "interval_s: 10, scale_down_cooldown_s: 0, engine_start_s: 0, "
                                 "storage_gb_per_s: 1.0e9}"))
    t = timeline(out)

    def ready_at(when):  # the last row at or within a microsecond after ``when`` (weights load in 1e-8 s)
        return int(t["ready"][np.searchsorted(t["t_s"], when + 1e-6, side="right") - 1])

    assert ready_at(0.0) == 1 and ready_at(99.0) == 1 and ready_at(100.0) == 3
    assert ready_at(250.0) == 2 or t["draining"][t["t_s"] >= 250][0] == 1  # one drains from 250 s
    a = out.summary["autoscale"]
    assert a["min"] == 1 and a["max"] == 3 and a["peak_ready"] == 3 and a["scale_ups"] == 1
    # GPU-hours: every replica not off, from the timeline; the cost at the GPU's price.
    end = out.summary["duration_s"]
    rows = list(zip(t["t_s"], t["ready"] + t["starting"] + t["draining"]))
    expected = sum(n * (min(nxt, end) - s) for (s, n), (nxt, _) in zip(rows, rows[1:] + [(end, 0)])) / 3600
    assert a["gpu_hours"] == pytest.approx(expected, rel=1e-12) and a["gpu_hours"] > end / 3600
    assert a["cost_usd"] == pytest.approx(a["gpu_hours"] * GPU_HOUR_USD["a100-80gb"])


def test_no_request_reaches_a_replica_before_it_is_ready(tmp_path):
    sc = scenario(tmp_path, "{metric: schedule, min: 1, max: 3, schedule: [[60, 3]], interval_s: 5, "
                            "engine_start_s: 45, storage_gb_per_s: 1.0e9}")
    out = run(sc)
    delay = out.summary["autoscale"]["provisioning_s"]
    assert delay == pytest.approx(45 + sc.model.weight_bytes / 1e18)
    req = out.requests
    for replica in (1, 2):
        first = req.arrival_s[req.replica == replica].min()
        assert first >= 60 + delay  # started at the tick at 60 s, ready one delay later
    assert (req.replica[req.arrival_s < 60 + delay] == 0).all()
    assert (req.replica == 1).any() and (req.replica == 2).any()


def test_a_draining_replica_takes_nothing_new_and_finishes_what_it_holds(tmp_path):
    out = run(scenario(tmp_path, "{metric: schedule, min: 1, max: 2, schedule: [[120, 1]], interval_s: 10, "
                                 "scale_down_cooldown_s: 0}", rate=12.0, replicas=2))
    req = out.requests
    assert req.completed.all()
    on_one = req[req.replica == 1]
    assert len(on_one) and (on_one.arrival_s < 120).all()  # routed there only before the drain
    t = timeline(out)
    assert t["draining"][t["t_s"] == 120.0][0] == 1  # it held requests when the drain began
    off = t["t_s"][(t["draining"] == 0) & (t["t_s"] >= 120)][0]  # when the drain ended
    assert off == pytest.approx(on_one.finish_s.max()) and off > 120  # off once its last request finished
    assert t["ready"][t["t_s"] >= 120].max() == 1


def test_the_controller_follows_its_load_within_min_max_and_its_windows(tmp_path):
    # Five minutes at 10 req/s, then ten at 1 req/s (a rate curve): up, then down.
    (tmp_path / "burst.csv").write_text("t_s,rate\n0,10\n300,1\n", encoding="utf-8")
    window = 120.0
    path = tmp_path / "burst.yaml"
    path.write_text(
        f"name: burst\nworkload:\n  synthetic: {{{LENGTHS}}}\n  rate_curve: {{csv: burst.csv, duration_s: 900}}\n"
        "model: llama-2-7b\nhardware: a100-80gb\n"
        f"cluster: {{replicas: 1, autoscale: {{metric: inflight, target: 8, min: 1, max: 4, interval_s: 15, "
        f"scale_down_cooldown_s: {window}, engine_start_s: 20}}}}\n"
        "policy: {kind: continuous, max_num_seqs: 64}\nseed: 2\n", encoding="utf-8")
    out = run(load_scenario(path))
    t = timeline(out)
    active = t["ready"] + t["starting"]
    assert active.min() >= 1 and (t["ready"] + t["starting"] + t["draining"]).max() <= 4
    a = out.summary["autoscale"]
    assert a["scale_ups"] >= 1 and a["scale_downs"] >= 1 and a["peak_ready"] >= 2
    times = t["t_s"]
    downs = times[np.r_[False, np.diff(active) < 0]]  # ready + starting falls only by a scale-down
    assert len(downs) and downs.min() > 300  # nothing shrinks while the burst lasts
    # The scale-down window: a count reached by a scale-up is never cut within the window.
    ups = np.r_[False, np.diff(active) > 0]
    for i in np.flatnonzero(np.r_[False, np.diff(active) < 0]):
        recent = ups & (times > times[i] - window) & (times < times[i])
        assert not recent.any() or active[i] >= active[recent].max()


def test_every_request_is_served_and_the_hourly_figures_add_up(tmp_path):
    out = run(scenario(tmp_path, "{metric: waiting, target: 4, min: 1, max: 3, interval_s: 10, "
                                 "engine_start_s: 10}", rate=9.0, n=1500))
    assert out.summary["completed"] == out.summary["num_requests"] == 1500
    hourly = out.summary["autoscale"]["hourly"]
    assert sum(h["requests"] for h in hourly) == 1500
    assert 1 <= hourly[0]["ready_mean"] <= 3 and 0 <= hourly[0]["slo_attainment"] <= 1


@pytest.mark.parametrize("autoscale,field,cause", [
    ("{metric: inflight, target: 8, min: 3, max: 2}", "autoscale.max", "must be >= min"),
    ("{metric: inflight, target: 8, min: 1, max: 2, engine_start_s: -1}", "autoscale.engine_start_s", ">= 0"),
    ("{metric: gpu_util, target: 8, min: 1, max: 2}", "autoscale.metric", "unknown metric 'gpu_util'"),
    ("{metric: kv_usage, target: 80, min: 1, max: 2}", "autoscale.target", "at most 1"),
    ("{metric: inflight, min: 1, max: 2}", "autoscale.target", "required"),
    ("{metric: schedule, min: 1, max: 2, schedule: [[0, 5]]}", "autoscale.schedule", "within min 1 and max 2"),
    ("{metric: inflight, target: 8, min: 0, max: 2}", "autoscale.min", "no scale to zero"),
    ("{metric: inflight, target: 8, min: 2, max: 3}", "cluster.replicas", "outside autoscale's min 2 and max 3"),
])
def test_bad_autoscale_settings_name_their_field(tmp_path, autoscale, field, cause):
    with pytest.raises(SimbatchError) as info:
        scenario(tmp_path, autoscale)
    assert f"cluster.{field}" in str(info.value) or field in str(info.value)
    assert cause in str(info.value)


def test_a_bad_setting_on_the_command_line_is_one_line(tmp_path):
    scenario(tmp_path, "{metric: inflight, target: 8, min: 1, max: 2}")  # writes fleet.yaml
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "simbatch", "run", str(tmp_path / "fleet.yaml"), "--out", str(out),
                           "--set", "cluster.autoscale.min=5"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2 and "autoscale.max" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()
