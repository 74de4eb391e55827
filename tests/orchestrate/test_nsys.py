"""`nvbench profile --tool nsys` for real on the CPU machine: Debian's Nsight Systems (ci/system-deps.sh
installs it where apt can) records a tiny cell, the report is imported and exported to SQLite, and the
timeline read back with sqlite3 reads like the code: cell > warmup | measure > step > data, forward,
backward (per micro-batch), optimizer; one step range per step run, none left open."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest
from conftest import nvbench

from harness.analysis.load import timeline
from harness.matrix.cells import expand, job_key
from harness.matrix.parse import load_matrix

needs_nsys = pytest.mark.skipif(shutil.which("nsys") is None,
                                reason="no nsys on PATH: ci/system-deps.sh installs Debian's nsight-systems where "
                                       "apt can (contrib/non-free)")

STEPS, ACCUM = 3, 2
NSIGHT_SESSION_LOST = ("Connection to the Agent lost", "Local Endpoint is not available")
"""Nsight's own session failing beside another job (its agent, its local IPC endpoint), never the cell's."""
"""Nsight Systems' own words when its session with the profiled process broke (nsys's failure, not the cell's)."""
# The names as a timeline shows them, written out: Nsight filters and docs/profiling.md rely on them, so a
# renamed range must fail here (harness/cell/instruments/timing.py holds them).
CELL, WARMUP, MEASURE, STEP = "cell", "warmup", "measure", "step"
DATA, FORWARD, BACKWARD, OPTIMIZER = "data", "forward", "backward", "optimizer"


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    import textwrap

    from conftest import TINY

    root = tmp_path_factory.mktemp("nsys")
    matrix = root / "tiny.toml"
    matrix.write_text(TINY.format(axes=textwrap.dedent(f'backend = ["synthetic"]\ngrad_accum = [{ACCUM}]'),
                                  repeats=1, timeout=300, cache=root / "cache", nvtx="false", device="cpu"))
    for attempt in range(3):
        out = root / f"run{attempt}"
        proc = nvbench("profile", str(matrix), "--tool", "nsys", "--steps", str(STEPS), "--out", str(out))
        # Nsight's own session, not the cell: beside another job on a 2-core runner its agent's connection was lost
        # once, and once its local endpoint was not available (2026-12-07, 422af3c); a fresh session is the same test
        if proc.returncode == 0 or not any(said in proc.stderr for said in NSIGHT_SESSION_LOST):
            break
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (cell,) = expand(load_matrix(matrix))
    return out / "profile", job_key(cell.cell_id, 0), proc


@needs_nsys
def test_the_report_is_imported_exported_and_summarised(profiled):
    folder, key, proc = profiled
    report, sqlite = folder / f"{key}.nsys-rep", folder / f"{key}.sqlite"
    assert proc.stdout.split() == [str(report), str(sqlite)] and report.is_file() and sqlite.is_file()
    assert not (folder / f"{key}.qdstrm").exists()  # imported, then removed
    summary = proc.stderr.split("NVTX ranges of the measured window", 1)[1].splitlines()
    counts = {line.split()[0]: int(line.split()[1]) for line in summary[2:] if line.split()[:1]
              and line.split()[0] in (STEP, FORWARD, OPTIMIZER)}
    assert counts == {STEP: STEPS, FORWARD: STEPS * ACCUM, OPTIMIZER: STEPS}
    (row,) = pq.read_table(folder / "cells").to_pylist()
    assert row["status"] == "ok" and row["profile_tool"] == "nsys"


@needs_nsys
def test_the_timeline_reads_like_the_code(profiled):
    folder, key, _ = profiled
    ranges = timeline.read_ranges(folder / f"{key}.sqlite")
    assert ranges and all(r.end_ns is not None for r in ranges), "a range was left open"
    (row,) = pq.read_table(folder / "cells").to_pylist()
    warmup_steps = row["warmup_steps_used"]

    (cell,) = [i for i, r in enumerate(ranges) if r.name == CELL]
    assert ranges[cell].parent is None
    phases = [r.name for r in timeline.children(ranges, cell)]
    assert phases[:2] == [WARMUP, MEASURE], phases  # warmup, then the window, apart

    for phase, expected_steps in ((WARMUP, warmup_steps), (MEASURE, STEPS)):
        (index,) = [i for i, r in enumerate(ranges) if r.name == phase]
        steps = [i for i, r in enumerate(ranges) if r.parent == index]
        assert [ranges[i].name for i in steps] == [STEP] * expected_steps
        for i in steps:  # each step's phases nested inside it, in the order the loop runs them
            inner = [r.name for r in timeline.children(ranges, i)]
            assert inner == [DATA, FORWARD, BACKWARD] * ACCUM + [OPTIMIZER], inner
            step = ranges[i]
            assert all(step.start_ns <= r.start_ns and r.end_ns <= step.end_ns
                       for r in timeline.children(ranges, i))
    assert sum(r.name == STEP for r in ranges) == warmup_steps + STEPS


def test_a_file_that_is_not_a_timeline_is_one_clear_error(tmp_path):
    bogus = tmp_path / "x.sqlite"
    bogus.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(timeline.TimelineReadError, match="x.sqlite"):
        timeline.read_ranges(bogus)


def test_a_range_the_exporter_closed_at_the_capture_end_counts_as_open(tmp_path):
    import sqlite3

    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, textId INT, domainId INT, "
                "globalTid INT)")
    con.execute("CREATE TABLE ANALYSIS_DETAILS (duration INT)")
    con.execute("INSERT INTO ANALYSIS_DETAILS VALUES (1000)")
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, NULL, 1, 7)", [
        (0, None, timeline.DOMAIN_CREATE, "nvbench"), (10, 1000, timeline.PUSH_POP, "cell"),
        (20, 30, timeline.PUSH_POP, "step")])
    con.commit()
    con.close()
    cell, step = timeline.read_ranges(path)
    assert cell.name == "cell" and cell.end_ns is None  # never popped: nsys ended it with the capture
    assert step.end_ns == 30 and step.parent == 0
