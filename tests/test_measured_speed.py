"""The logs' own step speed (simbatch.measured.speed): decode windows read from per-request
timestamps, and how each log compares with a step model fitted on the others."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simbatch import load_scenario, run
from simbatch.cli import main
from simbatch.measured import MeasuredRun, read_measured
from simbatch.measured.speed import FEATURES, decode_windows, relative_speed, speed_table

MEASURED = Path(__file__).resolve().parents[2] / "shared" / "measured" / "distserve-opt13b-a100"
COLUMNS = {"arrival": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens",
           "first_token": "first_token_s", "finish": "finish_s"}
SMALL = ["workload.synthetic.num_requests=200", "workload.synthetic.prompt.median=300",
         "workload.synthetic.output.median=60"]


def hand_run() -> MeasuredRun:
    """A decodes from 0 to 1 s (11 tokens); B from 0.5 to 1.5 s (6); C's one token comes at 0.2 s."""
    return MeasuredRun(source="hand.csv", system="", arrival_s=np.array([0.0, 0.1, 0.15]),
                       prompt_tokens=np.array([100, 50, 30]), output_tokens=np.array([11, 6, 1]),
                       first_token_s=np.array([0.0, 0.5, 0.2]), finish_s=np.array([1.0, 1.5, 0.2]))


def test_a_decode_window_counts_its_steps_neighbours_and_the_prompts_inside_it():
    w = decode_windows(hand_run())
    assert w.features.shape == (2, len(FEATURES)) and list(w.seconds) == [1.0, 1.0]
    steps, batch, kcontext, prompts, prompt_tokens = w.features[0]
    assert steps == 10
    assert batch == pytest.approx(10 * 1.5)  # A all the window, B half of it
    # A at its middle holds 100 + 0.5 x 11 tokens; B over its half at 0.75 s: 50 + 0.25 x 6.
    assert kcontext == pytest.approx(10 * (105.5 + 0.5 * 51.5) / 1e3)
    assert (prompts, prompt_tokens) == (2, 50 + 30)  # B's and C's first tokens fell inside A's window
    assert tuple(w.features[1][[0, 3, 4]]) == (5, 0, 0)  # nothing was prefilled inside B's


def test_first_tokens_of_one_prompt_step_count_once():
    r = hand_run()
    r.first_token_s[2] = 0.5 + 1e-4  # C now came out of B's prompt step
    r.finish_s[2] = r.first_token_s[2]
    assert decode_windows(r).features[0][3] == 1


def test_a_big_log_is_read_through_evenly_spaced_probes():
    """200,000 requests: MAX_PROBES windows, each from the requests near it (not the whole log)."""
    from simbatch.measured.speed import MAX_PROBES

    rng = np.random.default_rng(0)
    n = 200_000
    arrival = np.sort(rng.uniform(0, 2000, n))
    output = rng.integers(3, 300, n)
    first = arrival + 0.1
    run = MeasuredRun(source="big.csv", system="", arrival_s=arrival, prompt_tokens=rng.integers(10, 1000, n),
                      output_tokens=output, first_token_s=first, finish_s=first + 0.05 * output)
    w = decode_windows(run)
    assert len(w.seconds) == MAX_PROBES
    # 100 req/s, windows of 0.05 s a token: a probe decodes beside about 100 x 0.05 x mean output others.
    batch = w.features[:, 1].sum() / w.features[:, 0].sum()
    assert 0.5 * 100 * 0.05 * output.mean() < batch < 2 * 100 * 0.05 * output.mean()


def own_log(tmp_path: Path, rate: float, extra: list[str]) -> MeasuredRun:
    path = tmp_path / f"log-{rate}-{len(extra)}.csv"
    run(load_scenario("chat", SMALL + [f"workload.synthetic.arrival.rate={rate}"] + extra)).requests.to_csv(
        path, index=False)
    return read_measured(path, columns=COLUMNS)


def test_logs_of_one_server_agree_and_a_slower_gpu_stands_out(tmp_path):
    """Simulated logs at three loads agree within 2 %; a log simulated on a GPU streaming weights
    at 0.55 of its bandwidth instead of 0.66, at a load inside theirs, runs > 8 % slower."""
    same = [own_log(tmp_path, rate, []) for rate in (2, 6, 10)]
    assert max(abs(s) for s in relative_speed(same)) < 0.02
    slow = own_log(tmp_path, 6, ["cost_model.bw_eff=0.55"])
    speeds = relative_speed(same + [slow])
    assert speeds[-1] > 0.08
    table = speed_table(same + [slow])
    assert "extrapolated" in table.splitlines()[1] and "extrapolated" not in table.splitlines()[-1]


def test_speed_needs_two_logs():
    with pytest.raises(ValueError):
        relative_speed([hand_run()])


@pytest.mark.skipif(not MEASURED.is_dir(), reason="../shared/measured is absent (measured runs are not shipped)")
def test_the_vllm_logs_logged_later_ran_slower():
    """DistServe's vLLM logs: the two at 2 req/s were logged 1.5 h after the others (the file's
    monotonic clock) and their decode windows ran over 8 % longer than the other logs' steps
    predict, at loads inside the others'; the others agree within 10 %."""
    names = ["vllm-100-1", "vllm-150-1.5", "vllm-100-2", "vllm-200-2", "vllm-250-2.5", "vllm-300-3"]
    runs = [read_measured(MEASURED / f"{n}.exp") for n in names]
    speeds = dict(zip(names, relative_speed(runs)))
    later = {n for n, r in zip(names, runs) if r.clock_start_s - runs[0].clock_start_s > 3600}
    assert later == {"vllm-100-2", "vllm-200-2"}
    assert all(speeds[n] > 0.08 for n in later)
    assert all(abs(speeds[n]) < 0.10 for n in names if n not in later)


def test_calibrate_from_log_prints_the_speed_check(tmp_path, capsys):
    logs = [tmp_path / f"l{rate}.csv" for rate in (2, 6)]
    for rate, log in zip((2, 6), logs):
        run(load_scenario("chat", SMALL + [f"workload.synthetic.arrival.rate={rate}"])).requests.to_csv(
            log, index=False)
    code = main(["calibrate", "--from-log", str(logs[0]), "--check", str(logs[1]), "--scenario", "chat",
                 "--terms", "step_s", *sum((["--set", s] for s in SMALL), [])])
    assert code == 0
    out = capsys.readouterr().out
    assert "step speed of each log against the others" in out and "l2.csv" in out.split("step speed")[-1]


@pytest.mark.skipif(not MEASURED.is_dir(), reason="../shared/measured is absent (measured runs are not shipped)")
def test_validate_against_reports_the_speed_of_a_log_inside_the_others_load():
    """validate --against's entries: vllm-200-2 (logged 1.5 h later, batch 20 between the others'
    12 and 26) ran > 8 % slower; the two outside logs get None, not an extrapolation."""
    from simbatch.scenario.spec import load_scenario
    from simbatch.validation.against import validate_runs

    root = Path(__file__).resolve().parents[1]
    runs = [read_measured(MEASURED / f"{n}.exp") for n in ("vllm-150-1.5", "vllm-200-2", "vllm-250-2.5")]
    result = validate_runs(load_scenario(root / "scenarios" / "vllm_opt13b_a100.yaml"), runs)
    speeds = [v.errors["steps_vs_other_logs"] for v in result.logs]
    assert speeds[0] is None and speeds[2] is None and speeds[1] > 0.08
