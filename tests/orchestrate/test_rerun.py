"""A/B re-runs of a repeat whose window opened in a start transient (harness.orchestrate.workflows.rerun) on a run folder of
real Parquet files, and how an A/B names its sides (harness.orchestrate.workflows.ab_sides). The processes themselves run in
tests/orchestrate/test_ab.py."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from conftest import ROOT

from harness.host.procstat import foreign_ticks, process_stats
from harness.orchestrate.workflows import ab_sides, rerun
from harness.orchestrate.session import job, runfolder
from harness.results import store
from harness.results.schema import SUPERSEDED_STEPS, cell_table, step_table
from harness.matrix.cells import job_key

CELL = "synthetic_nchw_fp32_ws1_ga1_0123456789"
TRANSIENT = ("not steady: start transient: first 3 steps at 2.9-7.1x the window's median (18% of the window's "
             "time beyond its settled steps); lengthen the warm-up or use warmup_steps = \"auto\"")


def finished(run_dir: Path, repeat: int, *, transient: int) -> dict:
    """A job's files as the runner leaves them: its row, its steps, its log."""
    key = job_key(CELL, repeat)
    row = {"run_id": run_dir.name, "cell_id": CELL, "repeat": repeat, "status": "ok", "reason": "",
           "throughput_img_per_s": 100.0, "is_steady": not transient, "start_transient_steps": transient,
           "steadiness": TRANSIENT if transient else "steady", "log_path": f"logs/{key}.log",
           "start_transient_low_x": 2.93 if transient else None, "start_transient_high_x": 7.08 if transient else None}
    store.write_table(run_dir / "cells" / f"{key}.parquet", cell_table([row]))
    store.write_table(run_dir / "steps" / f"{key}.parquet", step_table({"step": [0, 1], "repeat": [repeat] * 2,
                                                                        "step_time_s": [0.3, 0.1]}))
    (run_dir / "logs").mkdir(exist_ok=True)
    (run_dir / "logs" / f"{key}.log").write_text("the cell's output\n")
    return row


def runs_of(cell, repeat: int, ctx: job.JobContext, reruns: rerun.Reruns, *, side: str, quiet=None):
    """Run one job of a side, then again while `again` says so; yields each row as it is written (the superseded
    ones are rewritten as such before the next run). A re-run carries no injected fault (NVBENCH_FAULT): the
    suite's faults stand for one-off hiccups. The driver these tests run `again` with; nvbench ab's lanes call
    `again` themselves (ab._again)."""
    while True:
        row = job.run_job(cell, repeat, ctx)
        yield row
        if not rerun.again(ctx.run_dir, row, reruns, ctx.notify, f"{side.upper()} r{repeat} {cell.cell_id}",
                           quiet=quiet):
            return
        ctx = dataclasses.replace(ctx, fault_spec=None)


def test_a_transient_row_is_kept_as_superseded_with_its_steps_and_log_and_its_job_is_pending_again(tmp_path):
    run_dir = tmp_path / "b"
    row = finished(run_dir, 4, transient=3)
    reruns = rerun.Reruns.of([run_dir], 2)
    assert reruns.wanted(run_dir, row)
    reason = reruns.supersede(run_dir, row)
    assert reason == ("window opened in a start transient (first 3 steps at 2.9-7.1x the window's median): run "
                      "again (re-run 1 of at most 2 for this cell on this side)")
    kept = f"{job_key(CELL, 4)}-superseded1"
    (cells,) = pq.read_table(run_dir / "cells").to_pylist()  # one row: the transient one, renamed
    assert cells["status"] == "superseded" and cells["reason"] == reason and cells["log_path"] == f"logs/{kept}.log"
    assert cells["throughput_img_per_s"] == 100.0 and cells["start_transient_steps"] == 3  # the row as it ran
    assert cells["rerun_cause"] == rerun.TRANSIENT  # its cause as data: no reader parses the reason
    assert pq.read_table(run_dir / SUPERSEDED_STEPS / f"{kept}.parquet").column("step_time_s").to_pylist() == [0.3, 0.1]
    assert not list((run_dir / "steps").glob("*.parquet"))  # a glob over steps/ no longer counts it
    assert (run_dir / "logs" / f"{kept}.log").read_text() == "the cell's output\n"
    assert runfolder.pending(run_dir, [(CELL, 4)]) == [(CELL, 4)]
    # a resumed A/B counts what it spent, per side
    assert rerun.Reruns.of([run_dir, tmp_path / "a"], 2).used == {(str(run_dir), CELL, False): 1}


