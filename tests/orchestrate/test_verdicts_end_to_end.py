"""The regression verdict end to end with real cells (a tiny resnet18 synthetic cell, 6 repeats a run): a fire
drill (+200 % work per step, each step's own time tripled inside its own process: -67 % throughput, over four
times the 10-16 % this 2-core machine drifts between runs an hour apart) is a regression attributed to the
optimizer phase, where the drill's work runs.

What the end-to-end test held before on real timing, and why it went (issue 57): the A/A of two sequential runs
(one read 16 % slower with nothing to explain it: a false alarm is a chance this machine gives, never a fact) and
the runs beside busy loops (which windows the scheduler spoils is the scheduler's choice). Each is now decided on
exact facts: the verdict on flagged rows in tests/analysis/test_compare.py (constructed rows), the meter on a
neighbour pinned to the cell's own core in tests/cell/test_interference.py, and the A/A's false-alarm rate is
measured, not asserted, in benchmarks/ (docs/performance.md, "Four verdicts")."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import nvbench


MATRIX = """
version = 1
[benchmark]
name = "verdicts"
model = "resnet18"
num_classes = 10
image_size = 16
batch_size = 8
warmup_steps = 3
measure_steps = 10
val_steps = 0
timeout_s = 300
[data]
workers = 0
[axes]
backend = ["synthetic"]
[run]
repeats = 6
threads_per_process = 1
nvtx = false
device = "cpu"
"""


def run(matrix: Path, out: Path, *extra: str) -> Path:
    proc = nvbench("run", str(matrix), "--out", str(out), "--no-progress", *extra)
    assert proc.returncode == 0, proc.stderr
    return out


def report(cand: Path, base: Path, out: Path) -> tuple[int, dict, str]:
    # at q 0.05 a side may lose two of its six repeats to the interference meter and still decide (4 + 4 reach
    # p = 0.029): in a fresh-clone suite one window read 11 % of others' CPU and was left out, and 4 + 5 cannot
    # reach the default 0.01
    proc = nvbench("report", str(cand), "--baseline", str(base), "--out", str(out), "--fail-on-regression",
                   "--fdr", "0.05")
    (verdict,) = pq.read_table(out / "verdicts.parquet").to_pylist()
    # the figures of docs/performance.md ("Four verdicts"): pytest -s shows them
    print(f"{cand.name} vs {base.name}: exit {proc.returncode}, {verdict['verdict']}: {verdict['reason']}")
    return proc.returncode, verdict, proc.stderr


@pytest.mark.slow
def test_a_drill_of_three_times_the_step_is_a_regression_in_the_optimizer_phase(tmp_path):
    matrix = tmp_path / "verdicts.toml"
    matrix.write_text(MATRIX)
    a = run(matrix, tmp_path / "A")
    drill = run(matrix, tmp_path / "drill", "--fire-drill", "200")

    rc, v, err = report(drill, a, tmp_path / "r-drill")
    assert rc == 1 and v["verdict"] == "regression", err
    assert v["effect_pct"] < -25, v["reason"]  # -67 % expected; a quarter of the step is the machine's spread x 1.5
    assert v["fire_drill_pct"] == 200
    # the drill's work runs inside the optimizer phase: the verdict says so, with the phase's interval
    assert v["phase"] == "optimizer" and v["phase_change_low_ms"] > 0, v["attribution"]
