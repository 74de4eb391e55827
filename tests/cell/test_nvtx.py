"""NVTX ranges without a GPU or Nsight: a tiny injection library (tests/nvtx_inject.c, built here with the
C compiler) attaches to NVTX as Nsight would and logs every push and pop; a real cell must emit the
nested ranges of harness.cell.instruments.timing in every worker process, and `run.nvtx = false` must emit none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, nvbench

from harness.cell.instruments.timing import NVTX_DOMAIN, RANGE_NAMES, make_ranges

SOURCE = Path(__file__).with_name("nvtx_inject.c")
Tree = list[tuple[str, "Tree"]]


@pytest.fixture(scope="module")
def inject_lib(tmp_path_factory) -> Path:
    compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the NVTX injection library")
    lib = tmp_path_factory.mktemp("nvtx") / "libnvtx_inject.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(lib), str(SOURCE)], check=True,
                   capture_output=True, text=True)
    return lib


def tool_env(lib: Path, log_dir: Path) -> dict[str, str]:
    log_dir.mkdir(parents=True, exist_ok=True)
    return {"NVTX_INJECTION64_PATH": str(lib), "NVTX_INJECT_LOG_DIR": str(log_dir)}


def read_logs(log_dir: Path) -> dict[str, dict[str, Tree]]:
    """{rank: {thread id: tree of nvbench ranges}} for every process that logged; pops must balance."""
    out = {}
    for path in sorted(log_dir.glob("nvtx-*.log")):
        lines = path.read_text().splitlines()
        rank = lines[0].split()[1]
        stacks: dict[str, list[Tree]] = {}
        roots: dict[str, Tree] = {}
        for line in lines[1:]:
            kind, tid, domain, *name = line.split()
            if domain != NVTX_DOMAIN:
                continue
            stack = stacks.setdefault(tid, [roots.setdefault(tid, [])])
            if kind == "push":
                node: tuple[str, Tree] = (name[0], [])
                stack[-1].append(node)
                stack.append(node[1])
            else:
                assert len(stack) > 1, f"{path.name}: pop without a push on thread {tid}"
                stack.pop()
        assert all(len(s) == 1 for s in stacks.values()), f"{path.name}: ranges left open"
        out[rank] = {tid: tree for tid, tree in roots.items() if tree}
    return out


def test_ranges_reach_an_attached_tool_and_the_switch_turns_them_off(inject_lib, tmp_path):
    script = textwrap.dedent("""
        from harness.cell.instruments.timing import make_ranges
        on, off = make_ranges(True), make_ranges(False)
        with off("cell"):
            with off("step"):
                pass
        with on("cell"):
            with on("step"):
                with on("forward"):
                    pass
            with on("validation"):
                pass
    """)
    env = dict(os.environ, **tool_env(inject_lib, tmp_path / "log"))
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT, env=env, timeout=120)
    (trees,) = read_logs(tmp_path / "log").values()
    (tree,) = trees.values()
    assert tree == [("cell", [("step", [("forward", [])]), ("validation", [])])]


def test_range_names_are_fixed_constants():
    assert len(set(RANGE_NAMES)) == len(RANGE_NAMES) == 10
    ranges = make_ranges(False)
    assert ranges("step") is ranges("forward")  # one shared no-op: nothing allocated per step
    with pytest.raises(KeyError):
        make_ranges(True)("stpe")


def expected_cell(warmup: int, measure: int, accum: int, *, validation: bool) -> Tree:
    micro = [("data", []), ("forward", []), ("backward", [])] * accum
    step = ("step", micro + [("optimizer", [])])
    return [("cell", [("warmup", [step] * warmup), ("measure", [step] * measure)]
             + ([("validation", [])] if validation else []))]


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(_gpus() == 0, reason="needs a CUDA device")])])
def test_a_real_cell_emits_nested_ranges_in_every_worker_process(inject_lib, tiny_matrix, tmp_path, device):
    # One rank per core on the CPU path (gloo), one per GPU on the CUDA path (NCCL): at most 2.
    room = len(os.sched_getaffinity(0)) if device == "cpu" else _gpus()
    world = 2 if room >= 2 else 1
    matrix = tiny_matrix(f'backend = ["synthetic"]\nworld_size = [{world}]\ngrad_accum = [2]', nvtx=True,
                         device=device)
    proc = nvbench("run", str(matrix), "--out", str(tmp_path / "run"), "--no-progress",
                   env=tool_env(inject_lib, tmp_path / "log"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = pq.read_table(tmp_path / "run" / "cells").to_pylist()
    assert [(r["status"], r["device"], r["world_size"]) for r in rows] == [("ok", device, world)]
    processes = read_logs(tmp_path / "log")
    workers = {rank: trees for rank, trees in processes.items() if trees}
    assert sorted(workers) == ([str(r) for r in range(world)] if world > 1 else ["-"])  # RANK under torchrun
    for rank, trees in workers.items():
        (tree,) = trees.values()  # every range on one thread: the training loop's
        # synthetic data is not validated: no validation range
        assert tree == expected_cell(warmup=1, measure=3, accum=2, validation=False), f"rank {rank}"


def test_nvtx_off_in_the_matrix_emits_no_ranges(inject_lib, tiny_matrix, tmp_path):
    matrix = tiny_matrix('backend = ["synthetic"]', nvtx=False)
    proc = nvbench("run", str(matrix), "--out", str(tmp_path / "run"), "--no-progress",
                   env=tool_env(inject_lib, tmp_path / "log"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not any(read_logs(tmp_path / "log").values())
