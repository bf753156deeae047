"""Hostile YAML and unreadable files: each refused with one line naming file (and line) and cause."""

from __future__ import annotations

import pytest

from simbatch.cli import main
from simbatch.errors import SimbatchError
from simbatch.files.yamlio import MAX_NODES, load_yaml


def bomb(levels: int = 8) -> str:
    """The 'billion laughs': each level lists the previous one nine times."""
    names = [chr(97 + i) for i in range(levels + 1)]
    lines = [f"{names[0]}: &{names[0]} [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip(names, names[1:]):
        lines.append(f"{name}: &{name} [" + ", ".join(f"*{prev}" for _ in range(9)) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, where, cause", [
    ("a: 1\nb: 2\na: 3\n", ":3", "duplicate key 'a' (first at line 1)"),
    ("x:\n  y: 1\n  y: 2\n", ":3", "duplicate key 'y' (first at line 2)"),
    (bomb(), ":", f"expand to more than {MAX_NODES:,} nodes"),
    ("a: &x [1, *x]\n", ":1", "recursive"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "", "nested too deeply"),
    ("a: [1, 2\n", ":2", "invalid YAML"),
])
def test_hostile_yaml_is_one_line(tmp_path, text, where, cause):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(SimbatchError) as err:
        load_yaml(path)
    assert str(err.value).startswith(f"{path}{where}") and cause in str(err.value)


def test_aliases_within_the_bound_still_load(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("base: &base {kind: continuous, max_num_seqs: 8}\npolicy: *base\n" + bomb(3))
    data = load_yaml(path)
    assert data["policy"] == {"kind": "continuous", "max_num_seqs": 8} and len(data["d"]) == 9


@pytest.mark.parametrize("make, cause", [
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: p.write_bytes(b"name: caf\xe9\n"), "not UTF-8 text (byte 0xe9"),
    (lambda p: None, "scenario file not found"),
])
def test_unreadable_scenarios_through_the_cli(tmp_path, capsys, make, cause):
    path = tmp_path / "s.yaml"
    make(path)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and cause in err[0] and not out.exists()


def test_a_device_is_not_a_scenario(capsys):
    assert main(["run", "/dev/null"]) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_a_duplicate_policy_line_no_longer_wins(tmp_path, capsys):
    """Issue 14: a second `policy:` line turned classroom's static run into continuous."""
    from simbatch.files.bundled import resolve_scenario_path

    text = resolve_scenario_path("classroom").read_text() + "policy: {kind: continuous}\n"
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "duplicate key 'policy'" in err and f"{path}:{text.count(chr(10))}" in err


@pytest.mark.parametrize("text, value", [("1e30", 1e30), ("5E-3", 0.005), ("1.5e3", 1500.0), ("-.5", -0.5),
                                         ("1.5", 1.5), ("12", 12), ("abc", "abc"), ("1e", "1e")])
def test_numbers_are_read_as_yaml_1_2_reads_them(tmp_path, text, value):
    """PyYAML (YAML 1.1) leaves 1e30 and 1.5e3 as strings, so 'rate: 1e30' was refused as
    "expected a number, got '1e30'"."""
    p = tmp_path / "v.yaml"
    p.write_text(f"rate: {text}\n")
    got = load_yaml(p)["rate"]
    assert got == value and type(got) is type(value)
