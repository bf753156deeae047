"""The bundled azure_code scenario (issue 15, item 9): the real Azure code trace, read from
../shared/traces (skipped where that folder is absent), as its header describes it."""

import re
from pathlib import Path

import numpy as np
import pytest

from simbatch.api import POLICY_ORDER, compare
from simbatch.files.bundled import resolve_scenario_path
from simbatch.scenario.spec import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "azure_code.yaml"
TRACE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_code.csv"
needs_trace = pytest.mark.skipif(not TRACE.is_file(), reason=f"{TRACE} not present: the real-trace tests need the "
                                                            "shared folder beside the repository")


def test_it_is_a_bundled_scenario_listed_in_the_readme():
    assert resolve_scenario_path("azure_code").resolve() == SCENARIO.resolve()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listing = readme[readme.index("`SCENARIO` is a YAML file or the name of a bundled one"):]
    assert "`azure_code`" in listing[:listing.index(").")]


@needs_trace
def test_the_whole_trace_as_the_header_says_and_nothing_clipped():
    sc = load_scenario(SCENARIO)
    w = sc.build_workload()
    prompt, output = np.asarray(w.prompt_tokens), np.asarray(w.output_tokens)
    header = SCENARIO.read_text(encoding="utf-8")
    numbers = re.search(r"([\d,]+) requests over (\d+) minutes.*?median ([\d,]+) tokens, up to ([\d,]+)\).*?"
                        r"outputs \(median (\d+)\)", header, re.S)
    n, minutes, prompt_median, prompt_max, output_median = (int(g.replace(",", "")) for g in numbers.groups())
    assert len(w) == n
    assert round((max(w.arrival_s) - min(w.arrival_s)) / 60) == minutes
    assert np.median(prompt) == prompt_median and prompt.max() == prompt_max and np.median(output) == output_median
    # the model's context window holds every request whole: no clipping, unlike azure_conv
    assert (prompt + output).max() <= sc.model.max_context and not w.notes


@needs_trace
def test_every_policy_serves_a_slice_and_chunked_prefill_bounds_the_stalls():
    sc = load_scenario(SCENARIO, ["workload.num_requests=300"])
    runs, table = compare(sc, jobs=1)
    assert list(table["policy"]) == list(POLICY_ORDER)
    assert all(out.summary["completed"] == 300 for out in runs.values())
    itl = dict(zip(table["policy"], table["itl_p99_ms"]))
    # prompts of thousands of tokens stall running decodes under prefill-first continuous batching
    assert itl["chunked_prefill"] < itl["continuous"] / 5
