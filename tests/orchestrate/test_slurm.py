"""The SLURM executor against a real single-node SLURM (slurm_cluster.py) started for this module.

The cluster is the kind the executor must cope with without being configured for it: no accounting (sacct
fails), the default partition named "batch", MinJobAge 2 s (finished jobs leave the controller at once).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import ROOT, TINY, nvbench
from slurm_cluster import SlurmCluster, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")

EXECUTOR = """
[executor]
kind = "{kind}"
exclusive = false
cpus_per_task = 1
max_parallel = 4
poll_s = 0.5
time_margin_s = 0
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = SlurmCluster(Path(tmp_path_factory.mktemp("slurm")))
    cluster.start(timeout_s=60)
    try:
        yield cluster
    finally:
        cluster.stop()


def matrix(root: Path, axes: str, *, kind: str = "slurm", timeout: float = 120, repeats: int = 1) -> Path:
    path = root / "matrix.toml"
    text = TINY.format(axes=textwrap.dedent(axes), repeats=repeats, timeout=timeout, cache=root / "cache",
                       nvtx="false", device="cpu")
    path.write_text(text + EXECUTOR.format(kind=kind))
    return path


def rows(run: Path) -> dict[tuple[int, int], dict]:
    """(grad_accum, repeat) -> row."""
    out = {}
    for f in (run / "cells").glob("*.parquet"):
        for r in pq.read_table(f).to_pylist():
            out[(r["grad_accum"], r["repeat"])] = r
    return out


