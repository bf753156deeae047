"""Hostile input through the CLI, in process: real scenarios and real trace rows, mutated.

Whatever the mutation (a field dropped or retyped, an extreme number, bytes garbled
or cut off), ``simbatch run`` must end with exit code 0, or with exit code 2, one
line on stderr and no output folder; never a traceback (an exception escaping
``main`` fails the test with it). Mutations are drawn by hypothesis, derandomised so
CI sees the same cases each time.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simbatch.cli import main
from simbatch.sweep import METRIC_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
# Values a careless or hostile user might put anywhere.
HOSTILE = [-1, 0, 0.5, -0.0, 1e308, -1e308, float("nan"), float("inf"), True, False, None, "", "x", "1e30",
           2**63, 10**30, [], [1, 2], {}, {"a": 1}, "../../etc", "\x00", "ü" * 3]
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def small_scenarios() -> dict[str, dict]:
    """Bundled scenarios small enough to run in a blink (chat cut to 40 requests)."""
    out = {name: yaml.safe_load((ROOT / "scenarios" / f"{name}.yaml").read_text())
           for name in ("classroom", "one_batch", "chat", "disaggregated")}
    out["chat"]["workload"]["synthetic"]["num_requests"] = 40
    dis = out["disaggregated"]["workload"]
    if "synthetic" in dis:
        dis["synthetic"]["num_requests"] = 40
    return out


SCENARIOS = small_scenarios()


def paths(node, prefix=()) -> list[tuple]:
    """Every key path of a mapping (list items by index)."""
    found = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        found.append((*prefix, key))
        found += paths(value, (*prefix, key))
    return found


def mutate(data: dict, path: tuple, action: str, value) -> dict:
    data = copy.deepcopy(data)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if action == "drop":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return data


def check_run(tmp_path: Path, capsys, text: str | bytes, name: str = "s.yaml") -> None:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    out = tmp_path / "out"
    code = main(["run", str(path), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert code in (0, 2), (code, err)
    if code == 2:
        assert err.startswith("simbatch: error: ") and "\n" not in err, err
        assert not out.exists()


@SETTINGS
@given(data=st.data())
def test_a_mutated_scenario_runs_or_is_one_line(tmp_path_factory, capsys, data):
    name = data.draw(st.sampled_from(sorted(SCENARIOS)), "scenario")
    scenario = SCENARIOS[name]
    path = data.draw(st.sampled_from(paths(scenario)), "path")
    action = data.draw(st.sampled_from(["drop", "set"]), "action")
    value = data.draw(st.sampled_from(HOSTILE), "value")
    mutated = mutate(scenario, path, action, value)
    check_run(tmp_path_factory.mktemp("s"), capsys, yaml.safe_dump(mutated, allow_unicode=True))


@SETTINGS
@given(data=st.data())
def test_garbled_scenario_text_is_one_line(tmp_path_factory, capsys, data):
    text = (ROOT / "scenarios" / "classroom.yaml").read_bytes()
    cut = data.draw(st.integers(0, len(text)), "cut")
    junk = data.draw(st.binary(max_size=8), "junk")
    at = data.draw(st.integers(0, cut), "at")
    check_run(tmp_path_factory.mktemp("g"), capsys, text[:at] + junk + text[at:cut])


@pytest.mark.skipif(not (TRACES / "AzureLLMInferenceTrace_conv.csv").is_file(),
                    reason="needs ../shared/traces beside the repository")
@SETTINGS
@given(data=st.data())
def test_mutated_real_trace_rows_run_or_are_one_line(tmp_path_factory, capsys, data):
    """The first rows of the real Azure conversation trace, with one field retyped, a row
    cut short, bytes garbled, or the header changed."""
    lines = (TRACES / "AzureLLMInferenceTrace_conv.csv").read_text().splitlines()[:30]
    row = data.draw(st.integers(0, len(lines) - 1), "row")
    action = data.draw(st.sampled_from(["field", "cut", "junk", "blank"]), "action")
    fields = lines[row].split(",")
    if action == "field":
        col = data.draw(st.integers(0, len(fields) - 1), "column")
        fields[col] = str(data.draw(st.sampled_from(HOSTILE), "value"))
        lines[row] = ",".join(fields)
    elif action == "cut":
        lines[row] = lines[row][: data.draw(st.integers(0, len(lines[row])), "cut")]
    elif action == "blank":
        lines = lines[:row]
    folder = tmp_path_factory.mktemp("t")
    text = ("\n".join(lines) + "\n").encode()
    if action == "junk":
        text = text[:row * 10] + data.draw(st.binary(min_size=1, max_size=6), "junk") + text[row * 10:]
    (folder / "t.csv").write_bytes(text)
    scenario = {**SCENARIOS["classroom"], "workload": {"trace": "t.csv", "max_total_tokens": 4096}}
    check_run(folder, capsys, yaml.safe_dump(scenario))


# Names that become paths (issue 33): a variant's name is its run folder's name under `compare --out`.
# "/ABS" stands for an absolute folder inside the test's own folder, so that an escape is seen.
PATH_NAMES = {"absolute": "/ABS/x", "parent": "../y", "nested": "a/b", "dotdot": "..", "dot": ".",
              "hidden": ".hidden", "backslash": "a\\b", "tab": "tab\there", "nul": "nul\x00", "long": "x" * 81,
              "the table": "comparison.csv", "the report's files": "report_files", "empty": "", "blank": " "}


def tree(folder: Path) -> list[str]:
    """Everything under ``folder``, as sorted relative paths."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("name", list(PATH_NAMES.values()), ids=list(PATH_NAMES))
