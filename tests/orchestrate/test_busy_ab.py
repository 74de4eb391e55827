"""A neighbour that stays (issue 58): beside a busy loop on the cell's own cores an A/B ends by itself once its budget
for waiting is spent, exit 3, with one line that names the interference and decides nothing; after the neighbour has
gone, `nvbench ab --resume` finishes the same pairs. (The budget's arithmetic is tested on a fake clock in
tests/orchestrate/test_rerun.py.)"""

from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from conftest import nvbench

from harness.orchestrate.workflows import ab


@pytest.mark.documented("nvbench ab --resume reports/<ab>", bound_s=600)
def test_an_ab_beside_a_neighbour_that_stays_ends_undecided_and_resumes_on_the_quiet_machine(tiny_matrix, tmp_path,
                                                                                            documented_run,
                                                                                            quiet_machine):
    out = tmp_path / "ab"
    # a busy loop on this test's cores (it inherits them, as the cells do): every window the A/B takes is shared
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = nvbench("ab", str(tiny_matrix()), "--repeats", "3", "--fdr", "0.2", "--work-repeats", "0",
                       "--busy-wait-s", "4", "--out", str(out), timeout=300)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert busy.returncode == 3, busy.stdout + busy.stderr
    (line,) = [ln for ln in busy.stdout.splitlines() if ln.startswith("the machine was busy: ")]
    assert line.endswith("; undecided") and " windows taken under interference (other processes " in line, line
    # who holds the cores, said while waiting: the neighbour, unless three processes of others (a shared runner's
    # other jobs) used more than it over that half second, as /proc counted
    waits = [ln for ln in busy.stderr.splitlines() if "waiting for the neighbour to leave" in ln]
    assert waits and all(f"(pid {neighbour.pid})" in w or w.count("(pid ") == 3 for w in waits), waits
    assert f"nvbench ab --resume {out}" in busy.stderr
    assert not (out / "report").exists()  # nothing called a regression, an improvement or anything else
    assert ab.stopped_busy(out) == line  # as data, where bisect reads it

    # the neighbour has gone: on a shared runner another job may still be there, so the quiet is made (a constructed
    # /proc/stat whose cores stay idle), never hoped for
    done = documented_run(["ab", "--resume", str(out)], env=quiet_machine)
    assert done.returncode == 0, done.stdout + done.stderr
    (verdict,) = pq.read_table(out / "report" / "verdicts.parquet").to_pylist()
    assert verdict["num_candidate"] == verdict["num_baseline"] == 3
    assert ab.stopped_busy(out) is None  # the resumed A/B ended on a quiet machine
    for side in ("a", "b"):
        rows = pq.read_table(out / side / "cells").to_pylist()
        assert sorted(r["repeat"] for r in rows if r["status"] == "ok") == [0, 1, 2]
    assert any(r["status"] == "superseded" for side in ("a", "b") for r in pq.read_table(out / side / "cells").to_pylist())