def test_a_resumed_ab_classes_its_kept_rows_by_their_cause_not_their_words(tmp_path):
    """The budget a superseded row spent is read from its `rerun_cause` (whatever its reason says), and a row kept
    before the column existed from its own interference columns."""
    run_dir = tmp_path / "b"
    for repeat, cause, foreign, words in ((0, rerun.TRANSIENT, 0.0, "the machine said interference"),
                                          (1, rerun.INTERFERENCE, 0.0, "no such word"),
                                          (2, None, 0.6, "window opened in a start transient"),
                                          (3, None, 0.0, "window taken under interference (a kept row)")):
        row = {"run_id": "b", "cell_id": CELL, "repeat": repeat, "status": "superseded", "reason": words,
               "rerun_cause": cause, "foreign_cpu_frac": foreign, "foreign_cpu_s": 9.0 if foreign else 0.0}
        store.write_table(run_dir / "cells" / f"{job_key(CELL, repeat)}-superseded1.parquet", cell_table([row]))
    used = rerun.Reruns.of([run_dir], 2).used
    assert used == {(str(run_dir), CELL, False): 2, (str(run_dir), CELL, True): 2}, used


def test_a_window_taken_under_interference_runs_again_on_a_budget_of_its_own(tmp_path):
    run_dir = tmp_path / "b"
    quiet = finished(run_dir, 1, transient=0) | {"foreign_cpu_frac": 0.02}
    reruns = rerun.Reruns.of([run_dir], 0, busy_limit=2)  # no start transient re-runs at all
    assert not reruns.wanted(run_dir, quiet)
    busy = finished(run_dir, 2, transient=0) | {"foreign_cpu_frac": 0.61, "is_steady": False}
    store.write_table(run_dir / "cells" / f"{job_key(CELL, 2)}.parquet", cell_table([busy]))
    assert reruns.wanted(run_dir, busy)
    reason = reruns.supersede(run_dir, busy)
    assert reason == ("window taken under interference (other processes used 61% of this cell's cores): run again "
                      "(re-run 1 of at most 2 for this cell on this side)")
    assert runfolder.pending(run_dir, [(CELL, 2)]) == [(CELL, 2)]
    assert reruns.wanted(run_dir, busy)  # one left: the re-run was busy too
    store.write_table(run_dir / "cells" / f"{job_key(CELL, 2)}.parquet", cell_table([busy]))
    reruns.supersede(run_dir, busy)
    assert not reruns.wanted(run_dir, busy)  # spent: the row stays, and the comparison leaves it out
    assert rerun.Reruns.of([run_dir], 0, busy_limit=2).used == {(str(run_dir), CELL, True): 2}


def test_re_runs_stop_at_the_budget_and_never_repeat_an_injected_fault(tmp_path, monkeypatch):
    run_dir = tmp_path / "b"
    faults = []

    def run_job(cell, repeat, ctx):  # every run of this job opens in a transient
        faults.append(ctx.fault_spec)
        return finished(run_dir, repeat, transient=2)

    monkeypatch.setattr(job, "run_job", run_job)
    ctx = job.JobContext(run_dir=run_dir, run_id="b", caps=None, env={}, env_key="k",
                         fault_spec="run=b&repeat=0:slow_start", notify=lambda message: None)
    cell = dataclasses.make_dataclass("FakeCell", ["cell_id"])(CELL)
    reruns = rerun.Reruns.of([run_dir], 2)
    rows = list(runs_of(cell, 0, ctx, reruns, side="b"))
    assert len(rows) == 3 and faults == ["run=b&repeat=0:slow_start", None, None]
    statuses = sorted(r["status"] for r in pq.read_table(run_dir / "cells").to_pylist())
    assert statuses == ["ok", "superseded", "superseded"]  # the last run stays, transient and all
    assert len(list(runs_of(cell, 1, ctx, rerun.Reruns(limit=0), side="b"))) == 1  # --max-reruns 0