def test_a_variant_name_that_is_no_plain_name_fails_before_anything_is_written(tmp_path, capsys, monkeypatch, name):
    """``variants: {"/abs/x": ..., "../y": ...}`` then ``compare --out sub/out`` exited 0 and wrote
    run folders at /abs/x and sub/y; ``a/b`` nested folders that ``report`` then left out."""
    import simbatch.runs.one as runs

    monkeypatch.setattr(runs, "simulate", lambda *a, **k: pytest.fail("simulated before checking the names"))
    monkeypatch.chdir(tmp_path)
    name = name.replace("/ABS", str(tmp_path / "abs"))
    data = {**SCENARIOS["classroom"], "variants": {"fine": {"seed": 1}, name: {"seed": 2}}}
    Path("e.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    assert main(["compare", "e.yaml", "--out", "sub/out", "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simbatch: error: e.yaml:") and ": variants: " in err[0], err
    assert tree(tmp_path) == ["e.yaml"]


def test_plain_variant_names_each_get_their_folder_and_their_report_row(tmp_path, capsys):
    """Digits, inner dots, ``+`` and non-ASCII letters make plain names: one folder each, directly
    under --out, and one row each in the report."""
    names = ("64", "v1.2+x", "größer")
    data = {**SCENARIOS["classroom"], "variants": {name: {"seed": i} for i, name in enumerate(names)}}
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["compare", str(tmp_path / "e.yaml"), "--out", str(out), "--jobs", "1", "--report"]) == 0
    assert sorted(p.name for p in out.iterdir() if (p / "summary.json").is_file()) == sorted(names)
    report = (out / "report.md").read_text(encoding="utf-8")
    assert all(f"| {name} " in report for name in names), report
    assert all(p == "e.yaml" or p.startswith("out") for p in tree(tmp_path))


