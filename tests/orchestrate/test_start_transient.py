"""Every window's start is checked for a transient, end to end on the CPU: a tiny cell run for real without warm-up
whose window opens in a hiccup (the slow_start fault: its first steps 3x) is marked unsteady with its first steps
named; every window's steadiness agrees with its count of slow first steps; `auto` warm-up runs two chunks at least.
How often a natural cold start is flagged, and how warm auto opens a window against five steps, are measured, not
asserted (a process's own first steps vary with the machine; benchmarks/transients.py, docs/performance.md)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import nvbench

STEPS = 20


def run(tiny_matrix, tmp_path, warmup: str, env: dict | None = None) -> tuple[list[dict], dict[int, np.ndarray]]:
    """One real `nvbench run` of the tiny cell, 3 repeats of STEPS measured steps: its rows, and each repeat's
    window step times as the steps file keeps them."""
    matrix = tiny_matrix(repeats=3)
    matrix.write_text(matrix.read_text().replace("warmup_steps = 1\n", f"warmup_steps = {warmup}\n")
                      .replace("measure_steps = 3\n", f"measure_steps = {STEPS}\n"))
    out = tmp_path / f"w{warmup.strip(chr(34))}"
    proc = nvbench("run", str(matrix), "--out", str(out), "--no-progress", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = pq.read_table(out / "steps").to_pandas().sort_values(["repeat", "step"])
    windows = {r: g.loc[~g["is_warmup"], "step_time_s"].to_numpy() for r, g in steps.groupby("repeat")}
    return sorted(pq.read_table(out / "cells").to_pylist(), key=lambda r: r["repeat"]), windows


def consistent(row: dict) -> None:
    """A window's steadiness agrees with its count of slow first steps."""
    flagged = row["start_transient_steps"] > 0
    assert flagged == row["steadiness"].startswith("not steady: start transient: first "), row["steadiness"]
    assert not flagged or row["is_steady"] is False, row


@pytest.mark.slow
def test_a_window_without_warm_up_that_opens_in_a_hiccup_is_unsteady_and_names_its_first_steps(tiny_matrix, tmp_path):
    rows, windows = run(tiny_matrix, tmp_path, "0", env={"NVBENCH_FAULT": "repeat=0:slow_start"})
    for row in rows:
        assert row["status"] == "ok" and row["warmup_steps_used"] == 0
        consistent(row)
        # the steps file keeps every step as it ran, none of them marked warm-up
        assert windows[row["repeat"]].size == STEPS
    hiccup = rows[0]  # its first steps 3x the rest: far beyond any spread of this machine's steps
    assert hiccup["is_steady"] is False and hiccup["start_transient_steps"] >= 1, hiccup["steadiness"]
    assert "x the window's median" in hiccup["steadiness"]
    assert windows[0][0] > np.median(windows[0])


@pytest.mark.slow
def test_an_auto_warm_up_runs_two_chunks_at_least_and_its_window_says_how_it_opened(tiny_matrix, tmp_path):
    auto_rows, _ = run(tiny_matrix, tmp_path, '"auto"')
    for row in auto_rows:
        assert row["warmup_steps_used"] >= 20  # two chunks at least
        consistent(row)  # a window that starts warm, or (a hiccup as it opened) one that says so
