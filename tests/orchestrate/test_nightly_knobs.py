"""`nvbench nightly`'s knobs: each a flag and an NVBENCH_* variable, the flag first, then the variable, then the
default; an empty variable is the default for most knobs but `no flag` for those whose empty means something
(NVBENCH_REPEATS, as ci/nightly.sh's ${NVBENCH_REPEATS-10}); a bad value is one line naming the knob, exit 2,
nothing run; --help lists every knob with its default."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from harness.commands import nightly as command

NOW = datetime(2026, 12, 7, 3, 4, 5, tzinfo=timezone.utc)


def resolve(flags: dict | None = None, **environ: str) -> dict:
    values, problem = command.resolve(flags or {}, environ, NOW)
    assert problem is None, problem
    return values


def test_defaults_follow_the_reports_folder_and_the_clock():
    v = resolve()
    assert (v["matrix"], v["reports"], v["baseline"], v["history"]) == (
        "matrices/resnet50.toml", "reports", "reports/baselines/current", "reports/history")
    assert (v["repeats"], v["confirm"], v["confirm_repeats"], v["confirm_max_repeats"], v["work_repeats"]) == (
        "10", "auto", "10", "20", "1")
    assert (v["run_id"], v["bisect"], v["bisect_budget_s"], v["run_args"], v["slots"]) == (
        "nightly-20261207-030405", "work", "1800", (), "")
    moved = resolve(NVBENCH_REPORTS="/r")
    assert (moved["baseline"], moved["history"]) == ("/r/baselines/current", "/r/history")


def test_a_flag_beats_the_variable_which_beats_the_default():
    assert resolve(NVBENCH_CONFIRM="every")["confirm"] == "every"
    assert resolve({"confirm": "sequential"}, NVBENCH_CONFIRM="every")["confirm"] == "sequential"
    assert resolve({"bisect_budget_s": "60"}, NVBENCH_BISECT_BUDGET_S="90")["bisect_budget_s"] == "60"
    assert resolve(NVBENCH_RUN_ARGS=" --fire-drill  10 ")["run_args"] == ("--fire-drill", "10")


def test_empty_is_the_default_unless_empty_means_something():
    assert resolve(NVBENCH_REPEATS="")["repeats"] == ""  # ${NVBENCH_REPEATS-10}: the matrix's run.repeats
    emptied = resolve(NVBENCH_CONFIRM_REPEATS="", NVBENCH_CONFIRM_MAX_REPEATS="", NVBENCH_WORK_REPEATS="")
    assert (emptied["confirm_repeats"], emptied["confirm_max_repeats"], emptied["work_repeats"]) == ("", "", "")
    assert resolve(NVBENCH_CONFIRM="", NVBENCH_MATRIX="", NVBENCH_BISECT_BUDGET_S="")["confirm"] == "auto"
    assert resolve({"repeats": ""}, NVBENCH_REPEATS="4")["repeats"] == ""


@pytest.mark.parametrize("flags, environ, line", [
    ({}, {"NVBENCH_CONFIRM": "sometimes"},
     "NVBENCH_CONFIRM=sometimes: must be auto, interleaved, every or sequential"),
    ({"confirm": "sometimes"}, {}, "--confirm sometimes: must be auto, interleaved, every or sequential"),
    ({}, {"NVBENCH_BISECT": "always"}, "NVBENCH_BISECT=always: must be off, work or auto"),
    ({}, {"NVBENCH_REPEATS": "0"}, "NVBENCH_REPEATS=0: must be a whole number of at least 1, or empty"),
    ({"kernel_repeats": "-1"}, {}, "--kernel-repeats -1: must be a whole number of at least 0"),
    ({}, {"NVBENCH_SLOTS": "many"}, "NVBENCH_SLOTS=many: must be a number of slots (1 or more) or auto"),
    ({}, {"NVBENCH_BISECT_BUDGET_S": "soon"}, "NVBENCH_BISECT_BUDGET_S=soon: must be a number of seconds above 0"),
    ({"run_id": "a/b"}, {}, "--run-id a/b: must name one folder (no /)"),
])
def test_a_bad_value_is_one_line_naming_the_knob(flags, environ, line):
    assert command.resolve(flags, environ, NOW)[1] == line


def test_the_command_refuses_a_bad_knob_in_one_line_exit_2_and_runs_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVBENCH_")} | {"NVBENCH_BISECT": "always"}
    proc = subprocess.run([sys.executable, "-m", "harness", "nightly", "--reports", str(tmp_path / "r")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert (proc.returncode, proc.stderr, proc.stdout) == (
        2, "nightly: NVBENCH_BISECT=always: must be off, work or auto\n", "")
    assert not (tmp_path / "r").exists()


def test_help_lists_every_knob_its_variable_and_its_default():
    from harness import cli

    text = " ".join(cli.build_parser()._subparsers._group_actions[0].choices["nightly"].format_help().split())
    for knob in command.KNOBS:
        shown = knob.default.replace("{reports}", "REPORTS").replace("{now}", "YYYYMMDD-HHMMSS, UTC") or "empty"
        assert knob.flag in text and f"{knob.variable}; default: {shown})" in text, knob.name