def test_a_number_as_a_variant_name_says_to_quote_it(tmp_path, capsys):
    """``64:`` is a YAML number (compare then failed on it with a TypeError)."""
    data = {**SCENARIOS["classroom"], "variants": {64: {"seed": 1}}}
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(data))
    assert main(["compare", str(tmp_path / "e.yaml"), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("variants: variant name 64 is a number; quote it to make it a name: '64'")
    assert not (tmp_path / "out").exists()


# --- Tracebacks and silent nonsense (issue 33 §2) ----------------------------------------------------
# Each case: exit code 2, one stderr line naming the scenario file (and the config.json, if one) and
# the field, and no output folder; before, a traceback, a hang or a run that exited 0 with nonsense.

HF_CONFIGS = ROOT / "simbatch" / "catalog" / "hf_configs"


def one_line_error(tmp_path: Path, capsys, scenario: str, *settings: str) -> str:
    """``simbatch run SCENARIO --set S ...`` into ``tmp_path/out``: exit code 2, one line on
    stderr, nothing written; that line."""
    out = tmp_path / "out"
    code = main(["run", scenario, *[a for s in settings for a in ("--set", s)], "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("simbatch: error: "), (code, err)
    assert not out.exists()
    return err[0]


def config_file(tmp_path: Path, text: str | None = None, **changes) -> Path:
    """The shipped Mixtral-8x7B config.json with ``changes`` (None drops a key), or ``text``."""
    config = json.loads((HF_CONFIGS / "mixtral-8x7b.json").read_text())
    config.update(changes)
    path = tmp_path / "c.json"
    path.write_text(text if text is not None else json.dumps({k: v for k, v in config.items() if v is not None}))
    return path


# Types: a list or a mapping where a name goes (``value in {...}``: TypeError: unhashable type).
@pytest.mark.parametrize("setting, field", [
    ("quantization={weights: [fp8]}", "quantization.weights"),
    ("quantization={kv_cache: {a: 1}}", "quantization.kv_cache"),
    ("engine={preset: [vllm-0.8]}", "engine.preset"),
], ids=["weights", "kv_cache", "engine preset"])
def test_a_list_or_mapping_where_a_name_goes_is_one_line(tmp_path, capsys, setting, field):
    err = one_line_error(tmp_path, capsys, "classroom", setting)
    assert f"classroom.yaml: {field} (from --set " in err, err


@pytest.mark.parametrize("changes, field", [
    ({"torch_dtype": ["bfloat16"]}, "torch_dtype"),
    ({"torch_dtype": {"a": 1}}, "torch_dtype"),
    ({"architectures": None, "model_type": ["mixtral"]}, "model_type"),
    ({"architectures": None, "model_type": {}}, "model_type"),
    ({"quantization_config": {"quant_method": "gptq", "bits": [4]}}, "quantization_config.bits"),
    ({"quantization_config": {"quant_method": "awq", "bits": {"a": 4}}}, "quantization_config.bits"),
], ids=["dtype list", "dtype mapping", "model_type list", "model_type mapping", "bits list", "bits mapping"])
def test_a_config_json_with_a_list_or_mapping_where_a_name_goes_is_one_line(tmp_path, capsys, changes, field):
    path = config_file(tmp_path, **changes)
    err = one_line_error(tmp_path, capsys, "classroom", f"model={{config: {path}}}")
    assert f"classroom.yaml: model.config.{field} (from --set model): " in err and f"(in {path})" in err, err


# Depth and size in config.json: the parser's recursion limit (100,000 nested arrays in an ignored
# field: RecursionError) and integer size limit (more than 4,300 digits: ValueError), and a field
# no model comes near (vocab_size 10**400: OverflowError in the roofline).
@pytest.mark.parametrize("junk, cause", [
    ("[" * 100_000 + "]" * 100_000, "nests arrays or objects too deeply to read"),
    ("1" * 5000, "holds a number too long to read"),
], ids=["deep", "digits"])
def test_a_config_json_the_parser_refuses_is_one_line_naming_it(tmp_path, capsys, junk, cause):
    text = (HF_CONFIGS / "mixtral-8x7b.json").read_text().rstrip().removesuffix("}") + f', "junk": {junk}}}'
    path = config_file(tmp_path, text)
    err = one_line_error(tmp_path, capsys, "classroom", f"model={{config: {path}}}")
    assert f"classroom.yaml: model.config (from --set model): {path} {cause}" in err, err


@pytest.mark.parametrize("source", ["config", "mapping"])
def test_a_model_size_no_real_model_comes_near_is_one_line(tmp_path, capsys, source):
    if source == "config":
        path = config_file(tmp_path, vocab_size=10**400)
        err = one_line_error(tmp_path, capsys, "classroom", f"model={{config: {path}}}")
        assert "model.config.vocab_size (from --set model): " in err and f"(in {path})" in err, err
    else:
        err = one_line_error(tmp_path, capsys, "classroom", f"model={{base: llama-2-7b, vocab_size: {10**400}}}")
        assert "model.vocab_size (from --set model): " in err, err
    assert "must be at most 1,000,000,000 (no real model comes near)" in err


# Figures that make a step infinite or lose all precision: every figure that reaches a step's
# seconds is bounded at load so that simulated time stays within its horizon (simbatch.core.horizon).
FIGURES = {
    "peak_flops 1e-300": ("classroom", "hardware={base: a100-80gb, peak_flops: 1e-300}", "hardware.peak_flops"),
    "hbm_bandwidth 10**400": ("classroom", f"hardware={{base: a100-80gb, hbm_bandwidth: {10**400}}}",
                              "hardware.hbm_bandwidth"),
    "link_latency_s 1e300": ("classroom", "hardware={base: a100-80gb, link_latency_s: 1e300}",
                             "hardware.link_latency_s"),
    "memory_bytes 1e308": ("classroom", "hardware={base: a100-80gb, memory_bytes: 1e308}", "hardware.memory_bytes"),
    "request_s 1e300": ("classroom", "engine={request_s: 1e300}", "engine.request_s"),
    "step_s 1e300": ("classroom", "engine={step_s: 1e300}", "engine.step_s"),
    "per_token_s 10**400": ("classroom", f"engine={{per_token_s: {10**400}}}", "engine.per_token_s"),
    "non_torch_gib 1e300": ("classroom", "engine={non_torch_gib: 1e300}", "engine.non_torch_gib"),
    "routing_skew 1e5": ("moe_chat", "model={base: mixtral-8x7b, routing_skew: 1e5}", "model.routing_skew"),
    "micro_batches 1e6": ("classroom", "cluster={pipeline_parallel: 2, micro_batches: 1000000}",
                          "cluster.micro_batches"),
    "a pool's micro_batches 1e6": ("disaggregated", "disaggregation.decode.micro_batches=1000000",
                                   "disaggregation.decode.micro_batches"),
}


@pytest.mark.parametrize("scenario, setting, field", list(FIGURES.values()), ids=list(FIGURES))
def test_a_figure_that_would_break_a_steps_seconds_is_one_line(tmp_path, capsys, scenario, setting, field):
    small = [] if scenario == "classroom" else ["workload.synthetic.num_requests=40"]
    err = one_line_error(tmp_path, capsys, scenario, *small, setting)
    assert f"{scenario}.yaml: {field} (from --set " in err, err


@pytest.mark.parametrize("scenario, setting", [
    ("classroom", "hardware={base: a10g, peak_flops: 7.0e10, hbm_bandwidth: 3.0e8}"),  # the slowest / 1000
    ("classroom", "hardware={base: mi325x, memory_bytes: 2.0e14, link_latency_s: 0.03}"),
    ("classroom", "engine={step_s: 1000, per_seq_s: 1000, per_token_s: 1000, request_s: 1000}"),
    ("moe_chat", "model={base: mixtral-8x7b, routing_skew: 100}"),
    ("classroom", "cluster={pipeline_parallel: 2, micro_batches: 1024, replicas: 10000}"),
], ids=["slow GPU", "large GPU", "slow engine", "skewed routing", "large cluster"])
def test_figures_at_the_bounds_still_load(scenario, setting):
    from simbatch.scenario.spec import load_scenario

    load_scenario(scenario, [setting])


# Hangs: a size checked before the work it sizes.
def test_more_redundant_experts_than_gpus_can_hold_fail_before_placement(tmp_path, capsys, monkeypatch):
    """``expert_parallel, eplb, redundant_experts=1000000000`` on moe_chat: nothing after 60 s
    (EPLB's placement deals a billion copies one by one)."""
    import simbatch.costmodel.routing as routing

    monkeypatch.setattr(routing, "eplb_placement", lambda *a: pytest.fail("placed experts before checking them"))
    err = one_line_error(tmp_path, capsys, "moe_chat", "workload.synthetic.num_requests=40",
                         "cluster.expert_parallel=true", "cluster.eplb=true", "cluster.redundant_experts=1000000000")
    assert err.endswith("moe_chat.yaml: cluster.redundant_experts (from --set cluster.redundant_experts): must be "
                        "at most 8 for mixtral-8x7b's 8 experts over 2 GPUs (a copy of every expert on every GPU: "
                        "8 x (2 - 1)), got 1,000,000,000"), err


@pytest.mark.parametrize("scenario, setting, field", [
    ("classroom", "cluster.replicas=1000000", "cluster.replicas"),
    ("classroom", "cluster.replicas=[{count: 1000000}]", "cluster.replicas[0].count"),
    ("disaggregated", "disaggregation.prefill.replicas=1000000", "disaggregation.prefill.replicas"),
], ids=["replicas", "a group's count", "a pool's replicas"])
def test_a_million_replicas_fail_before_they_are_built(tmp_path, capsys, monkeypatch, scenario, setting, field):
    """A million replicas took minutes and gigabytes building their engines, with nothing simulated."""
    import simbatch.runs.one as runs

    monkeypatch.setattr(runs, "simulate", lambda *a, **k: pytest.fail("simulated before checking the size"))
    err = one_line_error(tmp_path, capsys, scenario, setting)
    assert f"{scenario}.yaml: {field} (from --set " in err and "must be at most 10,000" in err, err


# --- Docs vs code (issue 33) -------------------------------------------------------------------------

def speculative_scenario(draft_model) -> dict:
    """The classroom scenario under continuous batching with a draft-model proposer."""
    data = copy.deepcopy(SCENARIOS["classroom"])
    data["policy"] = {"kind": "continuous"}
    data.pop("policies", None)
    data["speculative"] = {"method": "draft_model", "acceptance_rate": 0.7, "draft_model": draft_model}
    return data


def test_a_draft_model_given_as_a_mapping_runs_as_the_docs_promise(tmp_path, capsys):
    """docs/scenarios.md: ``draft_model``, "a preset or model mapping"; a mapping was refused
    ("expected a string"), as the section's type took only the first of ``str | dict``."""
    from simbatch.scenario.spec import load_scenario

    target = load_scenario("classroom").data["model"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(speculative_scenario({"base": target, "name": "my-draft"})))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["speculative"]["drafter"] == "my-draft"


@pytest.mark.parametrize("value", [[1], 3, True])
def test_a_draft_model_neither_a_name_nor_a_mapping_says_what_it_may_be(tmp_path, capsys, value):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(speculative_scenario(value)))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"speculative.draft_model: expected a string or a mapping, got {value!r}"), err
    assert not (tmp_path / "out").exists()


def test_report_md_shows_a_model_name_as_text_never_as_html(tmp_path, capsys):
    """A model called ``<script>alert(1)</script>``: report.html escaped it, report.md wrote it
    raw, so a Markdown viewer would run it. Backticked code keeps its own marks."""
    data = {**SCENARIOS["classroom"], "model": {"base": "llama-2-7b", "name": "<script>alert(1)</script>"}}
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert main(["compare", str(tmp_path / "e.yaml"), "--out", str(out), "--jobs", "1", "--report"]) == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "\\<script>alert(1)\\</script>" in md
    assert not re.search(r"(?<!\\)<(script|/script)", md), md
    assert "<script>" not in (out / "report.html").read_text(encoding="utf-8")
    from simbatch.report.markdown import text

    assert text("`<dir>` then <b> and <= 5") == "`<dir>` then \\<b> and <= 5"
    assert text("`<b>``") == "`\\<b>``"  # no code span: a lone backtick before a run of two


# --- The Python API follows the CLI's rules (issue 33) ----------------------------------------------

@pytest.fixture(scope="module")
def classroom():
    from simbatch.scenario.spec import load_scenario

    return load_scenario("classroom")


@pytest.mark.parametrize("options, where, cause", [
    ({"policies": []}, "policies", "is empty; give at least one name, or leave it out (None) for the default"),
    ({"variants": []}, "variants", "is empty; give at least one name, or leave it out (None) for the default"),
    ({"routers": ()}, "routers", "is empty; give at least one name, or leave it out (None) for the default"),
    ({"policies": "static"}, "policies", "expected a list of names, got the string 'static'; for one, give ['static']"),
    ({"policies": ["static", 3]}, "policies", "expected a list of names (strings), got ['static', 3]"),
    ({"jobs": 0}, "jobs", "must be >= 1, a whole number of workers (left out: one per core), got 0"),
    ({"jobs": True}, "jobs", "must be >= 1, a whole number of workers (left out: one per core), got True"),
    ({"layouts": ["x"]}, "layouts", "unknown layout 'x'; allowed: colocated, disaggregated"),
    ({"variants": ["nope"]}, "variants", "no variant 'nope' in the scenario; defined: none"),
], ids=["no policies", "no variants", "no routers", "a string", "a number", "jobs 0", "jobs True", "layout",
        "variant"])
def test_compare_options_follow_the_cli_rules(classroom, monkeypatch, options, where, cause):
    """``compare(s, policies=[])`` and ``variants=[]`` ran everything, ``jobs=0`` meant all cores and
    ``policies='static'`` ran policies 's', 't', ...: each is the error the CLI gives, before any run."""
    import simbatch.api as api
    from simbatch.errors import SimbatchError

    monkeypatch.setattr(api, "run_variant", lambda *a: pytest.fail("ran before checking the options"))
    with pytest.raises(SimbatchError) as info:
        api.compare(classroom, **{"jobs": 1, **options})
    assert (info.value.where, info.value.cause) == (where, cause)


def test_the_cli_gives_the_same_errors_under_its_own_flags(capsys):
    assert main(["compare", "classroom", "--jobs", "0"]) == 2
    assert capsys.readouterr().err.strip() == ("simbatch: error: --jobs: must be >= 1, a whole number of workers "
                                               "(left out: one per core), got 0")
    assert main(["compare", "classroom", "--policies", ","]) == 2
    assert "--policies: is empty" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["classroom", Path("scenarios/classroom.yaml"), None, {"name": "x"}],
                         ids=["a name", "a path", "None", "a mapping"])
def test_run_takes_a_scenario_and_says_how_to_make_one(value):
    """``run('classroom')`` died with ``AttributeError: 'str' object has no attribute ...``."""
    from simbatch import compare, run
    from simbatch.errors import SimbatchError

    for call in (run, compare):
        with pytest.raises(SimbatchError) as info:
            call(value)
        assert info.value.where == "scenario" and info.value.cause.startswith("expected a Scenario, got ")
    if isinstance(value, (str, Path)):
        assert info.value.cause.endswith(f"load it first: load_scenario({str(value)!r})")


# --- Faults: a full disk, Ctrl-C, SIGTERM, a corrupted sweep run file (issue 33) --------------------

TINY_LOG = [{"prompt_len": 50 + i, "output_len": 4, "issue_time": 10.0 + i * 0.5, "first_token_time": 10.1 + i * 0.5,
             "complete_time": 10.4 + i * 0.5, "ttft_ms": 100.0, "tpot_ms": 100.0, "latency_ms": 400.0}
            for i in range(12)]


def write_exp(path: Path, rows: list[dict]) -> Path:
    """A DistServe ``.exp`` log of ``rows``."""
    path.write_text(repr(rows) + "\n")
    return path


@pytest.fixture
def full_disk(monkeypatch):
    """A function that makes every file write from then on fail as on a full disk: the tables'
    writers, ``Path.write_text`` and ``write_bytes``, pandas' ``to_csv`` (a monkeypatched writer,
    not a real full disk, which a test cannot make)."""
    import errno

    import pandas as pd

    import simbatch.report.outputs as outputs

    def enospc(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    def fill():
        for owner, name in ((outputs, "_write_csv"), (outputs, "_write_parquet"), (Path, "write_text"),
                            (Path, "write_bytes")):
            monkeypatch.setattr(owner, name, enospc)
        monkeypatch.setattr(pd.DataFrame, "to_csv", lambda self, path=None, *a, **k: enospc(path))

    return fill


def hidden(folder: Path) -> list[str]:
    """Temporary files and folders left anywhere under ``folder``."""
    return [p for p in tree(folder) if ".tmp" in p or ".old-" in p]


FULL_DISK = {
    "run": ["run", "classroom", "--out", "OUT"],
    "compare": ["compare", "classroom", "--jobs", "1", "--out", "OUT"],
    "sweep": ["sweep", "classroom", "--grid", "seed=0,1", "--executor", "inline", "--out", "OUT"],
    "capacity": ["capacity", "TINY", "--slo", "ttft_p99_ms=500", "--policies", "continuous", "--seeds", "0",
                 "--tolerance", "0.5", "--target-rate", "4", "--executor", "inline", "--out", "OUT"],
    "trace-out": ["run", "classroom", "--trace-out", "OUT.json"],
    "validate": ["validate", "vllm_opt13b_a100", "--against", "LOG", "--out", "OUT"],
}


@pytest.mark.parametrize("argv", list(FULL_DISK.values()), ids=list(FULL_DISK))
def test_a_full_disk_is_one_line_and_leaves_no_temporary_files(tmp_path, capsys, full_disk, argv):
    """``No space left on device`` was a traceback from every command that writes."""
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIOS["chat"]))
    log = write_exp(tmp_path / "log.exp", TINY_LOG)
    full_disk()
    out = tmp_path / "out"
    argv = [{"OUT": str(out), "OUT.json": str(out) + ".json", "LOG": str(log), "TINY": str(scenario)}.get(a, a)
            for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[-1].startswith(f"simbatch: error: {out}"), err
    assert "(No space left on device); nothing was written, what was there is as it was" in err[-1], err
    assert hidden(tmp_path) == [], tree(tmp_path)
    if argv[0] in ("run", "compare", "validate", "capacity"):
        assert not out.exists()


def test_a_full_disk_inside_a_compare_names_the_run_it_was_writing(tmp_path, capsys, monkeypatch):
    import errno

    import simbatch.report.outputs as outputs

    def enospc(path, table):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(outputs, "_write_csv", enospc)
    out = tmp_path / "out"
    assert main(["compare", "classroom", "--jobs", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (f"simbatch: error: {out}: cannot write static/requests.csv (No space "
                                               "left on device); nothing was written, what was there is as it was")
    assert tree(tmp_path) == []


def sleep_then(value, seconds: float = 1.5):
    """A pool job that takes a while (module level, so a worker can run it)."""
    import time

    time.sleep(seconds)
    return value


def test_pool_workers_ignore_ctrl_c_and_leave_it_to_their_parent():
    """Ctrl-C reaches the whole process group: each worker printed its own KeyboardInterrupt
    traceback (about 4 compares in 10). A worker must ignore SIGINT; its job goes on."""
    import os
    import signal
    import time

    from simbatch.runs.executors import ProcessExecutor

    executor = ProcessExecutor(2)
    try:
        futures = [executor.submit(sleep_then, i) for i in range(2)]
        deadline = time.monotonic() + 30
        while len(executor.pool._processes) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # inside their jobs
        for pid in list(executor.pool._processes):
            os.kill(pid, signal.SIGINT)
        try:
            assert [f.result(timeout=30) for f in futures] == [0, 1]
        except KeyboardInterrupt:  # the worker's, sent back as its job's error (pytest would stop)
            pytest.fail("a pool worker took Ctrl-C as its own and dropped its job")
    finally:
        executor.close()


def worker_count(pid: int) -> int:
    """How many child processes ``pid`` has (Linux)."""
    try:
        return len(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    except OSError:
        return 0


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts a process's children in /proc")
@pytest.mark.parametrize("signame, code, line", [("SIGINT", 130, "simbatch: interrupted"),
                                                 ("SIGTERM", 143, "simbatch: terminated")])
def test_ctrl_c_or_sigterm_on_compare_jobs_2_is_one_line(tmp_path, signame, code, line):
    """``compare --jobs 2`` stopped by Ctrl-C (SIGINT to the process group) or SIGTERM (to the
    command): one line, its exit code, every worker gone, no temporary folder. SIGTERM exited 143
    silently, by the default action, with no cleanup."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "simbatch", "compare", "chat", "--jobs", "2", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while worker_count(proc.pid) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)
    sig = getattr(signal, signame)
    os.killpg(proc.pid, sig) if sig == signal.SIGINT else os.kill(proc.pid, sig)
    err = proc.communicate(timeout=60)[1]
    # Notes of the policies that finished before the signal may come first (a fast machine
    # finishes some); the interrupt itself is the last line, and nothing is a traceback.
    assert proc.returncode == code and err.splitlines()[-1] == line and "Traceback" not in err, err[-2000:]
    assert tree(tmp_path) == []


def test_sigterm_while_writing_removes_the_temporary_folder(tmp_path, capsys, monkeypatch):
    """SIGTERM in the middle of writing an output folder left its hidden ``.out.tmp-...`` sibling."""
    import os
    import signal

    import simbatch.report.outputs as outputs

    write = outputs._write_csv

    def write_then_terminate(path, table):
        write(path, table)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(outputs, "_write_csv", write_then_terminate)
    # Without simbatch's handler the default would end pytest itself: this one fails the test instead.
    previous = signal.signal(signal.SIGTERM, lambda *a: pytest.fail("SIGTERM not handled by simbatch"))
    try:
        assert main(["run", "classroom", "--out", str(tmp_path / "out")]) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert capsys.readouterr().err.strip().splitlines()[-1] == "simbatch: terminated"
    assert tree(tmp_path) == []


def corrupt(record: dict, how: str):
    """A sweep run file spoilt ``how``."""
    if how == "a list":
        return []
    if how == "a string metric":
        return {**record, "metrics": {**record["metrics"], "ttft_ms.p99": "fast"}}
    if how == "empty metrics":
        return {**record, "metrics": {}}
    return {k: v for k, v in record.items() if k != "wall_s"}


@pytest.mark.parametrize("how, why", [
    ("a list", "expected a JSON object, got list"),
    ("a string metric", "'ttft_ms.p99': expected a number, got 'fast'"),
    ("empty metrics", f"'metrics' lacks {len(METRIC_COLUMNS)} of {len(METRIC_COLUMNS)} metrics (num_requests, ...)"),
    ("no wall time", "'wall_s': expected a number, got None"),
])
def test_a_corrupted_sweep_run_file_is_run_again_with_a_note(tmp_path, capsys, how, why):
    """``[]`` in a run file was a TypeError traceback on resume; a string where a number goes, or
    empty metrics, was taken as done (the table then held the string, or NaN)."""
    import pandas as pd

    out = tmp_path / "sw"
    argv = ["sweep", "classroom", "--grid", "seed=0,1", "--executor", "inline", "--out", str(out)]
    assert main(argv) == 0
    first = pd.read_csv(out / "sweep.csv")
    path = sorted((out / "runs").glob("*.json"))[0]
    path.write_text(json.dumps(corrupt(json.loads(path.read_text()), how)))
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert f"note: {path}: {why}; running it again" in captured.err.splitlines(), captured.err
    assert "2 runs (1 run now, 1 reused)" in captured.out
    again = pd.read_csv(out / "sweep.csv")
    pd.testing.assert_frame_equal(first.drop(columns="wall_s"), again.drop(columns="wall_s"))


# --- Measured logs: validate --against and calibrate --from-log (issue 33) -------------------------

def exp_rows(n: int = 12, **changes) -> list[dict]:
    """``n`` requests of a DistServe log, every row with ``changes``."""
    return [{**row, **changes} for row in (TINY_LOG * (n // len(TINY_LOG) + 1))[:n]]


def failed_vllm_log(path: Path, n: int = 10) -> Path:
    """A vLLM ``--save-result`` JSON where every request failed."""
    path.write_text(json.dumps({"input_lens": [50] * n, "output_lens": [0] * n, "ttfts": [0.0] * n,
                                "itls": [[]] * n, "errors": ["boom"] * n, "request_rate": "inf"}))
    return path


def one_line(capsys, argv: list[str]) -> str:
    """``main(argv)``: exit code 2 and one line on stderr; that line."""
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("simbatch: error: "), (code, err)
    return err[0]


@pytest.mark.parametrize("role", ["--from-log", "--check"])
def test_calibrate_on_a_log_of_failures_only_is_one_line(tmp_path, capsys, monkeypatch, role):
    """Every request failed: ``TypeError: unsupported operand type(s) for /`` in fit_engine's loss."""
    import simbatch.measured.fit_engine as fit

    monkeypatch.setattr(fit, "_search", lambda *a: pytest.fail("fitted before checking the logs"))
    log = failed_vllm_log(tmp_path / "failed.json")
    good = write_exp(tmp_path / "good.exp", TINY_LOG)
    logs = ["--from-log", str(log)] if role == "--from-log" else ["--from-log", str(good), "--check", str(log)]
    err = one_line(capsys, ["calibrate", *logs, "--scenario", "vllm_opt13b_a100"])
    purpose = "fit on" if role == "--from-log" else "check the fit on"
    assert err == (f"simbatch: error: {log}: no request completed (all 10 failed, as the log records them): "
                   f"no latency to {purpose}")


def test_calibrate_on_one_token_outputs_fits_on_ttft_and_says_so(tmp_path, capsys):
    """Every output one token long: no TPOT, so a TypeError (None / None) in the loss; now the fit
    leaves TPOT out for that log, with a note, and the table shows '-' for it."""
    log = write_exp(tmp_path / "one.exp", exp_rows(12, output_len=1, tpot_ms=0.0))
    assert main(["calibrate", "--from-log", str(log), "--scenario", "vllm_opt13b_a100", "--terms", "step_s"]) == 0
    captured = capsys.readouterr()
    assert (f"note: {log}: no tpot_p50, tpot_p90: every completed output is one token long, and TPOT needs two "
            "or more; fitted on the log's other figures") in captured.err
    row = next(line for line in captured.out.splitlines() if line.startswith("one.exp"))
    assert "- / -" in row and "Traceback" not in captured.err


def test_validate_against_a_log_of_failures_only_says_why(tmp_path, capsys):
    """It exited 0 with every error None, and a matplotlib warning on stderr for the empty CDFs."""
    log = failed_vllm_log(tmp_path / "failed.json")
    err = one_line(capsys, ["validate", "vllm_opt13b_a100", "--against", str(log), "--out", str(tmp_path / "out")])
    assert err == (f"simbatch: error: {log}: no request completed (all 10 failed, as the log records them): "
                   "no latency to compare with")
    assert not (tmp_path / "out").exists()


def test_validate_against_one_token_outputs_warns_of_nothing(tmp_path, capsys, recwarn):
    """A log with no TPOT (outputs of one token) compares its TTFT; the empty TPOT panel says so
    instead of matplotlib's 'No artists with labels found to put in legend' on stderr."""
    log = write_exp(tmp_path / "one.exp", exp_rows(12, output_len=1, tpot_ms=0.0))
    assert main(["validate", "vllm_opt13b_a100", "--against", str(log), "--out", str(tmp_path / "out")]) == 0
    assert [str(w.message) for w in recwarn] == []
    assert (tmp_path / "out" / "cdfs" / "one.png").is_file()


@pytest.mark.parametrize("changes, cause", [
    ({"complete_time": 1e308}, "finish 1e+308 s comes 1e+308 s after the first send, beyond 1e+09 s (32 years), "
                               "where simulated time cannot resolve a microsecond"),
    ({"first_token_time": 1e307, "complete_time": 1e308}, "first token 1e+307 s comes 1e+307 s after the first "
                                                          "send, beyond 1e+09 s"),
], ids=["finish", "first token"])
def test_times_beyond_the_horizon_in_a_log_are_one_line(tmp_path, capsys, changes, cause):
    """Times of 1e308: exit 0, numpy warnings, ``inf`` in pairs.csv."""
    log = write_exp(tmp_path / "huge.exp", [TINY_LOG[0], {**TINY_LOG[1], **changes}, *TINY_LOG[2:]])
    err = one_line(capsys, ["validate", "vllm_opt13b_a100", "--against", str(log), "--out", str(tmp_path / "out")])
    assert err.startswith(f"simbatch: error: {log}: entry 2: ") and cause in err, err
    assert not (tmp_path / "out").exists()


def test_a_clock_too_coarse_for_a_microsecond_is_one_line(tmp_path, capsys):
    """Times in nanoseconds read as seconds (1.7e18 s): re-based, every latency rounds to 0 or to
    multiples of 256 s, silently."""
    shift = 1.7e18
    log = write_exp(tmp_path / "ns.exp", [{**r, "issue_time": r["issue_time"] + shift, "first_token_time":
                                           r["first_token_time"] + shift, "complete_time": r["complete_time"] + shift}
                                          for r in TINY_LOG])
    err = one_line(capsys, ["validate", "vllm_opt13b_a100", "--against", str(log)])
    assert err == (f"simbatch: error: {log}: entry 1: arrival 1.7e+18 s: a clock reading this large cannot resolve "
                   "a microsecond (a float of seconds holds one only below about 8.6e9 s); is the unit right?")


def test_a_length_beyond_any_context_is_the_logs_error_not_the_scenarios(tmp_path, capsys):
    """``output_len: 10**30`` wrapped round in int64 and was blamed on the scenario."""
    log = write_exp(tmp_path / "big.exp", [TINY_LOG[0], {**TINY_LOG[1], "output_len": 10**30}])
    err = one_line(capsys, ["validate", "vllm_opt13b_a100", "--against", str(log)])
    assert err == (f"simbatch: error: {log}: entry 2: output_len: expected a whole number of at most 1,000,000,000 "
                   f"(more tokens than any model's context), got {10**30}")


def test_a_large_distserve_log_is_read_in_bounded_memory(tmp_path):
    """A 1,000,000-request ``.exp`` took 45 s and 11.7 GB (ast.literal_eval's tree of the whole line)
    before anything ran; 50,000 requests (8.7 MB) took some 900 MB. Each request is now read alone:
    the peak stays within a few times the file's size."""
    import subprocess
    import sys

    rows = [{**TINY_LOG[i % 12], "issue_time": 10.0 + i * 0.01, "first_token_time": 10.1 + i * 0.01,
             "complete_time": 10.4 + i * 0.01} for i in range(50_000)]
    log = write_exp(tmp_path / "big.exp", rows)
    probe = ("import resource, sys; from simbatch.measured import read_measured; "
             "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; r = read_measured(sys.argv[1]); "
             "print(len(r), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)")
    n, grown = map(int, subprocess.run([sys.executable, "-c", probe, str(log)], cwd=ROOT, capture_output=True,
                                       text=True, check=True).stdout.split())
    assert n == 50_000 and grown < 8 * log.stat().st_size, (grown, log.stat().st_size)


def test_a_large_log_that_is_no_list_of_dicts_is_refused_without_parsing_it_whole(tmp_path, monkeypatch):
    """Past LITERAL_BYTES a line is never handed to ast.literal_eval whole: a log cut short names
    where its list broke off."""
    import simbatch.measured.readers as readers
    from simbatch.errors import SimbatchError
    from simbatch.measured import read_measured

    monkeypatch.setattr(readers, "LITERAL_BYTES", 1000)
    monkeypatch.setattr(readers.ast, "literal_eval", lambda text: pytest.fail(f"parsed {len(text)} characters whole"))
    log = tmp_path / "cut.exp"
    log.write_text(repr(TINY_LOG)[:-150])
    with pytest.raises(SimbatchError) as info:
        read_measured(log)
    assert info.value.where == f"{log}:1" and info.value.cause.startswith("after request 11 (character "), info.value


def test_every_format_reads_the_same_through_the_fast_path(tmp_path):
    """The per-request reading gives what ast.literal_eval of the whole line gave, messages included."""
    from simbatch.errors import SimbatchError
    from simbatch.measured import read_measured

    log = write_exp(tmp_path / "a.exp", TINY_LOG)
    run = read_measured(log)
    assert run.prompt_tokens.tolist() == [r["prompt_len"] for r in TINY_LOG]
    assert run.finish_s.tolist() == pytest.approx([r["complete_time"] - 10.0 for r in TINY_LOG])
    for text, cause in (("[{'prompt_len': 5}]", "missing key 'output_len'"),
                        (repr([{**TINY_LOG[0], "prompt_len": "x"}]), "prompt_len: expected a whole number, got 'x'"),
                        ("[1, 2]", "expected a dict, got int 1"), ("[]", "empty list: no requests"),
                        ("{'a': 1}", "expected a list of per-request dicts, got dict"),
                        ("[{'prompt_len': True}]", "prompt_len: expected a whole number, got True")):
        (tmp_path / "b.exp").write_text(text + "\n")
        with pytest.raises(SimbatchError, match=re.escape(cause)):
            read_measured(tmp_path / "b.exp")


def vllm_log_without_send_times(path: Path, n: int = 6) -> Path:
    """A vLLM JSON at 2 req/s without ``start_times``: its arrivals must be given."""
    path.write_text(json.dumps({"input_lens": [50] * n, "output_lens": [5] * n, "ttfts": [0.05] * n,
                                "itls": [[0.02] * 4] * n, "errors": [""] * n, "request_rate": 2.0}))
    return path


def genai_log(path: Path, levels: int = 2, n: int = 6) -> Path:
    """A genai-perf export with ``levels`` experiments and no usage counts: pick one, give prompts."""
    def request(i):
        t = 1_700_000_000_000_000_000 + i * 500_000_000
        chunk = {"response": 'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'}
        return {"timestamp": t, "request_inputs": {"payload": "{}"},
                "response_timestamps": [t + 50_000_000 + j * 20_000_000 for j in range(5)],
                "response_outputs": [chunk] * 5}
    path.write_text(json.dumps({"service_kind": "openai", "experiments": [
        {"experiment": {"mode": "request_rate", "value": 2.0 * (k + 1)}, "requests": [request(i) for i in range(n)]}
        for k in range(levels)]}))
    return path


def test_the_readers_options_exist_on_the_command_line(tmp_path, capsys):
    """The messages asked for ``arrivals=``, ``experiment=`` and ``prompt_tokens=``, which only
    Python could pass: ``--log-option KEY=VALUE`` gives them to validate and calibrate alike."""
    v, g = vllm_log_without_send_times(tmp_path / "v.json"), genai_log(tmp_path / "g.json")
    (tmp_path / "arrivals.txt").write_text("# seconds\n0\n0.5\n1.0, 1.5\n2.0 2.5\n")
    (tmp_path / "prompts.txt").write_text("50\n" * 6)
    scenario = ["validate", "vllm_opt13b_a100"]
    err = one_line(capsys, [*scenario, "--against", str(v)])
    assert "pass arrivals= (seconds, one per request in file order; on the command line --log-option " \
           "arrivals=FILE, one number a line)" in err
    assert main([*scenario, "--against", str(v), "--log-option", f"arrivals={tmp_path / 'arrivals.txt'}"]) == 0
    err = one_line(capsys, [*scenario, "--against", str(g)])
    assert "experiment=0..1 (--log-option experiment=K on the command line)" in err
    err = one_line(capsys, [*scenario, "--against", str(g), "--log-option", "experiment=1"])
    assert "--log-option prompt_tokens=N, or =FILE with one a line" in err
    for prompts in ("50", str(tmp_path / "prompts.txt")):
        assert main([*scenario, "--against", str(g), "--log-option", "experiment=1",
                     "--log-option", f"prompt_tokens={prompts}"]) == 0
    capsys.readouterr()
    err = one_line(capsys, ["calibrate", "--from-log", str(g), "--scenario", "vllm_opt13b_a100"])
    assert "--log-option experiment=K" in err


@pytest.mark.parametrize("options, message", [
    (["experiment=7"], "--log-option experiment: expected an index 0..1, got 7"),
    (["experiment=x"], "--log-option experiment=x: expected a whole number, got 'x'"),
    (["colour=red"], "--log-option colour=red: unknown key 'colour'; allowed: arrivals, experiment, prompt_tokens, "
                     "system"),
    (["arrivals=nope.txt"], "--log-option arrivals=nope.txt: nope.txt: numbers file not found"),
    (["arrivals"], "--log-option arrivals: expected KEY=VALUE, e.g. experiment=0"),
    (["experiment=1", "experiment=0"], "--log-option experiment=0: experiment is given twice"),
    (["experiment=1", "prompt_tokens=50", "arrivals=a.txt"],
     "--log-option: unknown option 'arrivals' for format 'genai-perf'; allowed: experiment, prompt_tokens"),
])
def test_a_bad_log_option_names_its_flag(tmp_path, capsys, monkeypatch, options, message):
    monkeypatch.chdir(tmp_path)
    Path("a.txt").write_text("0\n")
    g = genai_log(tmp_path / "g.json")
    argv = ["validate", "vllm_opt13b_a100", "--against", str(g), *[a for o in options for a in ("--log-option", o)]]
    assert one_line(capsys, argv) == f"simbatch: error: {message}"


def test_log_options_without_a_log_are_refused(capsys):
    assert one_line(capsys, ["validate", "classroom", "--log-option", "experiment=1"]) == \
        "simbatch: error: --log-option: only with --against LOG"
    assert one_line(capsys, ["calibrate", "--format", "vllm"]) == "simbatch: error: --format: only with --from-log LOG"
