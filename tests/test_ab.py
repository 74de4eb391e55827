"""`nvbench ab`: both interpreters really run, the pairs are interleaved in a seeded random order, and the
report compares B with A; plus the interleaving schedule on its own (no processes)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pyarrow.parquet as pq

from conftest import nvbench
from harness import ab, runner


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
    matrix = tiny_matrix('backend = ["synthetic"]', repeats=2)
    calls = tmp_path / "b-calls.txt"
    python_b = _wrapper(tmp_path / "python-b", calls)
    out = tmp_path / "ab"
    proc = nvbench("ab", str(matrix), "--a", sys.executable, "--b", str(python_b), "--out", str(out), "--seed", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split()[:4] == [str(out / "report" / n) for n in ("report.html", "summary.md",
                                                                          "verdicts.parquet", "junit.xml")]
    launched = [line for line in calls.read_text().splitlines() if "harness.launch cell" in line]
    assert len(launched) == 2 and all(str(out / "b" / "work") in line for line in launched)
    meta = json.loads((out / "ab.json").read_text())
    assert meta["python"] == {"a": sys.executable, "b": str(python_b)} and meta["seed"] == 3
    order = meta["order"]
    assert len(order) == 4
    for k in (0, 2):  # each pair is the same (cell, repeat) under A and B, back to back
        assert {order[k][0], order[k + 1][0]} == {"a", "b"} and order[k][1:] == order[k + 1][1:]
    for side in ("a", "b"):
        rows = pq.read_table(out / side / "cells").to_pylist()
        assert [r["status"] for r in rows] == ["ok", "ok"]
    (verdict,) = pq.read_table(out / "report" / "verdicts.parquet").to_pylist()
    assert verdict["verdict"] == "insufficient data" and verdict["num_candidate"] == 2
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
