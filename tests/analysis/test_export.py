"""nvbench export --format pytest-benchmark: read back with pytest-benchmark's own loader and its own statistics,
and rendered by its own `compare` command, as a dashboard reading that file would."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pytest_benchmark.stats import Stats
from pytest_benchmark.storage.file import FileStorage

from harness import cli
from harness.results import store
from harness.results.schema import cell_table, step_table

CELLS = {"synthetic_nchw_fp32_ws1_ga1_aa": 800.0, "synthetic_nhwc_bf16_ws1_ga1_bb": 1200.0}


def hand_made_run(path: Path, *, failed: bool = True, seed: int = 0) -> Path:
    """Two cells of three repeats, rank 0 and 1's steps; the first cell's repeat 0 ran twice (a start transient:
    the first attempt's row superseded, its steps apart) and a failed cell."""
    rng = np.random.default_rng(seed)
    rows, steps = [], {k: [] for k in ("run_id", "cell_id", "repeat", "rank", "step", "is_warmup", "step_time_s")}
    for cid, tput in CELLS.items():
        for r in range(3):
            times = 16 / tput * np.exp(rng.normal(0, 0.05, 11))  # batch 16; one warmup step first
            rows.append({"run_id": path.name, "cell_id": cid, "repeat": r, "status": "ok", "reason": "",
                         "backend": "synthetic", "memory_format": cid.split("_")[1], "precision": cid.split("_")[2],
                         "world_size": 1, "grad_accum": 1, "compile": "eager", "images_per_step": 16,
                         "throughput_img_per_s": tput * (1 + 0.01 * r), "step_time_mean_s": float(times[1:].mean())})
            for k, (name, values) in enumerate(zip(("run_id", "cell_id", "repeat"), (path.name, cid, r))):
                steps[name] += [values] * 22
            steps["rank"] += [0] * 11 + [1] * 11  # rank 1's steps are not rank 0's: left out
            steps["step"] += list(range(11)) * 2
            steps["is_warmup"] += ([True] + [False] * 10) * 2
            steps["step_time_s"] += list(times) + list(times * 3)
    first = next(iter(CELLS))
    rows.append(dict(rows[0], status="superseded", throughput_img_per_s=10.0, is_steady=False))  # never exported
    # its steps where A/B folders kept them before steps-superseded/ (harness.results.schema.SUPERSEDED_STEPS)
    store.write_table(path / "steps" / f"{first}-r0-superseded1.parquet",
                      step_table({"run_id": [path.name] * 5, "cell_id": [first] * 5, "repeat": [0] * 5,
                                  "rank": [0] * 5, "step": list(range(5)), "is_warmup": [False] * 5,
                                  "step_time_s": [9.0] * 5}))
    if failed:
        rows.append({"run_id": path.name, "cell_id": "pytorch_nchw_fp32_ws1_ga1_cc", "repeat": 0, "status": "failed",
                     "reason": "boom", "backend": "pytorch"})
    store.write_table(path / "cells" / "all.parquet", cell_table(rows))
    store.write_table(path / "steps" / "all.parquet", step_table(steps))
    store.write_json(path / "manifest.json", {"run_id": path.name, "created_at": "2026-01-02T03:04:05+00:00",
                                              "environment": {"hostname": "ci", "nvbench_git_sha": "abc123",
                                                              "nvbench_git_dirty": False}})
    return path


@pytest.mark.documented("nvbench export reports/<run_id> --format pytest-benchmark --out results.json", bound_s=120)
def test_the_export_reads_back_with_pytest_benchmarks_loader_one_benchmark_per_cell(tmp_path, documented_run):
    run = hand_made_run(tmp_path / "run")
    out = tmp_path / "export" / "0001_nvbench.json"
    proc = documented_run(["export", str(run), "--format", "pytest-benchmark", "--out", str(out)])
    assert proc.returncode == 0 and proc.stdout.strip() == str(out), proc.stderr
    loaded = list(FileStorage(out.parent, logging.getLogger("test")).load_benchmarks(out))
    assert sorted(b["name"] for b in loaded) == sorted(CELLS)  # the failed cell has no benchmark
    steps = store.read_steps(run).to_pandas()
    for bench in loaded:
        cid = bench["name"]
        mine = steps[(steps.cell_id == cid) & (steps["rank"] == 0) & ~steps.is_warmup].step_time_s / 16  # s / img
        assert bench["ops"] == pytest.approx(1 / mine.mean())  # as pytest-benchmark's own: 1 / mean, here img/s
        assert bench["ops"] == pytest.approx(CELLS[cid], rel=0.05) and bench["extra_info"]["unit"] == "s/img"
        assert bench["group"] == cid and bench["fullname"] == f"nvbench::{cid}"  # nothing of the run's id
        oracle = Stats()
        for value in mine:
            oracle.update(value)
        assert bench["rounds"] == 30 and bench["data"] == pytest.approx(list(mine))
        for name in ("min", "max", "mean", "stddev", "median", "q1", "q3", "iqr", "ld15iqr", "hd15iqr", "total",
                     "iqr_outliers", "stddev_outliers", "outliers"):
            assert bench[name] == pytest.approx(getattr(oracle, name)), name
        assert bench["params"]["memory_format"] == cid.split("_")[1] and bench["extra_info"]["repeats"] == [0, 1, 2]
    doc = json.loads(out.read_text())
    assert doc["commit_info"]["id"] == "abc123" and doc["machine_info"]["node"] == "ci"


def test_pytest_benchmarks_compare_puts_two_runs_of_a_cell_in_one_group_with_ops_one_over_mean(tmp_path):
    """Two exports of the same cells (two runs): `compare` prints each cell's group once, holding both runs, and its
    OPS column is 1 / its Mean; the superseded attempt of repeat 0 counts no round (30: 3 repeats x 10 steps)."""
    files = []
    for k in (1, 2):
        files.append(tmp_path / f"000{k}_nvbench.json")
        assert cli.main(["export", str(hand_made_run(tmp_path / f"run{k}", seed=k)), "--format", "pytest-benchmark",
                         "--out", str(files[-1])]) == 0
    shown = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", *map(str, files),
                            "--columns", "mean,ops,rounds"],
                           capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": ""})
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    for cid in CELLS:
        assert out.count(f"benchmark '{cid}':") == 1  # one group per cell...
        table = out[out.index(f"benchmark '{cid}':"):].split("\n\n")[0]
        rows = [line.split() for line in table.splitlines() if line.startswith(cid)]
        assert sorted(r[1].split("/")[-1] for r in rows) == ["0001_nvbench)", "0002_nvbench)"]  # ...with both runs
        prefix = {"": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9, "K": 1e3, "M": 1e6}  # the table scales both columns
        time_unit, ops_unit = re.search(r"Name \(time in (\w*?)s\).*OPS(?: \((\w*?)ops/s\))?", table).groups()
        for row in rows:  # name (source) mean (ratio) ops (ratio) rounds
            mean = float(row[2].replace(",", "")) * prefix[time_unit]
            ops, rounds = float(row[4].replace(",", "")) * prefix[ops_unit or ""], int(row[6])
            assert ops == pytest.approx(1 / mean, rel=1e-3) and rounds == 30  # OPS = 1 / Mean, as printed


def test_export_of_a_bad_run_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main(["export", str(tmp_path), "--format", "pytest-benchmark", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path}: not an nvbench run folder (needs manifest.json and cells/)\n"
    assert not (tmp_path / "x.json").exists()
