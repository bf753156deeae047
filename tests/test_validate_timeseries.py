"""validate --against plots the engine's state over time where the bench logged it per second."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simbatch.cli import main
from simbatch.validation.timeseries import predicted_series

BENCH = (Path(__file__).resolve().parents[2] / "shared" / "measured" / "llmservingsim-vllm0.19" / "RTX4090"
         / "Llama-3.1-8B" / "vllm")


def test_the_predicted_series_takes_the_last_step_started_by_each_second():
    steps = pd.DataFrame({"start_s": [0.2, 0.9, 1.5, 2.5], "num_seqs": [1, 2, 3, 4],
                          "num_waiting": [5, 4, 3, 2], "kv_used_blocks": [10, 20, 30, 40]})
    s = predicted_series(steps, capacity_blocks=40, times=np.array([0.1, 1.0, 2.0, 3.0]))
    assert s["running"].tolist() == [0, 2, 3, 4]  # nothing before the first step
    assert s["waiting"].tolist() == [0, 4, 3, 2]
    assert s["kv_cache_pct"].tolist() == [0, 50, 75, 100]


@pytest.mark.skipif(not BENCH.is_dir(), reason="../shared/measured is absent (measured runs are not shipped)")
def test_validate_writes_the_series_of_the_rtx_4090_run(tmp_path, capsys):
    out = tmp_path / "v"
    code = main(["validate", "vllm019_llama8b_rtx4090", "--against", str(BENCH / "requests.jsonl"),
                 "--out", str(out)])
    assert code == 0
    table = pd.read_csv(out / "timeseries" / "requests.csv")
    assert len(table) == 184 and (out / "timeseries" / "requests.png").stat().st_size > 10_000
    # The pool binds on both sides: KV use near full through the middle of the run, and as many
    # requests running (the pool sets the concurrency) within a tenth (measured: 1.002).
    middle = table[(table.t > 20) & (table.t < 150)]
    assert middle["kv_cache_pct_measured"].median() > 95 and middle["kv_cache_pct_predicted"].median() > 95
    ratio = middle["running_predicted"].mean() / middle["running_measured"].mean()
    assert 0.9 < ratio < 1.1