def test_an_interference_re_run_waits_for_the_neighbour_and_a_transient_one_does_not(tmp_path, monkeypatch):
    run_dir = tmp_path / "b"
    def runs():  # busy, then a transient, then clean: each written as its run ends
        busy = finished(run_dir, 0, transient=0) | {"foreign_cpu_frac": 0.61, "cpu_affinity": "0"}
        store.write_table(run_dir / "cells" / f"{job_key(CELL, 0)}.parquet", cell_table([busy]))
        yield busy
        yield finished(run_dir, 0, transient=2)
        yield finished(run_dir, 0, transient=0)

    rows = runs()
    monkeypatch.setattr(job, "run_job", lambda cell, repeat, ctx: next(rows))
    ctx = job.JobContext(run_dir=run_dir, run_id="b", caps=None, env={}, env_key="k", fault_spec=None,
                         notify=lambda message: None)
    cell = dataclasses.make_dataclass("FakeCell", ["cell_id"])(CELL)
    waits = []
    ran = list(runs_of(cell, 0, ctx, rerun.Reruns(limit=2), side="b", quiet=waits.append))
    assert len(ran) == 3 and waits == [(0,)]  # before the busy window's re-run only, on the row's own cores


def test_the_ab_lanes_wait_too(tmp_path, monkeypatch):
    from harness.orchestrate.placement import lanes
    from harness.orchestrate.workflows import ab

    run_dir = tmp_path / "a"
    busy = finished(run_dir, 3, transient=0) | {"foreign_cpu_frac": 0.7, "cpu_affinity": "0-1"}
    store.write_table(run_dir / "cells" / f"{job_key(CELL, 3)}.parquet", cell_table([busy]))
    waits = []
    monkeypatch.setattr(rerun, "wait_for_quiet", lambda cores, notify, **kw: waits.append(tuple(cores)))
    ctx = job.JobContext(run_dir=run_dir, run_id="a", caps=None, env={}, env_key="k", fault_spec=None,
                         notify=lambda message: None)
    link = lanes.Link(cell=dataclasses.make_dataclass("FakeCell", ["cell_id"])(CELL), repeat=3, ctx=ctx, tag="a")
    assert ab._again(link, busy, rerun.Reruns(limit=0)) is not None and waits == [(0, 1)]


def test_the_wait_ends_when_the_neighbour_leaves_or_at_its_limit(monkeypatch):
    said = []
    readings = iter([0.75, 0.74, 0.02])
    monkeypatch.setattr(rerun.time, "monotonic", iter(range(100)).__next__)  # a second a reading
    monkeypatch.setattr(rerun, "holders_text", lambda cores: "stress-ng (pid 812) 98%")
    assert rerun.wait_for_quiet([0], said.append, sample=lambda cores: next(readings)) == 3
    assert said == ["  waiting for the neighbour to leave (other processes use 75% of the cores: stress-ng (pid 812) "
                    "98%; at most 120 s)", "  quiet after 3 s"]
    said.clear()
    assert rerun.wait_for_quiet([0], said.append, max_wait_s=5, sample=lambda cores: 0.9) >= 5
    assert said[-1].startswith("  still busy after") and said[-1].endswith("running it again anyway")


def _ticks(pid: int) -> int:
    """utime + stime of one process, from its own /proc/PID/stat."""
    return process_stats()[pid][2]


