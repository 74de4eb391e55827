"""A stopped command leaves nothing behind: SIGTERM, SIGINT and SIGHUP end a command as Ctrl-C does (its
cleanup runs, exit 130), a child command dies with its parent even when the parent is SIGKILLed, and a real
`nvbench run` and `nvbench history`, stopped at a random (seeded) moment, leave no process and resume."""

from __future__ import annotations

import signal
import sys
import textwrap
import time

import pyarrow.parquet as pq
import pytest
from conftest import catches, first_cell, kill_plan, stop_and_check, tagged_processes, wait_for

COMMAND = textwrap.dedent("""
    import sys, time
    from harness.orchestrate.session import stopping

    def command():
        try:
            print("ready", flush=True)
            time.sleep(60)
            return 0
        finally:
            print("cleaning", flush=True)
            time.sleep(1.0)  # a second signal arrives here: the cleanup must still finish
            print("cleaned up", flush=True)

    sys.exit(stopping.run(command))
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_ends_a_command_as_ctrl_c_does_and_a_second_one_does_not_cut_its_cleanup(sig, tagged):
    proc, tag = tagged([sys.executable, "-c", COMMAND])
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(sig)
    assert proc.stdout.readline() == "cleaning\n"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and out == "cleaned up\n", (proc.returncode, out, err)
    assert err == f"interrupted ({sig.name})\n"


PARENT = textwrap.dedent("""
    import sys
    from harness.orchestrate.session import stopping

    child = [sys.executable, "-c", "import time; time.sleep(120)"]
    sys.exit(stopping.run(lambda: stopping.run_child(child).returncode))
""")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_a_child_command_ends_with_its_parent_even_a_sigkilled_one(sig, tagged):
    """bisect's `nvbench ab` is such a child: a bisect killed from outside once left its A/B running."""
    parent, tag = tagged([sys.executable, "-c", PARENT])
    wait_for("the child command", lambda: len(tagged_processes(tag)) == 2, timeout_s=60, proc=parent)
    time.sleep(0.5)
    code, _ = stop_and_check(parent, tag, sig)
    assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 130)


@pytest.mark.documented("nvbench run --resume reports/<run_id>", bound_s=300)
def test_a_stopped_run_leaves_no_process_and_resumes(tiny_matrix, tmp_path, documented_run, tagged):
    sig, moment = kill_plan("nvbench run")
    out = tmp_path / "run"
    # four repeats (>= 4 cells of ~4 s): alive at any moment of the plan (0-3 s after its first cell) on any
    # machine; with two, a fast one had finished before a late stop came
    proc, tag = tagged([sys.executable, "-m", "harness", "run", str(tiny_matrix(repeats=4)), "--out", str(out),
                         "--no-progress"])
    wait_for("nvbench run's first cell", lambda: first_cell(tag), timeout_s=60, proc=proc)
    time.sleep(moment)
    code, err = stop_and_check(proc, tag, sig)
    assert code == 130 and f"interrupted; finish with: nvbench run --resume {out}" in err, (sig, moment, err)
    done = len(list((out / "cells").glob("*.parquet"))) if (out / "cells").is_dir() else 0
    resumed = documented_run(["run", "--resume", str(out)])
    assert resumed.returncode == 0, resumed.stderr
    assert f"({4 - done} of 4 jobs to run)" in resumed.stderr
    rows = pq.read_table(out / "cells").to_pylist()
    assert sorted(r["repeat"] for r in rows) == [0, 1, 2, 3] and {r["status"] for r in rows} == {"ok"}


@pytest.mark.documented("nvbench history reports/history", bound_s=120)
def test_a_stopped_history_leaves_no_process_and_runs_again(shared_cpu_run, tmp_path, documented_run, tagged):
    import json
    import shutil

    history = tmp_path / "history"
    history.mkdir()
    (history / "night1").symlink_to(shared_cpu_run)
    # forty nights more, copies of it: enough reading that the stop meets the command at work whatever the
    # machine (one night beside a busy loop, all of it busy, was read before the test saw its handlers)
    for k in range(2, 42):
        night = shutil.copytree(shared_cpu_run, history / f"night{k}")
        manifest = json.loads((night / "manifest.json").read_text())
        manifest |= {"run_id": f"night{k}", "created_at": f"2026-02-{k % 28 + 1:02d}T{k % 24:02d}:00:00+00:00"}
        (night / "manifest.json").write_text(json.dumps(manifest))
    sig, moment = kill_plan("nvbench history")
    proc, tag = tagged([sys.executable, "-m", "harness", "history", str(history)])
    wait_for("nvbench history's stop handlers", lambda: catches(proc.pid, sig), timeout_s=60, proc=proc)
    time.sleep(moment / 3)  # it reads and writes for about a second
    code, err = stop_and_check(proc, tag, sig)
    if code == 130:
        assert err.strip().splitlines()[-1] == f"interrupted ({sig.name})", err
    else:  # a quick reader may be done before the signal, or the signal met the interpreter's exit after it
        assert code in (0, 3, -sig) and "Traceback" not in err, (code, err)  # 3: nothing to judge, below
    again = documented_run(["history", str(history)])
    # 3 where the one night's windows were all taken under interference (the suite beside another job): said so
    assert again.returncode == 0 or (again.returncode == 3 and again.stdout.splitlines()[-1].endswith(
        "all taken under interference, left out: nothing to judge")), again.stdout + again.stderr
    assert (history / "trend" / "history.html").is_file()
