"""Every command README's "Using it" block shows is run by some test as a user types it (its own defaults, a tiny
matrix), within a bound the test states: the tests say what they run with `@pytest.mark.documented(COMMAND...,
bound_s=S)`, and this file holds README and those marks in step. A hang fails naming the command
(conftest.nvbench, documented_run). Also here, the documented commands no other test runs as typed."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest
from conftest import ROOT

MODES = ("--max-repeats", "--resume", "--baseline", "--history")
"""Flags that make a command take another path: a README line with one needs a test with the same ones."""
GPU_ONLY = {("python", "benchmarks/compile_targets.py"): "needs a CUDA device (docs/gpu-validation.md)"}
REQUIRED = [  # issue 35: the invocations a user's first try used, which no test had typed that way
    ("nvbench ab without --max-repeats", lambda c: c[:2] == ["nvbench", "ab"] and "--max-repeats" not in c),
    ("nvbench ab with --max-repeats", lambda c: c[:2] == ["nvbench", "ab"] and "--max-repeats" in c),
    ("nvbench bisect on its own repeats", lambda c: c[:2] == ["nvbench", "bisect"]
     and not {"--repeats", "--max-repeats", "--resume"} & set(c)),
    ("nvbench history", lambda c: c[:2] == ["nvbench", "history"]),
    ("nvbench export", lambda c: c[:2] == ["nvbench", "export"]),
    ("nvbench report", lambda c: c[:2] == ["nvbench", "report"]),
    ("nvbench profile", lambda c: c[:2] == ["nvbench", "profile"]),
    ("ci/nightly.sh", lambda c: c[:2] == ["bash", "ci/nightly.sh"]),
]


def words(command: str) -> list[str]:
    """The command's tokens without leading VAR=value assignments."""
    tokens = shlex.split(command)
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        tokens.pop(0)
    return tokens


def key(command: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """(the program and its subcommand(s), the MODES flags it gives)."""
    tokens = words(command)
    head = tokens[:3] if tokens[:2] == ["nvbench", "data"] else tokens[:2]
    return tuple(head), frozenset(t for t in tokens if t in MODES)


def readme_commands() -> list[str]:
    block = (ROOT / "README.md").read_text().split("## Using it", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split(" #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def documented_marks() -> dict[str, list[tuple[str, object]]]:
    """command -> [(test, its bound_s)] over every `pytest.mark.documented(...)` in tests/."""
    found: dict[str, list[tuple[str, object]]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and ast.unparse(deco.func) == "pytest.mark.documented":
                    bound = next((ast.unparse(k.value) for k in deco.keywords if k.arg == "bound_s"), None)
                    for arg in deco.args:
                        found.setdefault(ast.literal_eval(arg), []).append(
                            (f"{path.relative_to(ROOT)}::{node.name}", bound))
    return found


def test_every_readme_command_is_run_by_a_test_within_a_stated_bound():
    marks = documented_marks()
    tested = {key(command) for command in marks}
    missing = [line for line in readme_commands() if key(line) not in tested and key(line)[0] not in GPU_ONLY]
    assert not missing, f"README commands no test runs as typed (mark one @pytest.mark.documented): {missing}"
    unbounded = [test for tests in marks.values() for test, bound in tests if bound is None]
    assert not unbounded, f"documented without bound_s: {unbounded}"
    for what, matches in REQUIRED:
        assert any(matches(words(command)) for command in marks), what


def test_the_readme_check_sees_a_command_no_test_runs():
    assert key("nvbench ab m.toml --a-checkout ../base --repeats 10 --max-repeats 20") == (
        ("nvbench", "ab"), frozenset({"--max-repeats"}))
    assert key("NVBENCH_MATRIX=m.toml bash ci/nightly.sh") == (("bash", "ci/nightly.sh"), frozenset())
    assert key("nvbench data make --out data/shapes64")[0] == ("nvbench", "data", "make")
    marks = documented_marks()
    assert key("nvbench ab m.toml --max-repeats 8") in {key(c) for c in marks}
    assert key("nvbench frobnicate m.toml") not in {key(c) for c in marks}


@pytest.mark.documented("nvbench validate matrices/resnet50.toml", bound_s=120)
def test_validate_every_matrix_of_the_project(documented_run):
    matrices = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "matrices").glob("*.toml"))
    proc = documented_run(["validate", *matrices])
    assert proc.returncode == 0, proc.stderr
    # a line per file; under it, indented, what each model's registry defaults set (matrices/convnets.toml)
    assert [line.split(":")[0] for line in proc.stdout.splitlines() if not line.startswith(" ")] == matrices


@pytest.mark.documented("nvbench data make --out data/shapes64", bound_s=120)
def test_data_make_on_its_defaults(documented_run, tmp_path):
    proc = documented_run(["data", "make", "--out", "data/shapes64"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "data" / "shapes64"
    assert proc.stdout.strip() == f"dataset written to {Path('data/shapes64')}" or str(root) in proc.stdout
    assert len(list((root / "train").glob("*/*.jpg"))) == 10 * 64 and len(list((root / "val").glob("*/*.jpg"))) == 160


@pytest.mark.documented("nvbench env", "nvbench env --json", bound_s=120)
def test_env_plain_and_as_json(documented_run):
    import json

    plain, as_json = documented_run(["env"]), documented_run(["env", "--json"])
    assert plain.returncode == as_json.returncode == 0, plain.stderr + as_json.stderr
    key_line = plain.stdout.strip().splitlines()[-1].split()
    assert key_line[0] == "env_key" and json.loads(as_json.stdout)["env_key"] == key_line[1]
