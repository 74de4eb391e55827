"""Accuracy is a real signal: a trimmed matrices/convergence-cpu.toml reaches >= 90% top-1 on the CPU,
with the pytorch and dali-cpu pipelines alike."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, nvbench


@pytest.mark.slow
def test_trimmed_convergence_matrix_learns_the_generated_dataset(tmp_path):
    out = tmp_path / "run"
    pytest.importorskip("nvidia.dali")
    proc = nvbench("run", str(ROOT / "matrices" / "convergence-cpu.toml"), "--only", "backend=pytorch",
                   "--only", "backend=dali-cpu", "--only", "precision=bf16", "--only", "memory_format=nhwc",
                   "--only", "grad_accum=1", "--out", str(out), "--no-progress",
                   env={"NVBENCH_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    rows = {r["backend"]: r for r in pq.read_table(out / "cells").to_pylist()}
    assert set(rows) == {"pytorch", "dali-cpu"}
    for row in rows.values():
        assert row["status"] == "ok" and row["num_val_images"] == 500
        assert row["top1"] >= 0.90, f"{row['backend']}: top-1 {row['top1']:.3f} after {row['num_measure_steps']} steps"
        assert row["top5"] >= row["top1"] and row["val_loss"] < 1.0
    assert abs(rows["pytorch"]["top1"] - rows["dali-cpu"]["top1"]) <= 0.05
