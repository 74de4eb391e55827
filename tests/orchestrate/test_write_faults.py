"""A full disk (issue 68), on a real one: a 400 KB tmpfs mounted for the test (root; skipped elsewhere, saying why).
The run stops with one line naming the folder, the bytes the file needed, what is free and the command that goes on,
exit 1, no process of it left, every row written before still readable; once there is room `nvbench run --resume`
finishes every job. `report`, `history` and `dashboard` on a full disk: the same one line, nothing half-written."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from conftest import nvbench, tagged_processes

JOBS = 8


@pytest.fixture
def small_disk(tmp_path):
    """A folder on a 400 KB tmpfs of its own; `grow()` gives it 50 MB, as freeing space would."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(where)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root only): {mounted.stderr.strip()}")

    class Disk:
        path = where

        @staticmethod
        def grow() -> None:
            subprocess.run(["mount", "-o", "remount,size=50m", str(where)], check=True)

    try:
        yield Disk
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    return line


def test_a_full_disk_stops_the_run_in_one_line_and_resume_finishes_it(tiny_matrix, small_disk, tagged):
    matrix = tiny_matrix('backend = ["synthetic"]\nmemory_format = ["nchw", "nhwc"]', repeats=JOBS // 2)
    run = small_disk.path / "run"
    proc, tag = tagged([sys.executable, "-m", "harness", "run", str(matrix), "--out", str(run), "--no-progress"])
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    line = _one_error_line(err)
    assert line.startswith(f"error: {run}/") and ": no space left on device: " in line, line
    assert " bytes free; once there is room: nvbench run --resume " + str(run) in line, line
    assert "needed " in line or "a cell could not write its results" in line, line
    assert tagged_processes(tag) == []  # every process of the run ended with it
    kept = pq.read_table(run / "cells").to_pylist()  # the rows written before stay readable
    assert 0 < len(kept) < JOBS and all(r["status"] == "ok" for r in kept), [r["reason"] for r in kept]
    assert not [p for p in (run / "cells").iterdir() if p.name.startswith(".")]  # no temporary file left behind

    small_disk.grow()
    done = nvbench("run", "--resume", str(run), "--no-progress")
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(run / "cells").to_pylist()
    assert sorted((r["memory_format"], r["repeat"]) for r in rows) == sorted(
        (f, r) for f in ("nchw", "nhwc") for r in range(JOBS // 2)) and {r["status"] for r in rows} == {"ok"}


def test_report_history_and_dashboard_on_a_full_disk_say_it_in_one_line_and_write_nothing(shared_cpu_run,
                                                                                           small_disk, tmp_path):
    disk = small_disk.path
    (disk / "ballast").write_bytes(b"\0" * 1024)
    filler = 0
    while True:  # fill it, leaving less than one page
        try:
            with open(disk / f"ballast{filler}", "wb") as fh:
                fh.write(b"\0" * 16384)
            filler += 1
        except OSError:
            break
    history = tmp_path / "reports" / "history"
    history.mkdir(parents=True)
    (history / "night1").symlink_to(shared_cpu_run)
    for args, folder in ((["report", str(shared_cpu_run), "--out", str(disk / "report")], disk / "report"),
                         (["history", str(history), "--out", str(disk / "trend")], disk / "trend"),
                         (["dashboard", str(tmp_path / "reports"), "--out", str(disk / "site")], disk / "site")):
        proc = nvbench(*args)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        line = _one_error_line(proc.stderr)
        assert ": no space left on device: writing " in line and " needed " in line and " bytes free" in line, line
        assert line.endswith("; once there is room: nvbench " + " ".join(args)), line
        written = [p.name for p in folder.rglob("*") if p.is_file()] if folder.exists() else []
        assert not [name for name in written if name.startswith(".")], written  # no temporary file left


def test_a_log_folder_that_takes_no_file_stops_the_run_in_one_line(tiny_matrix, tmp_path):
    run = tmp_path / "run"
    logs = run / "logs"
    logs.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(logs)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here (root only): {mounted.stderr.strip()}")
    try:  # root writes through any mode bits: a read-only mount is what refuses it
        proc = nvbench("run", str(tiny_matrix(repeats=2)), "--out", str(run), "--no-progress")
    finally:
        subprocess.run(["umount", "-l", str(logs)], check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = _one_error_line(proc.stderr)
    assert line.startswith(f"error: {logs}: read-only file system: ") and line.endswith(
        f".log cannot be written there; once it can be written: nvbench run --resume {run}"), line
    assert not (run / "cells").exists() or not list((run / "cells").iterdir())  # no cell ran, none is called failed
    done = nvbench("run", "--resume", str(run), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert [r["status"] for r in pq.read_table(run / "cells").to_pylist()] == ["ok", "ok"]


def test_a_truncated_row_file_is_named_and_the_other_rows_still_read(shared_cpu_run, tmp_path):
    import shutil

    from harness.results import folded

    run = tmp_path / "run"
    shutil.copytree(shared_cpu_run, run)
    folded.unfold_run(run)  # a run in flight: a file a job
    files = sorted((run / "cells").glob("*.parquet"))
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])  # cut by hand
    proc = nvbench("report", str(run), "--out", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr
    (warning,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: ")]
    assert warning.startswith(f"warning: {files[0]}: not a readable nvbench result table (") and warning.endswith(
        "its row is left out, the other rows stand"), warning
    verdicts = pq.read_table(tmp_path / "report" / "verdicts.parquet").to_pylist()
    assert len(verdicts) == len(files) - 1  # every other job's cell judged (one row a cell in this run)


def test_an_ab_on_a_full_disk_stops_in_one_line_and_its_resume_finishes_the_pairs(tiny_matrix, small_disk, tagged,
                                                                                   quiet_machine):
    out = small_disk.path / "ab"
    proc, tag = tagged([sys.executable, "-m", "harness", "ab", str(tiny_matrix(repeats=3)), "--out", str(out),
                        "--work-repeats", "0", "--kernel-repeats", "0"], env=quiet_machine)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    line = _one_error_line(err)
    assert line.endswith(f"; once there is room: nvbench ab --resume {out}"), line
    assert tagged_processes(tag) == []
    small_disk.grow()
    done = nvbench("ab", "--resume", str(out), env=quiet_machine)
    assert done.returncode in (0, 3), done.stderr  # the verdict is not what is tested: the pairs are
    for side in "ab":
        rows = [r for r in pq.read_table(out / side / "cells").to_pylist() if r["status"] != "superseded"]
        assert sorted(r["repeat"] for r in rows) == [0, 1, 2] and {r["status"] for r in rows} == {"ok"}


def test_a_night_whose_disk_fills_stops_at_its_run_in_one_line(tiny_matrix, small_disk):
    import os

    from conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVBENCH_", "GITHUB_"))}
    env |= {"NVBENCH_MATRIX": str(tiny_matrix('backend = ["synthetic"]\nmemory_format = ["nchw", "nhwc"]')),
            "NVBENCH_REPORTS": str(small_disk.path), "NVBENCH_RUN_ID": "night1", "NVBENCH_REPEATS": "4",
            "NVBENCH_WORK_REPEATS": "0"}
    proc = subprocess.run(["bash", str(ROOT / "ci" / "nightly.sh")], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    (error,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert ": no space left on device: " in error and f"nvbench run --resume {small_disk.path / 'night1'}" in error
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"nightly: the run stopped before its end: nothing is judged tonight; once fixed, finish it "
                    f"with: nvbench run --resume {small_disk.path / 'night1'}"), last
