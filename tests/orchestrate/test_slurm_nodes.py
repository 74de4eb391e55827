"""The SLURM executor across two nodes: a real two-node SLURM on this machine (slurm_cluster.py, nodes=2: each
node a network namespace with its own slurmd), a torchrun group spanning both, and what becomes of it when a
node or a rank fails. Started and torn down by this module; nothing of it may be left running after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import ROOT, TINY, nvbench
from slurm_cluster import SlurmCluster, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason(2) is not None, reason=unavailable_reason(2) or "")

TWO_NODES = """
[launch]
nnodes = 2
[executor]
kind = "slurm"
exclusive = false
cpus_per_task = 1
max_parallel = 4
poll_s = 0.5
time_margin_s = 0
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SlurmCluster(Path(tmp_path_factory.mktemp("slurm2")), nodes=2, slurmd_timeout_s=10)
    c.start(timeout_s=60)
    try:
        yield c
    finally:
        c.stop()
        assert c.leftovers() == [], c.leftovers()  # no slurmd, no namespace, no bridge left behind


def matrix(root: Path, axes: str = "world_size = [1]", *, timeout: float = 120, repeats: int = 1,
           executor: str = TWO_NODES) -> Path:
    path = root / "matrix.toml"
    path.write_text(TINY.format(axes=textwrap.dedent(axes), repeats=repeats, timeout=timeout, cache=root / "cache",
                                nvtx="false", device="cpu") + executor)
    return path