def start_run(*args: str, env: dict) -> subprocess.Popen:
    """`nvbench run` as a terminal's foreground job starts it: SIGINT at its default, so that Ctrl-C (the test's
    SIGINT) reaches Python even when the suite itself runs as a background job (`.ci/run &`), whose children a
    non-interactive shell starts with SIGINT ignored."""
    return subprocess.Popen([sys.executable, "-m", "harness", "run", *args, "--no-progress"], cwd=ROOT,
                            env=os.environ | env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def inflight(run: Path) -> dict:
    try:
        return json.loads((run / "inflight.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def job_state(slurm: SlurmCluster, job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"], env=os.environ | slurm.env,
                         capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def faulty_run(slurm, tmp_path_factory):
    """One run of four cells: two finish, one hangs past its SLURM time limit (1 min), one hangs until the
    test scancels it while it runs. Returns (run folder, exit status, output, the cancelled job's id)."""
    root = tmp_path_factory.mktemp("faulty")
    m = matrix(root, "grad_accum = [1, 2, 3, 4]", timeout=20)
    run = root / "run"
    proc = start_run(str(m), "--out", str(run), env=slurm.env | {"NVBENCH_FAULT": "grad_accum=3:hang;grad_accum=4:hang"})
    try:
        def running_hang():
            for key, rec in inflight(run).items():
                if "_ga4_" in key and rec.get("job_id") and job_state(slurm, rec["job_id"]) == "RUNNING":
                    return rec["job_id"]
            return None

        cancelled = wait_for(running_hang, 150, "the grad_accum=4 job to run")
        time.sleep(2)  # well into the cell (it hangs in its first step)
        subprocess.run(["scancel", cancelled], env=os.environ | slurm.env, check=True)
        out, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
    return run, proc.returncode, out, cancelled


@pytest.mark.slow
def test_every_row_lands_with_its_slurm_job_id_and_node(faulty_run):
    run, code, out, _ = faulty_run
    got = rows(run)
    assert sorted(got) == [(1, 0), (2, 0), (3, 0), (4, 0)], out
    ids = [r["slurm_job_id"] for r in got.values()]
    assert all(i and i.isdigit() for i in ids) and len(set(ids)) == 4, ids
    assert {r["nodes"] for r in got.values()} == {socket.gethostname().split(".")[0]}
    assert got[(1, 0)]["status"] == got[(2, 0)]["status"] == "ok", out
    assert got[(1, 0)]["window_s"] > 0 and (run / "steps").is_dir()
    assert code == 1  # the matrix completed with failures, as a local run would say
    assert not (run / "inflight.json").exists()  # nothing left in flight


@pytest.mark.slow
def test_scancel_of_a_running_job_gives_a_cancelled_row_and_the_run_goes_on(faulty_run):
    run, _, out, cancelled = faulty_run
    row = rows(run)[(4, 0)]
    assert row["status"] == "cancelled", out
    assert row["slurm_job_id"] == cancelled
    assert f"SLURM job {cancelled} CANCELLED" in row["reason"]
    assert rows(run)[(1, 0)]["status"] == "ok"


@pytest.mark.slow
def test_a_cell_past_its_slurm_time_limit_gives_a_timeout_row(faulty_run):
    run, _, out, _ = faulty_run
    row = rows(run)[(3, 0)]
    assert row["status"] == "timeout", out
    assert f"SLURM job {row['slurm_job_id']} TIMEOUT" in row["reason"]
    assert "time limit of 1 min" in row["reason"]


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_gives_every_row_once(slurm, tmp_path):
    m = matrix(tmp_path, "grad_accum = [1, 2]", repeats=2)
    run = tmp_path / "run"
    proc = start_run(str(m), "--out", str(run), env=slurm.env)
    try:
        def some_running():
            recs = inflight(run)
            live = {k: r["job_id"] for k, r in recs.items() if r.get("job_id")}
            return live if any(job_state(slurm, j) == "RUNNING" for j in live.values()) else None

        before = wait_for(some_running, 120, "a SLURM job of the run to be running")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    resumed = nvbench("run", "--resume", str(run), "--no-progress", env=slurm.env, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    got = rows(run)
    assert sorted(got) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert pq.read_table(run / "cells").num_rows == 4
    assert all(r["status"] == "ok" for r in got.values())
    by_key = {f"{r['cell_id']}-r{r['repeat']}": r["slurm_job_id"] for r in got.values()}
    for key, job_id in before.items():  # the jobs in flight at the kill were followed, not submitted again
        assert by_key[key] == job_id, (key, job_id, by_key)
    assert len(set(by_key.values())) == 4


def test_ctrl_c_cancels_the_runs_jobs_and_leaves_it_resumable(slurm, tmp_path):
    m = matrix(tmp_path, "grad_accum = [1]", timeout=20)
    run = tmp_path / "run"
    proc = start_run(str(m), "--out", str(run), env=slurm.env | {"NVBENCH_FAULT": "grad_accum=1:hang"})
    try:
        job_id = wait_for(lambda: next((r.get("job_id") for r in inflight(run).values() if r.get("job_id")), None),
                          60, "the job to be submitted")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    assert f"cancelled SLURM job(s) {job_id} (scancel)" in out
    assert f"nvbench run --resume {run}" in out
    wait_for(lambda: job_state(slurm, job_id) in ("CANCELLED", ""), 30, "the job to be cancelled")
    assert not list((run / "cells").glob("*.parquet")) and inflight(run) == {}  # resumable: nothing recorded


@pytest.mark.parametrize("broken", ["no sbatch", "controller down"])
def test_sbatch_missing_or_controller_down_is_one_line_and_exit_2(slurm, tmp_path, broken):
    m = matrix(tmp_path, "grad_accum = [1]")
    if broken == "no sbatch":
        env = slurm.env | {"PATH": str(tmp_path / "empty-bin")}
        expected = "sbatch not found"
    else:
        conf = Path(slurm.env["SLURM_CONF"]).read_text()
        port = next(ln for ln in conf.splitlines() if ln.startswith("SlurmctldPort="))
        dead = tmp_path / "slurm.conf"
        dead.write_text(conf.replace(port, "SlurmctldPort=9"))  # nothing listens there
        env = {"SLURM_CONF": str(dead)}
        expected = "the SLURM controller does not answer"
    proc = nvbench("run", str(m), "--out", str(tmp_path / "run"), "--no-progress", env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()


def test_the_job_script_runs_the_cells_argv_through_srun_across_nodes():
    """On paper, the multi-node cell: every node's task gets the same torchrun argv with the rendezvous on the
    job's first node (a cluster of one node cannot run it)."""
    from harness.orchestrate.placement.executors import Launch
    from harness.orchestrate.placement.slurm import job_script, sbatch_args
    from harness.matrix.executor import ExecutorConfig

    argv = ("python", "-m", "harness.cell", "exec", "python", "-m", "torch.distributed.run", "--nproc_per_node=8",
            "--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=placeholder:0", "--rdzv_id=x",
            "-m", "harness.cell", "run", "/runs/r/work/k/job.json")
    launch = Launch(key="k", argv=argv, env={}, log_path=Path("/runs/r/logs/k.log"), work=Path("/runs/r/work/k"),
                    timeout_s=1800, nnodes=2)
    script = job_script(launch, cwd=Path("/src"))
    assert 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script
    assert ('srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 python -m harness.cell exec'
            in script)
    assert '"--rdzv_endpoint=${head}:${port}"' in script and "placeholder" not in script
    args = sbatch_args(ExecutorConfig(kind="slurm", partition="gpu", gpus_per_node=8, time_margin_s=300), launch,
                       Path("/runs/r/work/k/job.sbatch"), cwd=Path("/src"))
    assert {"--nodes=2", "--time=35", "--partition=gpu", "--gpus-per-node=8", "--exclusive", "--no-requeue",
            "--output=/runs/r/logs/k.log"} <= set(args)


@pytest.mark.slow
def test_a_matrix_without_executor_section_runs_through_executor_slurm_as_it_runs_locally(slurm, tmp_path):
    """The acceptance's shape: `nvbench run MATRIX --executor slurm` with the matrix's own [executor] defaults
    (no partition named, exclusive nodes, 5 s polls) against a SLURM not configured for it (partition "batch",
    MinJobAge 2 s, no accounting) runs every cell and exits as the same matrix run locally does."""
    m = tmp_path / "matrix.toml"
    m.write_text(TINY.format(axes="grad_accum = [1, 2]", repeats=1, timeout=120, cache=tmp_path / "cache",
                             nvtx="false", device="cpu"))
    assert "[executor]" not in m.read_text()
    local = nvbench("run", str(m), "--out", str(tmp_path / "local"), "--no-progress", timeout=300)
    through = nvbench("run", str(m), "--out", str(tmp_path / "slurm"), "--executor", "slurm", "--no-progress",
                      env=slurm.env, timeout=300)
    assert local.returncode == 0, local.stdout + local.stderr
    assert through.returncode == local.returncode, through.stdout + through.stderr
    got, want = rows(tmp_path / "slurm"), rows(tmp_path / "local")
    assert sorted(got) == sorted(want) == [(1, 0), (2, 0)]
    assert all(r["status"] == "ok" and r["slurm_job_id"] and r["slurm_job_id"].isdigit() for r in got.values())
    assert all(r["slurm_job_id"] is None for r in want.values())
    manifest = json.loads((tmp_path / "slurm" / "manifest.json").read_text())
    assert manifest["num_jobs"] == 2 and not (tmp_path / "slurm" / "inflight.json").exists()
    planned = json.loads((tmp_path / "slurm" / "plan.json").read_text())["executor"]
    assert (planned["kind"], planned["partition"], planned["exclusive"]) == ("slurm", "", True)
