"""The SLURM executor across two nodes: a real two-node SLURM on this machine (slurm_cluster.py, nodes=2: each
node a network namespace with its own slurmd), a torchrun group spanning both, and what becomes of it when a
node or a rank fails. Started and torn down by this module; nothing of it may be left running after.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import TINY, nvbench
from slurm_cluster import SlurmCluster, unavailable_reason

pytestmark = [pytest.mark.skipif(unavailable_reason(2) is not None, reason=unavailable_reason(2) or ""),
              pytest.mark.slow]

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
