"""`nvbench ab`: both interpreters really run, the pairs are interleaved in a seeded random order, and the
report compares B with A; a first try with --max-repeats starts at once and finishes, and a stopped A/B leaves
no process; plus the interleaving schedule and the look schedule on their own (no processes; the look schedule
over a grid, with a deadline)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, first_cell, kill_plan, nvbench, stop_and_check, wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import cli
from harness.analysis.judge.evidence import permutations_for
from harness.analysis.judge.verdict import Thresholds
from harness.analysis.judge.decide import smallest_permutation_p
from harness.orchestrate.workflows import ab
from harness.orchestrate.workflows.looks import decisive_looks, look_schedule
from harness.orchestrate.session import job
from harness.results.schema import SUPERSEDED_STEPS


def test_interleaved_rounds_pair_every_job_and_shuffle_the_order_within_rounds(tmp_path):
    def side(name, n):
        ctx = job.JobContext(run_dir=tmp_path / name, run_id=name, caps=None, env={}, env_key="k",
                             fault_spec=None)
        return ab.Side(name=name, ctx=ctx, cells={"c": "cell"}, jobs=[("c", r) for r in range(n)])

    def order(seed):
        sides = [side("a", 20), side("b", 20), side("x", 3)]
        return [(s.name, cid, r) for round_ in ab.interleaved_rounds(sides, seed=seed) for s, cid, r in round_]

    ran = order(7)
    assert len(ran) == 43
    rounds = [ran[i:i + 3] for i in range(0, 9, 3)] + [ran[9 + i:11 + i] for i in range(0, 34, 2)]
    for k, round_ in enumerate(rounds):  # round k holds repeat k of every side that still has one
        assert {r for _, _, r in round_} == {k} and len({s for s, _, _ in round_}) == len(round_)
    firsts = [round_[0][0] for round_ in rounds]
    assert {"a", "b"} <= set(firsts)  # the order within a round is drawn, not fixed
    assert ran == order(7)  # reproducible


def _wrapper(path: Path, log: Path) -> Path:
    """An 'interpreter' that logs each call, then runs this one: proof that side B really used it."""
    path.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{sys.executable}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.documented("nvbench ab matrices/resnet50.toml --a venv-old/bin/python --b venv-new/bin/python",
                        bound_s=300)
def test_ab_runs_both_interpreters_interleaved_and_reports(tiny_matrix, tmp_path, documented_run, quiet_machine):
    matrix = tiny_matrix('backend = ["synthetic"]', repeats=1)  # one pair: A and B of the same job
    calls = tmp_path / "b-calls.txt"
    python_b = _wrapper(tmp_path / "python-b", calls)
    out = tmp_path / "ab"
    # the processes each side launches are counted: a window another job spoiled would run again (a constructed
    # quiet machine; the re-runs are test_rerun's and test_busy_ab's)
    proc = documented_run(["ab", str(matrix), "--a", sys.executable, "--b", str(python_b), "--out", str(out),
                           "--seed", "3"], env=quiet_machine)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split()[:4] == [str(out / "report" / n) for n in ("report.html", "summary.md",
                                                                          "verdicts.parquet", "junit.xml")]
    launched = [line for line in calls.read_text().splitlines() if "harness.cell run" in line]
    # the timed repeat and the counted process (nvbench ab counts one a side by default), both under B's interpreter
    assert len(launched) == 2 and [str(out / "b" / "work") in line for line in launched] == [True, False]
    assert str(out / "b" / "counted" / "work") in launched[1]
    meta = json.loads((out / "ab.json").read_text())
    assert meta["python"] == {"a": sys.executable, "b": str(python_b)} and meta["seed"] == 3
    order = meta["order"]
    assert len(order) == 2
    for k in (0,):  # each pair is the same (cell, repeat) under A and B, back to back
        assert {order[k][0], order[k + 1][0]} == {"a", "b"} and order[k][1:] == order[k + 1][1:]
    for side in ("a", "b"):  # (a window another process spoiled runs again: its row stays, superseded)
        rows = [r for r in pq.read_table(out / side / "cells").to_pylist() if r["status"] != "superseded"]
        assert [r["status"] for r in rows] == ["ok"]
    (verdict,) = pq.read_table(out / "report" / "verdicts.parquet").to_pylist()
    assert verdict["verdict"] == "inconclusive" and verdict["num_candidate"] == 1
    assert verdict["candidate_run_id"] == "b" and verdict["baseline_run_id"] == "a"
    summary = (out / "report" / "summary.md").read_text().replace("\\_", "_")  # Markdown escapes underscores
    assert summary.startswith("## nvbench: B vs A\n") and f"- B: candidate ({python_b}; code {ROOT} @" in summary


def test_ab_rejects_an_interpreter_that_cannot_run_nvbench(tiny_matrix, tmp_path):
    matrix = tiny_matrix()
    proc = nvbench("ab", str(matrix), "--a", sys.executable, "--b", str(tmp_path / "nope"),
                   "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "nope: no such interpreter" in proc.stderr
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'ImportError: no torch here' >&2\nexit 1\n")
    broken.chmod(0o755)
    proc = nvbench("ab", str(matrix), "--a", str(broken), "--b", sys.executable, "--out", str(tmp_path / "y"))
    assert proc.returncode == 2
    assert "cannot import nvbench's harness and its dependencies: ImportError: no torch here" in proc.stderr
    assert not (tmp_path / "y").exists()


@pytest.mark.documented("nvbench ab matrices/resnet50.toml --a-checkout ../nvbench-at-baseline", bound_s=300)
def test_ab_side_a_runs_another_checkout_and_the_fire_drill_slows_only_b(tiny_matrix, tmp_path, documented_run,
                                                                          quiet_machine):
    matrix = tiny_matrix('backend = ["synthetic"]', repeats=1)
    other = tmp_path / "baseline-src"  # a copy of the harness that logs every process importing it
    shutil.copytree(ROOT / "harness", other / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    marks = tmp_path / "imported.txt"
    with open(other / "harness" / "__init__.py", "a") as init:
        init.write("\nimport os as _os, sys as _sys\n"
                   "with open(_os.environ['NVB_TEST_MARKS'], 'a') as _f:\n    _f.write(' '.join(_sys.argv) + '\\n')\n")
    out = tmp_path / "ab"
    # the processes are counted, not timed: a neighbour must not re-run a window (a quiet machine, constructed)
    proc = documented_run(["ab", str(matrix), "--a-checkout", str(other), "--fire-drill", "50", "--out", str(out)],
                          env={"NVB_TEST_MARKS": str(marks)} | quiet_machine)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = marks.read_text().splitlines()
    cells = [line for line in lines if "job.json" in line]
    assert len(cells) == 2 and all(str(out / "a" / "") in line for line in cells)  # never side B's
    assert str(out / "a" / "counted" / "work") in cells[1]  # the counted process runs A's checkout too
    meta = json.loads((out / "ab.json").read_text())
    assert meta["checkout"] == {"a": str(other), "b": None}
    rows = {side: [r for r in pq.read_table(out / side / "cells").to_pylist() if r["status"] != "superseded"]
            for side in ("a", "b")}
    assert [r["status"] for r in rows["a"] + rows["b"]] == ["ok"] * 2
    assert [r["fire_drill_pct"] for r in rows["a"]] == [0.0]
    assert [r["fire_drill_pct"] for r in rows["b"]] == [50.0]
    summary = (out / "report" / "summary.md").read_text().replace("\\_", "_")  # Markdown escapes underscores
    # side A is named by what differs (the copy is no git checkout: no commit) and where it ran
    assert f"- A: nvbench (none) ({sys.executable}; code {other} (not in git))" in summary and "B vs A" in proc.stdout


def test_ab_rejects_a_folder_that_is_not_a_checkout(tiny_matrix, tmp_path):
    proc = nvbench("ab", str(tiny_matrix()), "--a-checkout", str(tmp_path), "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and f"{tmp_path}: not an nvbench checkout (no harness/__init__.py)" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_looks_double_to_the_budget_and_drop_the_ones_too_small_to_decide():
    assert look_schedule(5, 20) == [5, 10, 20] and look_schedule(10, 20) == [10, 20]
    assert look_schedule(3, 3) == [3]
    # 5 + 5 pairs: smallest p 2/252 = 0.0079 > 0.01 / 3; with 10 and 20 left, 0.01 / 2 is reachable at 10
    assert decisive_looks([5, 10, 20], 0.01) == [10, 20]
    assert decisive_looks([10, 20], 0.01) == [10, 20]
    # 3 + 3 cannot (0.1); 6 + 6 (2/924 = 0.0022) can once the level is split three ways, not four
    assert decisive_looks([3, 6, 12, 24], 0.01) == [6, 12, 24]
    assert decisive_looks([2, 4], 0.01) == [4]  # the last look stays: whether it can reach is the CLI's check
    # nvbench bisect's defaults and a user's first try: 5 + 5 cannot reach 0.01 / 2, and alone the last look
    # is all that is left (the loop this replaced dropped the 5, re-admitted it alone, and never returned)
    with deadline(5):
        assert decisive_looks([5, 8], 0.01) == [8] and decisive_looks([5, 10], 0.01) == [10]


@contextmanager
def deadline(seconds: float):
    """Raise in the main thread when the block runs longer than `seconds`: a schedule that loops forever is a
    failed test, not a suite that waits for CI's limit (the schedule is pure Python, so the alarm lands)."""
    def expire(signum, frame):
        raise TimeoutError(f"the look schedule did not return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


LEVELS = (0.001, 0.01, 0.05)
CELL_COUNTS = (1, 4, 36, 200)


def reachable_p(pairs: int, looks: int, fdr_q: float, cells: int) -> float:
    """The smallest p the report's test can give a cell of `pairs` + `pairs` repeats among `cells` (two metrics):
    exact below 20,000 splits (2 / C(2n, n)), else Monte Carlo with compare's own number of splits."""
    splits = math.comb(2 * pairs, pairs)
    if splits <= 20_000:
        return smallest_permutation_p(pairs, pairs)
    return 1 / (permutations_for(Thresholds(fdr_q=fdr_q, looks=looks), cells, 2) + 1) + 2 / splits


def check_schedule(repeats: int, max_repeats: int, fdr_q: float, cells: int) -> None:
    looks = look_schedule(repeats, max_repeats)
    with deadline(2):
        kept = decisive_looks(looks, fdr_q)
    k = len(kept)
    assert kept == looks[len(looks) - k:] and kept[-1] == max_repeats, (looks, kept)
    share = fdr_q / k
    for n in kept[:-1]:  # every kept look but the last can reach its share (the last is the CLI's check)
        assert reachable_p(n, k, fdr_q, cells) <= share * (1 + 1e-9), (looks, kept, n, cells)
    if k < len(looks):  # and no longer schedule could: the next larger one has a look that cannot reach
        longer = looks[len(looks) - k - 1:]
        assert smallest_permutation_p(longer[0], longer[0]) > fdr_q / (k + 1), (looks, kept)


def test_every_schedule_of_the_grid_returns_at_once_with_looks_that_can_reach():
    with deadline(60):
        for fdr_q in LEVELS:
            for repeats in range(1, 21):
                for max_repeats in range(repeats, 101):
                    check_schedule(repeats, max_repeats, fdr_q, cells=1)


@settings(max_examples=300, deadline=None)
@given(repeats=st.integers(1, 20), extra=st.integers(0, 80), fdr_q=st.sampled_from(LEVELS),
       cells=st.sampled_from(CELL_COUNTS))
def test_the_schedule_holds_for_any_number_of_cells(repeats, extra, fdr_q, cells):
    check_schedule(repeats, repeats + extra, fdr_q, cells)


def test_more_pairs_go_to_the_inconclusive_cells_only_until_none_is_left_or_the_budget_is_spent(monkeypatch, tmp_path):
    runs, extended = [], []
    monkeypatch.setattr(ab, "run_ab", lambda out_dir, **kw: runs.append(kw["seed"]))
    monkeypatch.setattr(ab, "extend_plan", lambda run_dir, cells, pairs, seed: extended.append(
        (run_dir.name, tuple(cells), pairs)) or len(cells))
    (tmp_path / ab.AB_FILE).write_text("{}")
    verdicts = iter([["c1", "c2"], ["c2"], ["c2"]])
    history = ab.run_adaptive(tmp_path, [10, 20, 40], judge=lambda: next(verdicts), caps=None, envs={},
                              pythons={}, seed=5, notify=lambda m: None)
    assert extended == [("a", ("c1", "c2"), 20), ("b", ("c1", "c2"), 20), ("a", ("c2",), 40), ("b", ("c2",), 40)]
    assert [h["pairs"] for h in history] == [10, 20, 40] and history[-1]["inconclusive"] == ["c2"]
    assert json.loads((tmp_path / ab.AB_FILE).read_text())["looks"] == history and len(runs) == 3
    verdicts = iter([["c1"], []])  # decided at the second look: no third
    extended.clear()
    history = ab.run_adaptive(tmp_path, [10, 20, 40], judge=lambda: next(verdicts), caps=None, envs={},
                              pythons={}, seed=5, notify=lambda m: None)
    assert [h["pairs"] for h in history] == [10, 20] and extended == [("a", ("c1",), 20), ("b", ("c1",), 20)]


@pytest.mark.slow
def test_a_repeat_whose_window_opens_in_a_transient_runs_again_and_the_verdict_on_stdout_says_so(tiny_matrix, tmp_path):
    matrix = tiny_matrix('backend = ["synthetic"]', repeats=1)  # one pair
    matrix.write_text(matrix.read_text().replace("warmup_steps = 1\n", "warmup_steps = 3\n")
                      .replace("measure_steps = 3\n", "measure_steps = 12\n"))
    out, log = tmp_path / "ab", tmp_path / "out.txt"
    with open(log, "w") as stdout:  # `nvbench ab ... > out.txt`
        proc = subprocess.run([sys.executable, "-m", "harness", "ab", str(matrix), "--out", str(out), "--seed", "3",
                               "--work-repeats", "0"],  # the re-run is under test, not the counting
                              check=False, stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=dict(os.environ, NVBENCH_FAULT="run=b&repeat=0:slow_start"))  # B's repeat 0 only
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    rows = {side: pq.read_table(out / side / "cells").to_pylist() for side in ("a", "b")}
    superseded = {side: [r for r in rows[side] if r["status"] == "superseded"] for side in rows}
    # the faulted repeat ran twice, the second time as a fresh process without the fault; its first row stays
    (kept,) = [r for r in superseded["b"] if r["injected_fault"] == "slow_start"]
    assert kept["start_transient_steps"] >= 3 and kept["is_steady"] is False
    assert kept["reason"].startswith("window opened in a start transient (first ") and "run again" in kept["reason"]
    assert (out / "b" / SUPERSEDED_STEPS / f"{Path(kept['log_path']).stem}.parquet").exists()  # its steps as they ran
    # a user's own query over steps/*.parquet counts each repeat's measured steps once: the kept attempt's
    counted = duckdb.sql(f"SELECT repeat, count(*) FROM '{out}/b/steps/*.parquet' WHERE rank = 0 AND NOT is_warmup "
                         "GROUP BY repeat").fetchall()
    assert counted == [(0, 12)]
    # and the export counts the kept repeat's rounds alone
    assert cli.main(["export", str(out / "b"), "--format", "pytest-benchmark", "--out", str(tmp_path / "b.json")]) == 0
    (bench,) = json.loads((tmp_path / "b.json").read_text())["benchmarks"]
    assert bench["stats"]["rounds"] == 12 and bench["extra_info"]["repeats"] == [0]
    assert [r["injected_fault"] for r in rows["b"] if r["status"] == "ok"] == [None]
    order = json.loads((out / "ab.json").read_text())["order"]
    first_b = [side for side, _, _ in order].index("b")
    assert order[first_b + 1][0] == "b"  # the re-run came at once, still beside its pair
    # the verdict lines went to stdout, both sides named alike, with how many repeats ran again
    n, a, b = sum(map(len, superseded.values())), len(superseded["a"]), len(superseded["b"])
    code = f"{sys.executable}; code {ROOT} @ {kept['git_sha'][:12]}"  # the rows' own commit: the code that ran
    assert f"A: baseline ({code}" in text and f"B: candidate ({code}" in text
    assert f"B vs A: 1 inconclusive ({n} repeat{'s' if n > 1 else ''} re-run after a start transient)" in text
    words = " ".join(text.split())  # the cell's reason is wrapped to the terminal's width
    assert f"; {n} repeat{'s' if n > 1 else ''} re-run after a start transient (A {a}, B {b})" in words
    assert "B vs A" not in proc.stderr and "A/B folder:" in proc.stderr  # diagnostics stay on stderr
    assert f"A: baseline ({code}" in (out / "report" / "report.html").read_text()


def test_an_ab_no_schedule_can_decide_is_one_line_and_exit_2(tiny_matrix, tmp_path):
    # 4 + 4 pairs at most: no look can ever reach 0.01 (2 / C(8, 4) = 0.029), whatever the looks
    proc = nvbench("ab", str(tiny_matrix()), "--repeats", "2", "--max-repeats", "4", "--out", str(tmp_path / "x"),
                   timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: --max-repeats 4: a permutation test of 4 + 4 repeats cannot reach p <= 0.01 (its smallest p is "
        "0.0286); 5 or more a side can"]
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
@pytest.mark.documented("nvbench ab matrices/resnet50.toml --repeats 5 --max-repeats 8", bound_s=900)
def test_ab_with_more_pairs_while_inconclusive_starts_at_once_and_finishes(tiny_matrix, tmp_path, tagged):
    """A user's first try (issue 35): with --max-repeats 8 the look schedule once spun for good before anything
    ran. Its first cell starts within 60 s; 5 + 5 pairs cannot decide at 0.01 / 2, so it runs 8 pairs, once."""
    argv = [sys.executable, "-m", "harness", "ab", str(tiny_matrix()), "--repeats", "5", "--max-repeats", "8"]
    proc, tag = tagged(argv, cwd=tmp_path)  # as typed: the A/B folder goes to ./reports
    wait_for("the A/B's first cell", lambda: first_cell(tag), timeout_s=60, proc=proc)
    try:
        _, err = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("`nvbench ab MATRIX --repeats 5 --max-repeats 8` did not finish within 900 s")
    assert proc.returncode == 0, err
    assert "so the A/B starts at 8 pairs a side (looks [8])" in " ".join(err.split())
    (out,) = (tmp_path / "reports").iterdir()
    for side in ("a", "b"):
        kept = [r for r in pq.read_table(out / side / "cells").to_pylist() if r["status"] != "superseded"]
        assert sorted(r["repeat"] for r in kept) == list(range(8))  # a spoiled window's re-run stands for it
    (verdict,) = pq.read_table(out / "report" / "verdicts.parquet").to_pylist()
    assert verdict["num_candidate"] == 8


def test_a_stopped_ab_leaves_no_process(tiny_matrix, tmp_path, tagged):
    """`--repeats 5 --max-repeats 10`, the other look schedule that never returned, starts its first cell within
    60 s; stopped at a random moment it leaves nothing running."""
    sig, moment = kill_plan("nvbench ab")
    argv = [sys.executable, "-m", "harness", "ab", str(tiny_matrix()), "--repeats", "5", "--max-repeats", "10",
            "--out", str(tmp_path / "ab")]
    proc, tag = tagged(argv)
    wait_for("the A/B's first cell", lambda: first_cell(tag), timeout_s=60, proc=proc)
    time.sleep(moment)
    code, err = stop_and_check(proc, tag, sig)
    assert code == 130 and f"interrupted; the rows so far are in {tmp_path / 'ab'}/a" in err, (sig, moment, err)
