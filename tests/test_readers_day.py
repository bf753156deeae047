"""Traces of days and weeks (issue 36 §1): Azure 2024's week-long CSVs and BurstGPT's, in the
layouts their READMEs document (the files here are made up in those layouts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simbatch.errors import SimbatchError
from simbatch.workload import build_workload, detect_format, read_azure, read_burstgpt

# Azure 2024 (AzureLLMInferenceDataset2024.md): the 2023 schema, timestamps with a UTC offset
# and six fractional digits, some with none.
AZURE_2024 = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2024-05-10 00:00:00.009930+00:00,374,44\n"
              "2024-05-10 00:00:00.160000+00:00,396,109\n"
              "2024-05-10 00:00:01+00:00,879,32\n"
              "2024-05-11 00:00:01.500000+00:00,10,3\n")
# BurstGPT (its README): integer-second timestamps, two models, and failed requests, whose
# Response tokens are 0 (with Request tokens 0 too, mostly).
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n"
            "45,ChatGPT,1087,0,1087,Conversation log\n"
            "118,GPT-4,417,86,503,Conversation log\n"
            "131,ChatGPT,0,0,0,API log\n"
            "210,ChatGPT,1360,273,1633,API log\n")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_an_azure_2024_week_file_reads_as_azure(tmp_path):
    path = write(tmp_path, "AzureLLMInferenceTrace_conv_1week.csv", AZURE_2024)
    assert detect_format(path) == "azure"
    w = read_azure(path)
    assert list(w.prompt_tokens) == [374, 396, 879, 10]
    assert w.arrival_s == pytest.approx([0.0, 0.15007, 0.99007, 86401.49007])


def test_burstgpt_drops_its_failed_requests_with_a_note(tmp_path):
    path = write(tmp_path, "BurstGPT_1.csv", BURSTGPT)
    assert detect_format(path) == "burstgpt"
    w = read_burstgpt(path)
    assert list(w.prompt_tokens) == [472, 417, 1360] and list(w.output_tokens) == [18, 86, 273]
    assert list(w.arrival_s) == [0.0, 113.0, 205.0]  # from the first kept request
    assert w.notes == [("BurstGPT_1.csv: 2 failed request(s) dropped (0 request or response tokens, "
                        "as BurstGPT marks failures)")]


def test_a_burstgpt_scenario_warped_onto_a_day(tmp_path):
    write(tmp_path, "BurstGPT_1.csv", BURSTGPT)
    w = build_workload({"trace": "BurstGPT_1.csv",
                        "rate_curve": {"shape": "diurnal", "mean_rate": 0.001, "arrivals": "warp"}},
                       base_dir=tmp_path, seed=0, where="s.yaml: workload")
    assert len(w) == 86 and np.all(np.diff(w.arrival_s) >= 0) and w.arrival_s.max() < 86400
    assert list(w.prompt_tokens[:4]) == [472, 417, 1360, 472]  # its rows, in order, again
    assert any("failed request" in n for n in w.notes) and any("rate curve" in n for n in w.notes)


def test_a_bad_burstgpt_row_names_file_line_and_column(tmp_path):
    path = write(tmp_path, "b.csv", BURSTGPT.replace("417,86", "417,eighty"))
    with pytest.raises(SimbatchError) as info:
        read_burstgpt(path)
    assert str(info.value).startswith(f"{path}:4: Response tokens: expected")


def test_a_burstgpt_file_of_failures_only_is_one_line(tmp_path):
    path = write(tmp_path, "b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                    "1,ChatGPT,0,0,0,API log\n")
    with pytest.raises(SimbatchError, match="every row is a failed request"):
        read_burstgpt(path)
