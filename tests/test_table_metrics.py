"""Request-table metrics shared by validate --against and the engine fit."""

from __future__ import annotations

import pandas as pd
import pytest

from simbatch.metrics.table_metrics import inflight_tokens


def table(rows):
    """Requests from (arrival_s, first_token_s, finish_s, prompt, output, completed)."""
    df = pd.DataFrame(rows, columns=["arrival_s", "first", "finish", "prompt_tokens", "output_tokens", "completed"])
    df["ttft_ms"] = (df["first"] - df["arrival_s"]) * 1e3
    df["e2el_ms"] = (df["finish"] - df["arrival_s"]) * 1e3
    return df


def test_inflight_tokens_follow_prompt_plus_generated_tokens():
    req = table([(0.0, 0.0, 10.0, 100, 11, True),   # holds 101 tokens at its first, 111 at its finish
                 (4.0, 5.0, 6.0, 50, 1, True),      # 51 tokens from 5 s to 6 s
                 (1.0, 2.0, 3.0, 10_000, 5, False)])  # never completed: not counted
    assert inflight_tokens(req, q=0, points=5001) == pytest.approx(101, abs=0.01)
    # The peak: just before 6 s, 101 + 6 tokens of the first request and 51 of the second.
    assert inflight_tokens(req, q=100, points=5001) == pytest.approx(158, abs=0.01)
    # Both hold tokens for 1 s of the 10: the 95th percentile lies in that second, the 85th outside.
    assert inflight_tokens(req, q=95, points=5001) > 155 > 111 > inflight_tokens(req, q=85, points=5001)
    assert inflight_tokens(table([(0.0, 0.0, 1.0, 5, 2, False)])) is None
