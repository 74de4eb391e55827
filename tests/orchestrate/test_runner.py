"""The runner with real child processes: every failure kind ends as its row, kill -9 resumes, the CLI
writes Parquet that independent readers (pyarrow alone, DuckDB) read back."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, nvbench

from harness.cell.instruments import probe
from harness.matrix.cells import Cell
from harness.orchestrate.session import job
from harness.results import store
from harness.results.schema import RESULT_SCHEMA_VERSION


def rows_by(run_dir: Path, key: str = "cell_id") -> dict:
    table = pq.read_table(run_dir / "cells")  # pyarrow alone, no nvbench code
    return {(r[key], r["repeat"]): r for r in table.to_pylist()}


def cell_with(rows: dict, **axes) -> dict:
    hits = [r for r in rows.values() if all(r[k] == v for k, v in axes.items())]
    assert len(hits) == 1, (axes, hits)
    return hits[0]


@pytest.mark.documented("nvbench run matrices/resnet50.toml", bound_s=300)
def test_end_to_end_run_reads_back_with_pyarrow_and_duckdb(tiny_matrix, tmp_path, documented_run):
    # two backends (the pytorch cell's loader efficiency needs its synthetic twin), two repeats each
    matrix = tiny_matrix('backend = ["synthetic", "pytorch"]', repeats=2)
    out = tmp_path / "run"
    proc = documented_run(["run", str(matrix), "--out", str(out), "--no-progress"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 rows: 4 ok" in proc.stdout and f"results: {out}" in proc.stdout  # the summary: a result
    assert f"run folder: {out}" in proc.stderr and "4 rows" not in proc.stderr  # progress, apart from it

    cells = pq.read_table(out / "cells")
    assert cells.num_rows == 4
    assert cells.schema.metadata[b"nvbench.schema_version"] == str(RESULT_SCHEMA_VERSION).encode()
    for row in cells.to_pylist():
        assert row["status"] == "ok" and row["reason"] == ""
        assert row["throughput_img_per_s"] > 0
        # the interval and the point estimate are on one clock: the interval brackets the point
        assert row["throughput_ci_low_img_per_s"] <= row["throughput_img_per_s"] <= row["throughput_ci_high_img_per_s"]
        assert row["images_measured"] == 3 * 4
        assert json.loads(row["config_json"])["backend"] == row["backend"]
        assert row["cell_label"] == Cell.from_plain(json.loads(row["config_json"])).label  # the label, as data
        assert (row["top1"] is None) == (row["backend"] == "synthetic")
        assert 0 <= row["exposed_data_wait_frac"] < 1
        assert row["exposed_data_wait_s"] == row["host_data_wait_s"]  # on CPU, one measurement
        if row["backend"] == "pytorch":  # its synthetic twin ran in the same run
            assert row["loader_efficiency"] > 0
        else:
            assert row["loader_efficiency"] is None
        assert row["scaling_efficiency"] is None
        assert (out / row["log_path"]).is_file()
    steps = pq.read_table(out / "steps").to_pylist()
    assert len(steps) == 4 * (1 + 3)
    assert sum(s["is_warmup"] for s in steps) == 4
    assert all(s["step_time_s"] > 0 and s["rank"] == 0 for s in steps)
    assert all(math.isfinite(s["loss"]) and s["loss"] > 0 and s["exposed_data_wait_s"] == s["host_data_wait_s"]
               for s in steps)
    # the generated set has 40 training images, 10 steps of 4: every step is in epoch 0, the first starts it
    for s in steps:
        pytorch = s["cell_id"].startswith("pytorch")
        assert (s["epoch"], s["is_epoch_start"]) == ((0, s["step"] == 0) if pytorch else (None, None))
        # the reference timeline's first epoch (the dataset's for pytorch, ImageNet's for synthetic)
        assert s["lr"] == pytest.approx(0.256 * 4 / 256 / 8)
    for row in cells.to_pylist():  # the fast-step rate is computed from the very step times stored
        measured = [s["step_time_s"] for s in steps if s["cell_id"] == row["cell_id"] and s["repeat"] == row["repeat"]
                    and not s["is_warmup"]]
        assert row["step_time_p10_s"] == pytest.approx(float(np.quantile(measured, 0.1)))
        assert row["fast_step_img_per_s"] == pytest.approx(4 / row["step_time_p10_s"])
        assert row["step_time_p10_s"] <= row["step_time_median_s"]
    # the machine-speed probe (CPU, run.speed_probe on by default): after every measured step of a short
    # window, outside the step times, and its time is not in window_s either
    for row in cells.to_pylist():
        assert row["speed_probe_kind"] == probe.PROBE_KIND and row["speed_probe_s"] > 0
        assert (row["speed_probe_count"], row["speed_probe_every"]) == (3, 1)
        mine = [s for s in steps if (s["cell_id"], s["repeat"]) == (row["cell_id"], row["repeat"])]
        measured = [s for s in mine if not s["is_warmup"]]
        assert all(s["speed_probe_s"] > 0 for s in measured) and all(s["speed_probe_s"] is None for s in mine if s["is_warmup"])
        # what the window lost is the probes' timed part plus the cache flush before each
        assert row["speed_probe_total_s"] > sum(s["speed_probe_s"] for s in measured)
        assert sum(s["step_time_s"] for s in measured) <= row["window_s"]

    duckdb = pytest.importorskip("duckdb")
    n, ok = duckdb.sql(f"select count(*), count_if(status = 'ok') from read_parquet('{out}/cells/*.parquet')").fetchall()[0]
    assert (n, ok) == (4, 4)
    pandas = pytest.importorskip("pandas")
    assert len(pandas.read_parquet(out / "cells")) == 4

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run_id"] == "run" and manifest["num_jobs"] == 4
    assert "[axes]" in manifest["matrix_text"] and manifest["environment"]["python_version"]
    assert not (out / "work").exists()
    # run.malloc = "stable" (the default) reached the cell processes themselves (the worker reports its env)
    assert all(set(job.STABLE_MALLOC.items()) <= {tuple(t.split("=")) for t in r["glibc_tunables"].split(":")}
               for r in cells.to_pylist())


def test_malloc_tunables_keep_what_the_user_set(tiny_matrix):
    from harness.matrix.cells import expand
    from harness.matrix.parse import load_matrix

    (stable,) = expand(load_matrix(tiny_matrix()))
    (system,) = expand(load_matrix(tiny_matrix(extra='malloc = "system"\n')))
    assert system.run.malloc == "system" and system.cell_id != stable.cell_id
    mine = "glibc.malloc.trim_threshold=1024:glibc.pthread.rseq=0"
    merged = job.malloc_tunables(stable, mine).split(":")
    assert merged == ["glibc.malloc.trim_threshold=1024", "glibc.pthread.rseq=0",
                      f"glibc.malloc.mmap_threshold={job.STABLE_MALLOC['glibc.malloc.mmap_threshold']}"]
    assert job.malloc_tunables(system, mine) == mine and job.malloc_tunables(system, None) is None


def test_every_failure_kind_is_a_row_and_the_matrix_completes(tiny_matrix, tmp_path):
    matrix = tiny_matrix('backend = ["synthetic"]\nprecision = ["fp32", "bf16"]\n'
                         'memory_format = ["nchw", "nhwc"]\ngrad_accum = [1, 2]', timeout=25,
                         extra='[[exclude]]\nprecision = "bf16"\nmemory_format = "nhwc"\n')
    # the one ok cell trains in fp32: a bf16 cell of this 16 px network reaches a 1 x 1 map, where CPU bf16
    # convolution's weight gradient is sometimes wrong (matrices/convnets.toml says how) and the loss turns NaN
    # 5 faults + 1 ok; a hung cell's timeout is test_distributed's (a hung rank and its waiting peer)
    faults = ";".join([
        "precision=fp32&memory_format=nchw&grad_accum=1:raise",
        "precision=fp32&memory_format=nchw&grad_accum=2:nan",
        "precision=fp32&memory_format=nhwc&grad_accum=2:segv",
        "precision=bf16&memory_format=nchw&grad_accum=1:oom",
        "precision=bf16&memory_format=nchw&grad_accum=2:exit",
    ])
    out = tmp_path / "run"
    # bounded by nvbench()'s own timeout, not asserted: how long it takes is this machine's speed (issue 57)
    proc = nvbench("run", str(matrix), "--out", str(out), "--no-progress", env={"NVBENCH_FAULT": faults})
    assert proc.returncode == 1, proc.stderr  # completed, with failures
    rows = rows_by(out)
    assert len(rows) == 6

    def row(prec, fmt, ga):
        return cell_with(rows, precision=prec, memory_format=fmt, grad_accum=ga)

    r = row("fp32", "nchw", 1)
    assert (r["status"], r["reason"]) == ("failed", "rank 0: RuntimeError: injected fault: raise")
    assert r["injected_fault"] == "raise"
    r = row("fp32", "nchw", 2)
    assert r["status"] == "failed" and "NonFiniteLoss: non-finite training loss (nan)" in r["reason"]
    # the weights turn NaN as the window opens: its first step (1, after 1 warmup step) at 0.256 * 8 / 256 / 8
    assert "first non-finite step loss at step 1 (measured), lr 0.001" in r["reason"]
    r = row("fp32", "nhwc", 2)
    assert (r["status"], r["reason"]) == ("crashed", "killed by SIGSEGV")
    r = row("bf16", "nchw", 1)
    assert r["status"] == "failed" and "OutOfMemoryError: injected fault: out of memory" in r["reason"]
    r = row("bf16", "nchw", 2)
    assert r["status"] == "crashed" and r["reason"].startswith("exited with status 3 without a result")
    r = row("fp32", "nhwc", 1)
    assert r["status"] == "ok" and r["injected_fault"] is None, r["reason"]
    # The crashed and failed cells' processes went with them: nothing of this run is left running.
    leftovers = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split()
    assert leftovers == []


def test_kill_9_then_resume_runs_each_job_exactly_once(tiny_matrix, tmp_path):
    matrix = tiny_matrix('backend = ["synthetic"]', repeats=3)
    out = tmp_path / "run"
    runner = subprocess.Popen([sys.executable, "-m", "harness", "run", str(matrix), "--out", str(out),
                               "--no-progress"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not (list((out / "cells").glob("*.parquet")) if (out / "cells").exists() else []):
        assert time.monotonic() < deadline, "no row within 180 s"
        assert runner.poll() is None, "runner ended before it could be killed"
        time.sleep(0.2)
    runner.send_signal(signal.SIGKILL)  # mid-run: one row written, the next cell's process in flight
    runner.wait()
    done_before = len(list((out / "cells").glob("*.parquet")))
    assert 1 <= done_before < 3
    deadline = time.monotonic() + 10  # the in-flight cell dies with its parent (PR_SET_PDEATHSIG)
    while subprocess.run(["pgrep", "-f", str(out / "work")], capture_output=True).stdout:
        assert time.monotonic() < deadline, "the in-flight cell outlived the killed runner"
        time.sleep(0.1)

    proc = nvbench("run", "--resume", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert f"({3 - done_before} of 3 jobs to run)" in proc.stderr
    table = pq.read_table(out / "cells")
    keys = [(r["cell_id"], r["repeat"]) for r in table.to_pylist()]
    assert len(keys) == len(set(keys)) == 3
    assert set(table.column("status").to_pylist()) == {"ok"}
    steps = pq.read_table(out / "steps").to_pylist()
    assert len(steps) == 3 * 4 and len({(s["cell_id"], s["repeat"], s["step"]) for s in steps}) == 12
    # The resumed run ends folded as a run through does: one file a folder, every row once
    from harness.results.store import FOLDED
    assert [p.name for p in (out / "cells").glob("*.parquet")] == [FOLDED]
    assert [p.name for p in (out / "steps").glob("*.parquet")] == [FOLDED]
    # A finished run resumes to nothing, and ends with the same rows
    again = nvbench("run", "--resume", str(out), "--no-progress")
    assert again.returncode == 0 and "(0 of 3 jobs to run)" in again.stderr
    assert pq.read_table(out / "cells").equals(table) and [p.name for p in (out / "cells").iterdir()] == [FOLDED]
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["sessions"]) == 3


def test_interleaved_order_is_recorded_and_reproducible(tiny_matrix, tmp_path):
    from harness.orchestrate.session.runfolder import create_run, load_plan
    from harness.matrix.cells import expand
    from harness.matrix.parse import load_matrix

    m = load_matrix(tiny_matrix('backend = ["synthetic"]\nprecision = ["fp32", "bf16"]', repeats=3))
    a = create_run(m, expand(m), run_dir=tmp_path / "a", reports_root=tmp_path, smoke=False, only=[], env={})
    b = create_run(m, expand(m), run_dir=tmp_path / "b", reports_root=tmp_path, smoke=False, only=[], env={})
    jobs_a, jobs_b = load_plan(a)[1], load_plan(b)[1]
    assert jobs_a == jobs_b and len(jobs_a) == 6
    assert jobs_a != sorted(jobs_a, key=lambda j: (j[1], j[0]))  # shuffled, not sequential
    with pytest.raises(FileExistsError, match="already holds a run"):
        create_run(m, expand(m), run_dir=a, reports_root=tmp_path, smoke=False, only=[], env={})


def test_unrunnable_cells_are_skipped_and_a_run_says_where_its_time_went(shared_cpu_run):
    """What this machine cannot run is a skipped row, launched never (dali-gpu without CUDA, more ranks than
    cores, compile = cudagraph on the CPU); an auto warmup records the steps it ran; synthetic cells skip
    validation; the manifest has the run's matrix efficiency and where the rest of the time went."""
    out, cpus = shared_cpu_run, len(os.sched_getaffinity(0))
    rows = store.read_cells(out).to_pylist()
    assert len(rows) == 4

    def row(**axes):
        (hit,) = [r for r in rows if all(r[k] == v for k, v in axes.items())]
        return hit

    eager = row(backend="synthetic", world_size=1, compile="eager")
    big = row(backend="synthetic", world_size=cpus + 1)
    assert big["status"] == "skipped" and f"exceeds the {cpus} CPU cores" in big["reason"]
    gpu = row(backend="dali-gpu")
    assert gpu["status"] == "skipped" and ("CUDA" in gpu["reason"] or "nvidia-dali" in gpu["reason"])
    graph = row(compile="cudagraph")
    assert graph["status"] == "skipped" and "captures the step as a CUDA graph; this run trains on the CPU" in graph["reason"]
    for skipped in (big, gpu, graph):  # nothing was launched for them
        assert skipped["duration_s"] == 0.0 and skipped["log_path"] is None
    assert eager["status"] == "ok" and eager["compile_s"] == 0.0
    # nothing autotunes on the CPU: no first step is run apart, and cuDNN's knobs are not the cell's
    assert eager["autotune_s"] == 0.0 and eager["cudnn_benchmark"] is None and eager["cudnn_benchmark_limit"] is None
    # 2 steps, then one chunk of 10: two chunks are needed to judge steadiness, so the maximum ends it
    assert eager["warmup_steps_used"] == 12
    steps = pq.read_table(out / "steps").to_pylist()
    assert sum(s["is_warmup"] for s in steps) == 12 and len(steps) == 12 + 3
    assert eager["num_val_images"] == 0 and eager["val_s"] == 0.0  # synthetic: no validation
    assert 0 < eager["startup_s"] < eager["duration_s"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["window_s_total"] == pytest.approx(eager["window_s"])
    assert manifest["matrix_efficiency"] == pytest.approx(eager["window_s"] / manifest["wall_s"])
    assert 0 < manifest["matrix_efficiency"] < 1
    spent = manifest["time_breakdown_s"]
    assert set(spent) == {"startup_s", "build_s", "autotune_s", "compile_s", "warmup_window_s", "window_s", "val_s",
                          "rest_of_jobs_s", "compile_warmups_s", "between_jobs_s"}
    assert spent["compile_warmups_s"] == 0 and not (out / "warmups").exists()  # an eager run warms no cache
    assert sum(spent.values()) == pytest.approx(manifest["wall_s"], abs=0.01)


def test_a_job_noted_lost_is_pending_and_its_row_is_kept_superseded_when_the_run_resumes(tmp_path):
    """The bookkeeping behind the resume after a NODE_FAIL, on a constructed run folder (no SLURM needed)."""
    from harness.orchestrate.session import runfolder

    key, other = "cellA-r0", "cellB-r0"
    lost = {"cell_id": "cellA", "repeat": 0, "status": "crashed", "slurm_job_id": "3", "log_path": f"logs/{key}.log",
            "reason": "SLURM job 3 NODE_FAIL before the cell wrote its result: node node2 down"}
    runfolder.write_row(tmp_path, key, lost)
    runfolder.write_row(tmp_path, other, lost | {"cell_id": "cellB", "status": "ok", "reason": ""})
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / f"{key}.log").write_text("the lost job's log")
    jobs = [("cellA", 0), ("cellB", 0)]
    assert runfolder.pending(tmp_path, jobs) == [] and runfolder.requeue_lost(tmp_path) == []
    runfolder.mark_lost(tmp_path, key, ("node2",))
    assert runfolder.pending(tmp_path, jobs) == [("cellA", 0)]  # counted as to run before the resume supersedes it
    assert runfolder.requeue_lost(tmp_path) == [key]
    assert runfolder.pending(tmp_path, jobs) == [("cellA", 0)] and not (tmp_path / runfolder.LOST).exists()
    (kept,) = pq.read_table(tmp_path / "cells" / f"{key}-superseded-lost1.parquet").to_pylist()
    assert (kept["status"], kept["rerun_cause"], kept["reason"]) == ("superseded", "node lost", lost["reason"])
    assert (tmp_path / "logs" / f"{key}-superseded-lost1.log").read_text() == "the lost job's log"
    assert runfolder.requeue_lost(tmp_path) == []  # once