def test_others_share_sees_a_busy_process_beside_it_and_not_its_own_children():
    """Exact accounting, whatever else shares the core (a CI runner's other job): the ticks a child spun are counted
    as this process tree's own, those of a process outside the tree as foreign."""
    core, marker = sorted(os.sched_getaffinity(0))[0], f"nvbench_test_neighbour_{os.getpid()}"
    spin = [sys.executable, "-c", f"import os\n{marker} = os.sched_setaffinity(0, [{core}])\nwhile True: pass"]
    own = subprocess.Popen(spin)  # this process's child: the A/B's own job
    try:
        time.sleep(0.2)
        before, child_before = rerun.tree_reading([core]), _ticks(own.pid)
        time.sleep(1.0)
        child_after, after = _ticks(own.pid), rerun.tree_reading([core])
    finally:
        own.kill()
        own.wait()
    spun = child_after - child_before
    assert spun >= 10, spun  # it ran (on a core shared with anything else, a share of the second)
    assert after.own - before.own >= spun - TICK_SLACK, (after, before, spun)  # its ticks are ours
    assert foreign_ticks(before, after) <= (after.busy - before.busy) - spun + TICK_SLACK
    subprocess.run(["setsid", "--fork", *spin], check=True)  # orphaned at once: not under this process
    try:
        time.sleep(0.2)
        (pid,) = [int(p) for p in subprocess.run(["pgrep", "-f", marker], capture_output=True,
                                                  text=True).stdout.split()]
        before, other_before = rerun.tree_reading([core]), _ticks(pid)
        time.sleep(1.0)
        other_after, after = _ticks(pid), rerun.tree_reading([core])
    finally:
        subprocess.run(["pkill", "-f", marker], check=False)
    spun = other_after - other_before
    assert spun >= 10, spun
    assert after.own - before.own <= TICK_SLACK, (after, before)  # none of its ticks are ours
    assert foreign_ticks(before, after) >= spun - TICK_SLACK, (after, before, spun)


TICK_SLACK = 3
"""Ticks the two readings of a pair may differ by: /proc/stat and /proc/PID/stat are read a moment apart, and the
kernel accounts a tick to a core and to a process separately."""


def test_a_clean_row_is_never_run_again(tmp_path):
    run_dir = tmp_path / "a"
    reruns = rerun.Reruns(limit=5)
    assert not reruns.wanted(run_dir, finished(run_dir, 0, transient=0))
    assert not reruns.wanted(run_dir, {"cell_id": CELL, "status": "failed", "start_transient_steps": None})


def test_the_sides_are_named_by_what_tells_them_apart():
    a = {"torch_version": "2.12.1+cpu", "python_version": "3.11.9", "nvbench_git_sha": "1" * 40}
    b = {"torch_version": "2.13.0+cpu", "python_version": "3.11.9", "nvbench_git_sha": "1" * 40}
    assert ab_sides.labels({"a": a, "b": b}) == {"a": "torch 2.12.1+cpu", "b": "torch 2.13.0+cpu"}
    c = dict(a, nvbench_git_sha="abcdef0123456789")
    assert ab_sides.labels({"a": a, "b": c}) == {"a": "nvbench 111111111111", "b": "nvbench abcdef012345"}
    assert ab_sides.labels({"a": a, "b": a}) == {"a": "baseline", "b": "candidate"}
    assert ab_sides.labels({"a": a, "b": a}, {"a": "old", "b": None}) == {"a": "old", "b": "candidate"}
    lines = ab_sides.side_lines({"a": "torch 2.12.1", "b": "torch 2.13.0"},
                                {"a": ab_sides.where("/v1/bin/python", "/src/main", a),
                                 "b": ab_sides.where("/v2/bin/python", "/src/tonight",
                                                     dict(c, nvbench_git_dirty=True))})
    # each side by its interpreter and the code it ran: checkout, commit, dirty or not
    assert lines == ("A: torch 2.12.1 (/v1/bin/python; code /src/main @ 111111111111)",
                     "B: torch 2.13.0 (/v2/bin/python; code /src/tonight @ abcdef012345, dirty)")
    assert ab_sides.where("/v1/bin/python", "/copy", {}) == "/v1/bin/python; code /copy (not in git)"


def checkout(path: Path) -> Path:
    (path / "harness").mkdir(parents=True)
    (path / "harness" / "__init__.py").write_text("")
    (path / "pyproject.toml").write_text("[project]\nname = 'nvbench'\n")
    return path


