"""`nvbench ab`: both interpreters really run, the pairs are interleaved in a seeded random order, and the
report compares B with A; plus the interleaving schedule on its own (no processes)."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

import pyarrow.parquet as pq
from conftest import ROOT, nvbench

from harness.orchestrate import ab, runner


def test_run_interleaved_pairs_every_job_and_shuffles_the_order_within_rounds(monkeypatch, tmp_path):
    ran = []
    monkeypatch.setattr(runner, "run_job", lambda cell, repeat, ctx: ran.append((ctx.run_id, cell, repeat)) or {})
    monkeypatch.setattr(runner, "derive_twin_columns", lambda run_dir: 0)
    monkeypatch.setattr(ab, "_open_session", lambda side: {})
    monkeypatch.setattr(ab, "_close_session", lambda side, session: None)

    def side(name, n):
        ctx = runner.JobContext(run_dir=tmp_path / name, run_id=name, caps=None, env={}, env_key="k",
                                fault_spec=None)
        return ab.Side(name=name, ctx=ctx, cells={"c": "cell"}, jobs=[("c", r) for r in range(n)])

    order = ab.run_interleaved([side("a", 20), side("b", 20), side("x", 3)], seed=7)
    assert len(order) == len(ran) == 43
    rounds = [order[i:i + 3] for i in range(0, 9, 3)] + [order[9 + i:11 + i] for i in range(0, 34, 2)]
    for k, round_ in enumerate(rounds):  # round k holds repeat k of every side that still has one
        assert {r for _, _, r in round_} == {k} and len({s for s, _, _ in round_}) == len(round_)
    firsts = [round_[0][0] for round_ in rounds]
    assert {"a", "b"} <= set(firsts)  # the order within a round is drawn, not fixed
    assert order == ab.run_interleaved([side("a", 20), side("b", 20), side("x", 3)], seed=7)  # reproducible


def _wrapper(path: Path, log: Path) -> Path:
    """An 'interpreter' that logs each call, then runs this one: proof that side B really used it."""
    path.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{sys.executable}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_ab_runs_both_interpreters_interleaved_and_reports(tiny_matrix, tmp_path):
    matrix = tiny_matrix('backend = ["synthetic"]', repeats=1)  # one pair: A and B of the same job
    calls = tmp_path / "b-calls.txt"
    python_b = _wrapper(tmp_path / "python-b", calls)
    out = tmp_path / "ab"
    proc = nvbench("ab", str(matrix), "--a", sys.executable, "--b", str(python_b), "--out", str(out), "--seed", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split()[:4] == [str(out / "report" / n) for n in ("report.html", "summary.md",
                                                                          "verdicts.parquet", "junit.xml")]
    launched = [line for line in calls.read_text().splitlines() if "harness.cell run" in line]
    assert len(launched) == 1 and all(str(out / "b" / "work") in line for line in launched)
    meta = json.loads((out / "ab.json").read_text())
    assert meta["python"] == {"a": sys.executable, "b": str(python_b)} and meta["seed"] == 3
    order = meta["order"]
    assert len(order) == 2
    for k in (0,):  # each pair is the same (cell, repeat) under A and B, back to back
        assert {order[k][0], order[k + 1][0]} == {"a", "b"} and order[k][1:] == order[k + 1][1:]
    for side in ("a", "b"):
        rows = pq.read_table(out / side / "cells").to_pylist()
        assert [r["status"] for r in rows] == ["ok"]
    (verdict,) = pq.read_table(out / "report" / "verdicts.parquet").to_pylist()
    assert verdict["verdict"] == "inconclusive" and verdict["num_candidate"] == 1
    assert verdict["candidate_run_id"] == "b" and verdict["baseline_run_id"] == "a"
    assert "vs A (" in (out / "report" / "summary.md").read_text()


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


def test_ab_side_a_runs_another_checkout_and_the_fire_drill_slows_only_b(tiny_matrix, tmp_path):
    matrix = tiny_matrix('backend = ["synthetic"]', repeats=1)
    other = tmp_path / "baseline-src"  # a copy of the harness that logs every process importing it
    shutil.copytree(ROOT / "harness", other / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    marks = tmp_path / "imported.txt"
    with open(other / "harness" / "__init__.py", "a") as init:
        init.write("\nimport os as _os, sys as _sys\n"
                   "with open(_os.environ['NVB_TEST_MARKS'], 'a') as _f:\n    _f.write(' '.join(_sys.argv) + '\\n')\n")
    out = tmp_path / "ab"
    proc = nvbench("ab", str(matrix), "--a-checkout", str(other), "--fire-drill", "50", "--out", str(out),
                   env={"NVB_TEST_MARKS": str(marks)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = marks.read_text().splitlines()
    cells = [line for line in lines if "job.json" in line]
    assert len(cells) == 1 and all(str(out / "a" / "work") in line for line in cells)  # never side B's
    meta = json.loads((out / "ab.json").read_text())
    assert meta["checkout"] == {"a": str(other), "b": None}
    rows = {side: pq.read_table(out / side / "cells").to_pylist() for side in ("a", "b")}
    assert [r["status"] for r in rows["a"] + rows["b"]] == ["ok"] * 2
    assert [r["fire_drill_pct"] for r in rows["a"]] == [0.0]
    assert [r["fire_drill_pct"] for r in rows["b"]] == [50.0]
    summary = (out / "report" / "summary.md").read_text().replace("\\_", "_")  # Markdown escapes underscores
    assert f"vs A ({sys.executable} in {other})" in summary


def test_ab_rejects_a_folder_that_is_not_a_checkout(tiny_matrix, tmp_path):
    proc = nvbench("ab", str(tiny_matrix()), "--a-checkout", str(tmp_path), "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and f"{tmp_path}: not an nvbench checkout (no harness/__init__.py)" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_looks_double_to_the_budget_and_drop_the_ones_too_small_to_decide():
    assert ab.look_schedule(5, 20) == [5, 10, 20] and ab.look_schedule(10, 20) == [10, 20]
    assert ab.look_schedule(3, 3) == [3]
    # 5 + 5 pairs: smallest p 2/252 = 0.0079 > 0.01 / 3; with 10 and 20 left, 0.01 / 2 is reachable at 10
    assert ab.decisive_looks([5, 10, 20], 0.01) == [10, 20]
    assert ab.decisive_looks([10, 20], 0.01) == [10, 20]
    # 3 + 3 cannot (0.1); 6 + 6 (2/924 = 0.0022) can once the level is split three ways, not four
    assert ab.decisive_looks([3, 6, 12, 24], 0.01) == [6, 12, 24]
    assert ab.decisive_looks([2, 4], 0.01) == [4]  # the last look stays: whether it can reach is the CLI's check
    # 5 + 5 pairs cannot decide at 0.01 / 2 but can at 0.01: dropping it must not bring it back (this looped)
    assert ab.decisive_looks([5, 10], 0.01) == [10]


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
