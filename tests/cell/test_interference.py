"""The interference meter: /proc/stat's per-core ticks less the cell's own session's CPU time, over exactly the
window; a real neighbour on this machine's cores is seen, the cell's own work is not."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

from harness.catalogue import col
from harness.catalogue.cells import INTERFERENCE_THRESHOLD
from harness.host.meter import (
    Counters,
    InterferenceMeter,
    foreign_share,
    read_proc_stat,
    job_cpu_ticks,
)
from harness.results.interference import interference_reason

STAT = """cpu  100 0 50 1000 5 0 0 0 0 0
cpu0 10 1 5 100 2 3 4 6 0 0
cpu1 20 0 10 200 0 0 0 0 0 0
intr 1 2 3
"""


def test_proc_stat_sums_the_cells_cores_only():
    # cpu0: busy = user 10 + nice 1 + system 5 + irq 3 + softirq 4 + steal 6 = 29, total 131, steal 6
    assert read_proc_stat([0], STAT) == (29, 131, 6)
    assert read_proc_stat([0, 1], STAT) == (29 + 30, 131 + 230, 6)


def test_the_share_is_others_busy_time_over_the_cores_time():
    a, b = Counters(0.0, 100, 1000, 0, 40), Counters(1.0, 160, 1200, 10, 80)  # 60 busy, 40 of them ours, 200 ticks
    assert foreign_share(a, b) == pytest.approx(20 / 200)
    assert foreign_share(a, Counters(1.0, 130, 1200, 0, 90)) == 0.0  # tick rounding never reads negative
    assert foreign_share(a, a) is None
    assert interference_reason(0.61, 0.0) == "other processes used 61% of this cell's cores"
    assert interference_reason(INTERFERENCE_THRESHOLD / 2, None) is None
    # a share of a short window is a few ticks: under MIN_INTERFERENCE_S of CPU time it is no interference
    assert interference_reason(0.125, 0.125, foreign_s=0.04, steal_s=0.04) is None
    assert interference_reason(0.125, None, foreign_s=0.06) == "other processes used 12% of this cell's cores"


def test_per_step_shares_follow_the_samples_around_each_step():
    samples = iter([Counters(0.0, 0, 0, 0, 0), Counters(1.0, 50, 100, 0, 50),     # quiet second
                    Counters(2.0, 150, 200, 0, 100), Counters(3.0, 200, 300, 0, 150)])  # second 2: 50 % others
    meter = InterferenceMeter([0], read=lambda: next(samples), interval_s=60)
    meter.start()
    meter._samples += [next(samples), next(samples)]  # what the thread would have read
    meter.stop()
    shares = meter.per_step(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(shares, [0.0, 0.5, 0.0])
    assert meter.columns()[col.foreign_cpu_frac] == pytest.approx(50 / 300)


CELL = """
import json, os, subprocess, sys, time
from harness.catalogue import col
from harness.host.meter import InterferenceMeter, job_cpu_ticks

core = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {core})


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


own = InterferenceMeter([core]).start()
spin(0.6)  # the cell's own work
quiet = own.stop().columns()[col.foreign_cpu_frac]
busy_loop = ("import time\\nprint('ready', flush=True)\\n"
             "end = time.perf_counter() + 3\\nwhile time.perf_counter() < end: pass")
neighbour = subprocess.Popen([sys.executable, "-c", busy_loop], start_new_session=True,  # not the cell's
                             stdout=subprocess.PIPE, text=True)
assert neighbour.stdout.readline() == "ready\\n"  # spinning from now on, however long its start took
busy = InterferenceMeter([core]).start()
spin(1.0)
loaded = busy.stop().columns()[col.foreign_cpu_frac]
neighbour.wait(timeout=30)
print(json.dumps({"quiet": quiet, "loaded": loaded, "own": job_cpu_ticks()}))
"""


def test_a_neighbour_on_the_cells_core_is_seen_and_the_cells_own_work_is_not():
    # in a session of its own, as the runner starts every cell: its session is its job
    proc = subprocess.run([sys.executable, "-c", CELL], capture_output=True, text=True, timeout=60,
                          start_new_session=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["own"] > 0 and got["quiet"] is not None
    # the neighbour shares the one core: it takes about half of it; the cell's own spinning counts for nothing
    assert got["loaded"] > max(0.25, got["quiet"]), got


def _proc(tmp_path, table):
    """A fake /proc: pid -> (ppid, sid, utime, stime)."""
    for pid, (ppid, sid, ut, st) in table.items():
        (tmp_path / str(pid)).mkdir()
        # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (py thon) S {ppid} {sid} {sid} 0 0 0 0 0 0 0 {ut} {st} 0 0\n")
    return tmp_path


def test_a_torchrun_job_counts_its_agent_and_every_rank_as_its_own(tmp_path):
    proc = _proc(tmp_path, {100: (1, 100, 5, 5),        # the agent: the job's session (the runner made it)
                            101: (100, 101, 40, 10),   # rank 0, a session of its own (torchrun's way)
                            102: (100, 102, 30, 10),   # rank 1
                            103: (101, 101, 7, 3),     # a loader worker of rank 0
                            200: (1, 200, 99, 1)})     # a neighbour
    assert job_cpu_ticks(proc, sid=101, agent_sid=100) == 10 + 50 + 40 + 10
    assert job_cpu_ticks(proc, sid=101) == 50 + 10  # outside torchrun: its own session only


def test_a_process_that_ends_as_it_is_read_is_passed_over(tmp_path):
    """/proc/PID/stat of a process exiting under the scan can read back empty or cut short (a calibration's
    neighbours end and start all the time): it is gone, not an error that fails the cell measuring."""
    proc = _proc(tmp_path, {100: (1, 100, 5, 5), 101: (100, 100, 7, 3)})
    (proc / "102").mkdir()
    (proc / "102" / "stat").write_text("")
    (proc / "103").mkdir()
    (proc / "103" / "stat").write_text("103 (py) Z 100 100")
    assert job_cpu_ticks(proc, sid=100) == 10 + 10
