"""ci/nightly.sh end to end with real cells: a night without a baseline only describes and joins the
history; a fire drill against a promoted baseline fails the job with a confirmed regression and stays
out of the history."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import ROOT


def night(matrix: Path, reports: Path, run_id: str, **extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               NVBENCH_MATRIX=str(matrix), NVBENCH_REPORTS=str(reports), NVBENCH_RUN_ID=run_id,
               # 3 + 3 repeats keep the test short; an exact permutation test of 3 + 3 can reach p = 0.1
               NVBENCH_REPEATS="3", NVBENCH_REPORT_ARGS="--min-repeats 3 --fdr 0.1", **extra)
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.pop("GITHUB_OUTPUT", None)
    return subprocess.run(["bash", str(ROOT / "ci" / "nightly.sh")], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


@pytest.mark.slow
def test_nightly_describes_then_fails_on_a_fire_drill(tmp_path, tiny_matrix):
    matrix, reports = tiny_matrix(), tmp_path / "reports"

    first = night(matrix, reports, "night1")
    assert first.returncode == 0, first.stderr
    assert "describing the run only" in first.stderr
    assert (reports / "night1" / "report" / "report.html").is_file()
    assert len(list((reports / "night1" / "cells").glob("*.parquet"))) == 3
    assert (reports / "history" / "night1").resolve() == (reports / "night1").resolve()

    (reports / "baselines").mkdir()
    (reports / "baselines" / "current").write_text("# promoted by the test\n../night1\n")
    drill = night(matrix, reports, "night2", NVBENCH_RUN_ARGS="--fire-drill 200")
    assert drill.returncode == 1, drill.stdout + drill.stderr
    assert "confirmed regression" in drill.stderr
    summary = (reports / "night2" / "report" / "summary.md").read_text()
    assert "FIRE DRILL" in summary
    suite = ET.parse(reports / "night2" / "report" / "junit.xml").getroot()
    failures = suite.findall(".//testcase/failure")
    assert len(failures) == 1 and "regression" in failures[0].get("message", "")
    assert not (reports / "history" / "night2").exists()
