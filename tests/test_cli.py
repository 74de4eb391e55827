"""The CLI on bad input: one line per problem naming file and key, exit 2, nothing written."""

from __future__ import annotations

import argparse

import pytest
from conftest import ROOT, nvbench


def assert_rejected(proc, *fragments: str) -> list[str]:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), proc.stderr
    for fragment in fragments:
        assert any(fragment in line for line in lines), (fragment, lines)
    return lines


HEAD = "version = 1\n[benchmark]\n"
"""What every matrix states; each case below adds one mistake."""


@pytest.mark.parametrize("body, fragment", [
    ("[benchmark\n", "malformed TOML at line 1, column 11"),
    ("version = 1\n[benchmak]\n", "benchmak: unknown section (did you mean 'benchmark'?)"),
    (HEAD + "[axes]\nprecison = ['fp16']\n", "axes.precison: unknown axis (did you mean 'precision'?)"),
    (HEAD + "[axes]\nbackend = ['tensorflow']\n", "axes.backend: unknown value 'tensorflow'"),
    (HEAD + "[axes]\nbackend = []\n", "axes.backend: empty list"),
    (HEAD + "batch_size = 'large'\n", "benchmark.batch_size: must be int, got str"),
    (HEAD + "image_size = 0\n", "benchmark.image_size: must be >= 8, got 0"),
    (HEAD + "model = 'resnet05'\n", "benchmark.model: unknown value 'resnet05' (did you mean 'resnet50'?)"),
    (HEAD + "[recipe]\nschedule = 'cosin'\n", "recipe.schedule: unknown value 'cosin' (did you mean 'cosine'?)"),
    (HEAD + "[[exclude]]\nbackend = 'pytorch'\n", "exclude[0].backend: value 'pytorch' is not on the axis"),
    (HEAD + "[[exclude]]\nprecisoin = 'fp16'\n", "exclude[0].precisoin: unknown axis"),
    (HEAD + "[data]\npath = '/nonexistent/imagenet'\n[axes]\nbackend = ['pytorch']\n", "data.path: dataset"),
    ("", "not an nvbench matrix"),
    ("[project]\nname = 'x'\n", "not an nvbench matrix"),
    ("[benchmark]\n", "version: missing"),
])
def test_bad_matrix_is_rejected_before_anything_is_written(tmp_path, body, fragment):
    matrix = tmp_path / "bad.toml"
    matrix.write_text(body)
    reports = tmp_path / "reports"
    proc = nvbench("run", str(matrix), "--reports", str(reports))
    lines = assert_rejected(proc, fragment)
    assert all(str(matrix) in line for line in lines)
    assert not reports.exists()


def test_validate_reports_every_problem_together(tmp_path):
    matrix = tmp_path / "bad.toml"
    matrix.write_text(HEAD + "batch_size = 0\nwarmup_steps = -2\n[axes]\nprecision = ['fp8']\n")
    lines = assert_rejected(nvbench("validate", str(matrix)),
                            "benchmark.batch_size", "benchmark.warmup_steps", "axes.precision")
    assert len(lines) == 3


def test_missing_matrix_and_unmatched_only(tmp_path):
    assert_rejected(nvbench("run", str(tmp_path / "none.toml")), "none.toml: matrix file not found")
    reports = tmp_path / "reports"
    proc = nvbench("run", str(ROOT / "matrices" / "resnet50.toml"), "--only", "world_size=3",
                   "--reports", str(reports))
    assert_rejected(proc, "no cell left to run after --only world_size=3")
    assert_rejected(nvbench("run", str(ROOT / "matrices" / "resnet50.toml"), "--only", "precision=fp64"),
                    "--only precision: unknown value 'fp64'")
    assert not reports.exists()


def test_resume_of_something_that_is_not_a_run(tmp_path):
    assert_rejected(nvbench("run", "--resume", str(tmp_path)), "not an nvbench run folder")


def test_dry_run_lists_cells_and_writes_nothing(tmp_path):
    reports = tmp_path / "reports"
    proc = nvbench("run", str(ROOT / "matrices" / "resnet50.toml"), "--only", "backend=synthetic",
                   "--only", "precision=bf16", "--dry-run", "--reports", str(reports))
    assert proc.returncode == 0, proc.stderr
    lines = [l for l in proc.stdout.splitlines() if l.startswith("synthetic_")]
    assert len(lines) == 2 * 2 * 2
    assert all("_bf16_" in l for l in lines)
    assert "nothing was run or written" in proc.stdout
    assert not reports.exists()