def test_an_ab_typed_in_a_checkout_whose_code_it_does_not_import_says_so_before_it_starts(tmp_path):
    """The user stands in checkout B (say, a subfolder of it); the nvbench they run imports another checkout's code:
    a side without its own --x-checkout would run that code, and B's change never. One warning, before anything."""
    here, installed = checkout(tmp_path / "B"), checkout(tmp_path / "installed")
    (here / "matrices").mkdir()
    warning = ab_sides.code_warning(here / "matrices", installed, {"a": tmp_path / "A", "b": None})
    assert warning == (f"warning: you are in the checkout {here}, but this nvbench imports its code from {installed}: "
                       f"side(s) B will run {installed}'s code, not {here}'s; give --b-checkout {here} to run it (or "
                       f"run {here}'s own nvbench: python -m harness from {here})")
    assert ab_sides.code_warning(here, here, {"a": tmp_path / "A", "b": None}) is None  # B's code runs
    assert ab_sides.code_warning(here, installed, {"a": tmp_path / "A", "b": here}) is None  # as it was asked to
    assert ab_sides.code_warning(tmp_path, installed, {"a": None, "b": None}) is None  # in no checkout
    # the command says it first, before its own checks of the rest (here: a matrix that does not exist)
    proc = subprocess.run([sys.executable, "-m", "harness", "ab", "none.toml", "--a-checkout", str(ROOT)], cwd=here,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONSAFEPATH="1"))  # as the `nvbench` script
    assert proc.returncode == 2 and proc.stderr.splitlines()[0].startswith(
        f"warning: you are in the checkout {here}, but this nvbench imports its code from {ROOT}: side(s) B will run")


def test_a_wait_budget_is_spent_across_waits_then_a_spoiled_window_ends_the_command_its_job_pending(tmp_path,
                                                                                                   monkeypatch):
    """Issue 58: a neighbour that stays. Each wait spends the command's budget; the wait that spends it ends the
    command (MachineBusy) with the spoiled job pending again (its row superseded), so a --resume runs it."""
    clock = iter(range(0, 1000, 5))  # five seconds a reading
    monkeypatch.setattr(rerun.time, "monotonic", clock.__next__)
    monkeypatch.setattr(rerun, "holders_text", lambda cores: "")
    budget, said = rerun.WaitBudget(limit_s=30), []
    waited = rerun.wait_for_quiet([0], said.append, max_wait_s=10, sample=lambda cores: 0.9, budget=budget)
    assert waited == 10 and budget.waited_s == 10 and not budget.spent  # one wait's bound, 10 s of the 30 spent
    assert said[0].endswith("at most 10 s; 30 s of the 30 s budget left)") and said[-1].endswith(
        "; 10 of the 30 s budget waited): running it again anyway")

    run_dir = tmp_path / "b"
    busy = finished(run_dir, 0, transient=0) | {"foreign_cpu_frac": 0.61, "foreign_cpu_s": 2.0, "cpu_affinity": "0"}
    store.write_table(run_dir / "cells" / f"{job_key(CELL, 0)}.parquet", cell_table([busy]))
    reruns = rerun.Reruns(limit=2, waits=budget)
    try:
        rerun.again(run_dir, busy, reruns, said.append, "B r0",
                    quiet=lambda cores: rerun.wait_for_quiet(cores, said.append, sample=lambda c: 0.9, budget=budget))
    except rerun.MachineBusy as exc:
        assert "still busy when the wait budget (30 s) was spent" in str(exc)
    else:
        raise AssertionError("the spent budget did not end the command")
    assert budget.spent and not (run_dir / "cells" / f"{job_key(CELL, 0)}.parquet").exists()  # pending again
    assert rerun.busy_summary([run_dir]) == ("the machine was busy: 1 of 1 windows taken under interference "
                                             "(other processes 61%-61% of the cell's cores)")
    # spent already: the next spoiled window ends the command before any wait
    store.write_table(run_dir / "cells" / f"{job_key(CELL, 1)}.parquet", cell_table([busy | {"repeat": 1}]))
    try:
        rerun.again(run_dir, busy | {"repeat": 1}, reruns, said.append, "B r1", quiet=lambda cores: 1 / 0)
    except rerun.MachineBusy as exc:
        assert "the wait budget (30 s) is spent" in str(exc)
    else:
        raise AssertionError("a spent budget let a re-run wait")
