"""Every window's start is checked for a transient, end to end on the CPU: a tiny cell run for real without warm-up
is marked unsteady with its first steps named; with `auto` warm-up its window starts as warm as after 5 steps."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import nvbench

STEPS = 20


def run(tiny_matrix, tmp_path, warmup: str) -> tuple[list[dict], dict[int, np.ndarray]]:
    """One real `nvbench run` of the tiny cell, 3 repeats of STEPS measured steps: its rows, and each repeat's
    window step times as the steps file keeps them."""
    matrix = tiny_matrix(repeats=3)
    matrix.write_text(matrix.read_text().replace("warmup_steps = 1\n", f"warmup_steps = {warmup}\n")
                      .replace("measure_steps = 3\n", f"measure_steps = {STEPS}\n"))
    out = tmp_path / f"w{warmup.strip(chr(34))}"
    proc = nvbench("run", str(matrix), "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = pq.read_table(out / "steps").to_pandas().sort_values(["repeat", "step"])
    windows = {r: g.loc[~g["is_warmup"], "step_time_s"].to_numpy() for r, g in steps.groupby("repeat")}
    return sorted(pq.read_table(out / "cells").to_pylist(), key=lambda r: r["repeat"]), windows


def start_cost(window: np.ndarray, first: int = 3) -> float:
    """Time of the window's first steps beyond its own median step, as a fraction of the window's time: what a
    cold start takes off the window's throughput. Within one process, so the machine's speed, which differs
    between processes by more than 2 % on a shared 2-core box (docs/performance.md), cancels out of it."""
    return float(np.sum(window[:first] - np.median(window)) / window.sum())


@pytest.mark.slow
def test_a_window_without_warm_up_is_unsteady_and_names_its_first_steps(tiny_matrix, tmp_path):
    rows, windows = run(tiny_matrix, tmp_path, "0")
    for row in rows:
        assert row["status"] == "ok" and row["warmup_steps_used"] == 0
        assert row["is_steady"] is False and row["start_transient_steps"] >= 1, row["steadiness"]
        assert row["steadiness"].startswith("not steady: start transient: first "), row["steadiness"]
        assert "x the window's median" in row["steadiness"]
        # the steps file keeps every step as it ran: the slow ones too, none of them marked warm-up
        window = windows[row["repeat"]]
        assert window.size == STEPS and window[0] > np.median(window)


@pytest.mark.slow
def test_an_auto_warm_up_opens_the_window_as_warm_as_five_steps_do(tiny_matrix, tmp_path):
    auto_rows, auto = run(tiny_matrix, tmp_path, '"auto"')
    _, five = run(tiny_matrix, tmp_path, "5")
    for row in auto_rows:
        assert row["warmup_steps_used"] >= 20  # two chunks at least
        # a window that starts warm, or (a hiccup of the shared machine as it opened) one that says so
        assert row["start_transient_steps"] == 0 or row["steadiness"].startswith("not steady: start transient: first")
    # Auto's throughput is not held down by its start more than 2 % beyond five warm-up steps': the start's cost
    # to throughput, compared within each process and taken as the median over the repeats. A cold start costs the
    # tiny cell's window 0-6 % (median 3 %), auto's -5-1.5 %, five steps' -2.5-10 % (40 windows each, the loaded
    # 2-core box; docs/performance.md): drawn 3 and 3 from those, auto exceeds five by 2 % in 1 % of draws, a cold
    # window in 74 %. Throughput itself would not do: between processes it differs by 16-28 % there.
    assert np.median([start_cost(w) for w in auto.values()]) <= np.median([start_cost(w) for w in five.values()]) + 0.02