def test_repeats_flag_overrides_the_matrix(tmp_path):
    matrix = str(ROOT / "matrices" / "resnet50.toml")
    proc = nvbench("run", matrix, "--only", "backend=synthetic", "--only", "precision=bf16", "--repeats", "3",
                   "--dry-run", "--reports", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "8 cells, 24 jobs" in proc.stdout
    assert all(" x3 " in l for l in proc.stdout.splitlines() if l.startswith("synthetic_"))
    assert_rejected(nvbench("run", matrix, "--repeats", "0", "--reports", str(tmp_path)),
                    "--repeats 0: run.repeats must be >= 1")
    assert_rejected(nvbench("run", "--resume", str(tmp_path), "--repeats", "2"), "--resume takes the run folder alone")
    assert not any(tmp_path.iterdir())


def test_env_prints_fingerprint():
    import json

    proc = nvbench("env", "--json")
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)
    assert env["python_version"] and len(env["env_key"]) >= 8
    human = nvbench("env")
    assert human.returncode == 0 and "env_key" in human.stdout


def test_a_smoke_cell_of_the_mission_validates_on_every_class_and_its_console_fits_80_columns(tmp_path):
    """The README's main job, one cell of it: --smoke validates on the whole generated val set (10 classes x 10
    images), so its top-1 is a number measured on every class, not '0.000' of one batch of 4; every line the run
    prints fits 80 columns except those that name a path."""
    import pyarrow.parquet as pq

    out = tmp_path / "smoke"
    only = [f"--only={axis}" for axis in ("backend=pytorch", "memory_format=nchw", "precision=fp32", "world_size=1",
                                          "grad_accum=1")]
    proc = nvbench("run", str(ROOT / "matrices" / "resnet50.toml"), "--smoke", *only, "--out", str(out),
                   env={"COLUMNS": "80", "NVBENCH_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    (row,) = pq.read_table(out / "cells").to_pylist()
    assert row["status"] == "ok" and row["num_val_images"] == 100 and 0.0 <= row["top1"] <= 1.0
    line = next(l for l in proc.stdout.splitlines() if l.startswith("pytorch_nchw_fp32_ws1_ga1 "))
    assert line.split()[3] == f"{row['top1']:.3f}"  # shown as a result: it is one
    # and beside it what a guess would score; the dataset line says it was made, and where
    assert "\ntop-1 by chance: 0.100 (1 / 10 classes); a --smoke cell's few steps leave it" in proc.stdout
    datasets = tmp_path / "cache" / "datasets"
    assert f"\ndataset: generating shapes 24px x 10 classes into {datasets}/shapes-24px-10c-" in proc.stderr
    wide = [l for l in (proc.stdout + proc.stderr).splitlines() if len(l) > 80 and "/" not in l]
    assert wide == []


def _parsers(parser: argparse.ArgumentParser, name: str = "nvbench"):
    """Every parser of the command line, subcommands' subcommands included, with its name."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _parsers(child, f"{name} {sub}")


def test_every_flag_says_its_default_in_help_read_from_the_code_that_owns_it():
    from harness.analysis.nights.history import HistorySettings
    from harness.analysis.judge.verdict import Thresholds
    from harness.cli import build_parser
    from harness.commands.common import default_text

    owners = {"report": Thresholds(), "ab": Thresholds(), "history": HistorySettings()}
    missing, checked = [], 0
    for name, parser in _parsers(build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or action.required or \
                    isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._StoreTrueAction)):
                continue  # a store_true flag's default is off; a required one has none
            words = formatter._expand_help(action) if action.help else ""
            checked += 1
            owner = owners.get(name.split()[-1])
            expected = [default_text(getattr(owner, action.dest))] if hasattr(owner, action.dest) else []
            if action.default not in (None, [], False):
                expected.append(default_text(action.default))
            if "default" not in words.lower() or not all(e in words for e in expected):
                missing.append(f"{name} {action.option_strings[0]}: {words!r} (expected {expected})")
    assert checked > 40 and missing == []


def test_every_command_opens_its_help_with_what_it_does_and_every_positional_says_what_it_is():
    from harness.cli import build_parser
    from harness.commands import common

    missing, positionals = [], 0
    for name, parser in _parsers(build_parser()):
        first = (parser.format_help().split("\n\n") + [""])[1].strip()  # the paragraph after usage
        if not parser.description or " ".join(first.split()) != " ".join(parser.description.split()):
            missing.append(f"{name}: no description line ({first!r})")
        for action in parser._actions:
            if not action.option_strings:
                positionals += 1
                if not action.help:
                    missing.append(f"{name} {action.metavar or action.dest}: no help")
    assert positionals >= 12 and missing == []
    top = build_parser().format_help()
    codes = top[top.index("exit codes:"):].splitlines()[1:]
    assert [int(line.split()[0]) for line in codes] == [common.EXIT_OK, common.EXIT_FAILURES, common.EXIT_BAD_INPUT,
                                                       common.EXIT_INCONCLUSIVE, common.EXIT_INTERRUPTED]
    assert top.rstrip().endswith(codes[-1].rstrip())  # the last thing --help says
