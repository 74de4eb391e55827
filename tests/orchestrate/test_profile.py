"""`nvbench profile`: torch.profiler end to end on CPU (trace with the step ranges, key-averages table, a
flagged row kept out of the timed table), the one-line answer when nsys is missing, and cell selection."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from conftest import nvbench

from harness.cell.instruments.capture import cell_for_job, range_modes
from harness.cell.instruments.timing import RANGE_NAMES
from harness.orchestrate.workflows.profile import ProfileSpec, select_cell
from harness.matrix.cells import expand, job_key
from harness.matrix.parse import load_matrix


@pytest.mark.documented("nvbench profile matrices/resnet50.toml --only backend=synthetic --tool torch --steps 2",
                        bound_s=300)
def test_torch_profile_captures_the_measured_steps_apart_from_timed_results(tiny_matrix, tmp_path, documented_run):
    matrix = tiny_matrix('backend = ["synthetic"]\ngrad_accum = [2]')
    out = tmp_path / "run"
    proc = documented_run(["profile", str(matrix), "--tool", "torch", "--steps", "2", "--out", str(out)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (cell,) = expand(load_matrix(matrix))
    key = job_key(cell.cell_id, 0)
    folder = out / "profile"
    trace, table = folder / f"{key}-rank0.trace.json", folder / f"{key}-rank0.key_averages.txt"
    assert proc.stdout.split() == [str(trace), str(table)]

    events = json.loads(trace.read_text())["traceEvents"]
    names = [e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"] in RANGE_NAMES]
    # Exactly the profiled window: no warmup, no validation, 2 steps of 2 micro-batches each.
    assert {n: names.count(n) for n in set(names)} == {
        "measure": 1, "step": 2, "data": 4, "forward": 4, "backward": 4, "optimizer": 2}
    assert "backward" in table.read_text()

    (row,) = pq.read_table(folder / "cells").to_pylist()
    assert row["status"] == "ok" and row["profile_tool"] == "torch"
    assert row["cell_id"] == cell.cell_id and row["num_measure_steps"] == 2
    assert not (out / "cells").exists() and not (out / "plan.json").exists()  # nothing a timed run would read
    assert not (folder / "manifest.json").exists()  # so no reader takes profile/ for a run folder
    assert (folder / row["log_path"]).is_file() and not (folder / "work").exists()
    manifest = json.loads((folder / "profiles.json").read_text())
    (entry,) = manifest["profiles"]
    assert entry["tool"] == "torch" and entry["files"] == [trace.name, table.name]


def test_missing_nsys_is_one_line_suggesting_torch(tiny_matrix, tmp_path):
    matrix = tiny_matrix()
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = nvbench("profile", str(matrix), "--tool", "nsys", "--out", str(tmp_path / "run"),
                   env={"PATH": str(empty)})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: nsys (Nsight Systems) is not on PATH; install it, or profile with --tool torch"]
    assert not (tmp_path / "run").exists()


def test_several_cells_need_a_cell_id(tiny_matrix, tmp_path):
    matrix = tiny_matrix('backend = ["synthetic"]\nmemory_format = ["nchw", "nhwc"]')
    proc = nvbench("profile", str(matrix), "--tool", "torch", "--out", str(tmp_path / "run"))
    assert proc.returncode == 2
    assert "2 cells match; pick one with --cell ID" in proc.stderr


def test_select_cell_by_id_prefix_or_the_only_one(tiny_matrix):
    cells = expand(load_matrix(tiny_matrix('backend = ["synthetic"]\nmemory_format = ["nchw", "nhwc"]')))
    nhwc = next(c for c in cells if c.memory_format == "nhwc")
    assert select_cell(cells, nhwc.cell_id) is nhwc
    assert select_cell(cells, "synthetic_nhwc") is nhwc
    assert select_cell(cells[:1], None) is cells[0]
    with pytest.raises(ValueError, match="--cell synthetic_ matches several cells"):
        select_cell(cells, "synthetic_")
    with pytest.raises(ValueError, match="--cell nope matches no cell"):
        select_cell(cells, "nope")


def test_nsys_command_gates_capture_to_the_profiler_api(tmp_path):
    spec = ProfileSpec(tool="nsys", steps=5, out_dir=tmp_path / "profile", nsys="/opt/nsys")
    argv = spec.command(["python", "-m", "harness.cell", "run", "job.json"], "k-r0")
    assert argv[:2] == ["/opt/nsys", "profile"]
    assert {"--trace=cuda,nvtx,osrt,cudnn,cublas", "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop", f"--output={tmp_path / 'profile' / 'k-r0'}"} <= set(argv)
    assert argv[-5:] == ["python", "-m", "harness.cell", "run", "job.json"]
    assert spec.job_section("k-r0", "k", 0) == {"tool": "nsys", "steps": 5, "dir": str(tmp_path / "profile"),
                                                "name": "k-r0", "cell_id": "k", "repeat": 0}
    assert ProfileSpec(tool="torch", steps=5, out_dir=tmp_path).command(["x"], "k") == ["x"]


def test_the_worker_measures_the_profiled_steps_with_the_right_ranges(tiny_matrix):
    (cell,) = expand(load_matrix(tiny_matrix(nvtx=False)))
    nsys = {"tool": "nsys", "steps": 7, "dir": "/x", "name": "k"}
    profiled = cell_for_job(cell, nsys)
    assert (profiled.benchmark.measure_steps, profiled.benchmark.val_steps) == (7, 1)
    assert cell_for_job(cell, None) is cell
    assert range_modes(cell, None) == (False, False)
    assert range_modes(cell, nsys) == (True, False)  # the timeline needs NVTX whatever the matrix says
    assert range_modes(cell, nsys | {"tool": "torch"}) == (False, True)