def rows(run: Path) -> list[dict]:
    return [r for f in sorted((run / "cells").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


@pytest.mark.world_size  # in the gate: the cluster and the cell took 36 s on the 2-core machine
def test_a_cell_across_two_nodes_trains_as_one_group_and_counts_its_all_reduces(cluster, tmp_path):
    from harness.models import build_model

    m = matrix(tmp_path)
    run = tmp_path / "run"
    proc = nvbench("run", str(m), "--out", str(run), "--no-progress", "--work-repeats", "1", env=cluster.env,
                   timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = rows(run)
    assert row["status"] == "ok", row["reason"]
    assert row["nnodes"] == 2 and row["nodes"] == "node1,node2"
    assert row["slurm_job_id"] and row["slurm_job_id"].isdigit()
    # the whole group's throughput: both ranks' images over the common window
    assert row["images_per_step"] == 4 * 2 and row["images_measured"] == 3 * 4 * 2
    assert row["throughput_img_per_s"] == pytest.approx(row["images_measured"] / row["window_s"], rel=1e-12)
    steps = pq.read_table(run / "steps").to_pylist()
    assert sorted({s["rank"] for s in steps}) == [0, 1]
    # counted through the same SLURM across the same two nodes: DDP's all-reduce carries every trainable
    # parameter's fp32 gradient once a step, as on one node
    (counted,) = rows(run / "counted")
    assert (counted["status"], counted["nodes"], counted["nnodes"]) == ("ok", "node1,node2", 2), counted["reason"]
    assert counted["slurm_job_id"].isdigit() and counted["slurm_job_id"] != row["slurm_job_id"]
    work = [r for r in pq.read_table(run / "work.parquet").to_pylist() if r["rank"] == 0]
    calls = [r for r in work if r["counter"] == "collectives" and r["key"].startswith("c10d::allreduce")]
    assert calls, work
    grads = sum(p.numel() for p in build_model("resnet18", num_classes=10).parameters() if p.requires_grad)
    reduced = sum(r["count"] for r in work if r["counter"] == "collective_bytes" and "all_reduce" in r["key"])
    assert reduced == calls[0]["steps"] * 4 * grads, (reduced, calls[0]["steps"], grads)


def start_run(*args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", "run", *args, "--no-progress"], cwd=ROOT,
                            env=os.environ | env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def ranks_in_hang(cluster: SlurmCluster, node: str) -> list[int]:
    """The cell's ranks on `node` (processes of its namespace), when every one sleeps in the injected hang: the
    window has opened, past every collective of the set-up and the warm-up (harness/cell/faults.py)."""
    ranks = []
    for pid in cluster.network.pids(node):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            wchan = Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            continue
        if b"harness.cell" in argv and b"torch.distributed.run" not in argv:
            if wchan != "hrtimer_nanosleep":
                return []
            ranks.append(pid)
    return ranks


@pytest.fixture(scope="module")
def node_lost(cluster, tmp_path_factory):
    """A run of two two-node cells; the first hangs in its window and its second node dies there (slurmd and
    every process on it killed). The node comes back once the first cell's row is written, so the second cell
    runs; then `nvbench run --resume`. Returns (run, first exit status, first output, resumed process, the
    first row as it was before the resume)."""
    root = tmp_path_factory.mktemp("node-lost")
    m = matrix(root, "grad_accum = [1, 2]", executor=TWO_NODES.replace("max_parallel = 4", "max_parallel = 1"))
    run = root / "run"  # one job in flight at a time: the node is lost under the first cell only
    proc = start_run(str(m), "--out", str(run), env=cluster.env | {"NVBENCH_FAULT": "grad_accum=1:hang"})
    try:
        wait_for(lambda: ranks_in_hang(cluster, "node1") and ranks_in_hang(cluster, "node2"), 180,
                 "both ranks of the first cell to hang in its window")
        cluster.kill_node("node2")
        wait_for(lambda: any("_ga1_" in r["cell_id"] for r in rows(run)), 120, "the first cell's row")
        first = next(r for r in rows(run) if "_ga1_" in r["cell_id"])
        cluster.start_slurmd("node2")
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    cluster.wait_idle(60)
    resumed = nvbench("run", "--resume", str(run), "--no-progress", env=cluster.env, timeout=300)
    return run, proc.returncode, out, resumed, first


@pytest.mark.slow
def test_a_node_lost_mid_cell_is_its_rows_node_fail_naming_the_node_and_the_run_goes_on(node_lost):
    run, code, out, _, first = node_lost
    assert first["status"] == "crashed", (first["reason"], out)
    job = first["slurm_job_id"]
    assert first["reason"].startswith(f"SLURM job {job} NODE_FAIL"), first["reason"]
    assert "node2" in first["reason"] and "node1" not in first["reason"], first["reason"]
    assert first["nodes"] == "node1,node2"
    assert code == 1, out  # the matrix completed, with a failure
    assert f"a node of SLURM job {job} failed; `nvbench run --resume {run}` runs it again" in " ".join(out.split())
    second = next(r for r in rows(run) if "_ga2_" in r["cell_id"])
    assert second["status"] == "ok" and second["nodes"] == "node1,node2", second["reason"]


@pytest.mark.slow
def test_resume_runs_again_only_the_job_whose_node_was_lost(node_lost):
    run, _, _, resumed, first = node_lost
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "(1 of 2 jobs to run)" in resumed.stderr
    got = rows(run)
    assert len(got) == 3, [(r["cell_id"], r["status"]) for r in got]
    kept = next(r for r in got if r["status"] == "superseded")
    again = next(r for r in got if "_ga1_" in r["cell_id"] and r["status"] != "superseded")
    ga2 = next(r for r in got if "_ga2_" in r["cell_id"])
    assert (kept["cell_id"], kept["rerun_cause"], kept["slurm_job_id"], kept["reason"]) == (
        first["cell_id"], "node lost", first["slurm_job_id"], first["reason"])
    assert (run / "cells" / f"{first['cell_id']}-r0-superseded-lost1.parquet").exists()
    assert again["status"] == "ok" and again["nodes"] == "node1,node2", again["reason"]
    assert int(again["slurm_job_id"]) > int(ga2["slurm_job_id"])  # the only job the resume submitted
    ga1 = f"{first['cell_id']}-r0"
    assert f"{ga1}: its SLURM node was lost" in resumed.stdout + resumed.stderr
    assert not (run / "lost-nodes.json").exists()


ONE_NODE_JOBS = """
[executor]
kind = "slurm"
max_parallel = 2
poll_s = 0.5
time_margin_s = 0
"""


@pytest.mark.slow
def test_repeats_spread_over_both_nodes_are_named_in_the_reports_warning_and_pinned_ones_are_not(cluster, tmp_path):
    """Five repeats of a one-node cell, whole nodes each (exclusive, the default) two at a time: SLURM spreads
    them over node1 and node2. Pinned with --nodelist, two such runs hold one node and compare without it."""
    def run(name: str, executor: str) -> Path:
        root = tmp_path / name
        root.mkdir()
        out = root / "run"
        proc = nvbench("run", str(matrix(root, "grad_accum = [1]", repeats=5, executor=executor)), "--out", str(out),
                       "--no-progress", env=cluster.env, timeout=400)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return out

    pinned = ONE_NODE_JOBS.replace("max_parallel = 2", 'max_parallel = 2\nexclusive = false\ncpus_per_task = 1\n'
                                   'extra_args = ["--nodelist=node1"]')
    spread, base, again = run("spread", ONE_NODE_JOBS), run("pinned", pinned), run("pinned-again", pinned)
    assert sorted({r["nodes"] for r in rows(spread)}) == ["node1", "node2"]
    assert {r["nodes"] for r in rows(base) + rows(again)} == {"node1"}
    mixed = nvbench("report", str(base), str(spread), "--out", str(tmp_path / "report-spread"), env=cluster.env)
    cell = rows(spread)[0]["cell_id"]
    said = " ".join(mixed.stderr.split())  # the console wraps it to its width
    assert "1 cell(s) ran on more than one node" in said, mixed.stdout + mixed.stderr
    assert f"{cell} (candidate on node1, node2; baseline on node1)" in said
    one = nvbench("report", str(base), str(again), "--out", str(tmp_path / "report-pinned"), env=cluster.env)
    assert one.returncode == 0 and "more than one node" not in one.stdout + one.stderr, one.stdout + one.stderr


def cell_processes(cluster: SlurmCluster) -> list[str]:
    """The cell's processes (torchrun's agents, the ranks) still alive on either node."""
    left = []
    for node in cluster.node_names():
        for pid in cluster.network.pids(node):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"harness.cell" in argv:
                words = argv.replace(b"\0", b" ").decode(errors="replace")
                left.append(f"{node}: {words[:120]}")
    return left


@pytest.mark.slow
def test_a_rank_raising_on_the_second_node_ends_both_nodes_tasks_and_its_row_names_rank_and_node(cluster, tmp_path):
    """c10d hands out ranks in the sorted order of the agents' host names: rank 1 runs on node2."""
    timeout = 60
    m = matrix(tmp_path, "grad_accum = [1, 2]", timeout=timeout)
    run = tmp_path / "run"
    proc = nvbench("run", str(m), "--out", str(run), "--no-progress", env=cluster.env | {
        "NVBENCH_FAULT": "grad_accum=1:raise@1"}, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the matrix completed, with a failure
    got = {r["grad_accum"]: r for r in rows(run)}
    raised = got[1]
    assert (raised["status"], raised["reason"]) == (
        "failed", f"rank 1 on node2: RuntimeError: injected fault: raise (SLURM job {raised['slurm_job_id']})")
    assert raised["nodes"] == "node1,node2" and raised["duration_s"] < timeout
    assert got[2]["status"] == "ok", got[2]["reason"]  # nothing else lost
    wait_for(lambda: not cell_processes(cluster), 15, "no process of the cell left on either node")


@pytest.mark.slow
def test_a_node_that_never_joins_the_rendezvous_fails_the_cell_within_its_timeout_naming_the_rendezvous(cluster,
                                                                                                       tmp_path):
    """node2's task is frozen (SIGSTOP) as it starts, before its torchrun agent can join: node1's agent waits at
    the c10d rendezvous for its join timeout (half the cell's timeout), not for ever."""
    timeout = 60
    m = matrix(tmp_path, "grad_accum = [1]", timeout=timeout)
    run = tmp_path / "run"
    proc = start_run(str(m), "--out", str(run), env=cluster.env)
    frozen = []
    try:
        def freeze_node2():
            for pid in cluster.network.pids("node2"):
                try:
                    if b"harness.cell" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        os.kill(pid, signal.SIGSTOP)
                        frozen.append(pid)
                except OSError:
                    continue
            return frozen

        deadline = time.monotonic() + 120
        while not freeze_node2() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert frozen, "node2's task never started"
        out, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
    (row,) = rows(run)
    assert row["status"] == "failed", (row["reason"], out)
    assert row["reason"].startswith(f"the c10d rendezvous did not complete within {timeout // 2} s"), row["reason"]
    assert row["duration_s"] < timeout
    wait_for(lambda: not cell_processes(cluster), 15, "no process of the cell left on either node")

