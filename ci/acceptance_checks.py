"""The GPU acceptance's claim checks: each runs nvbench as a user would (`nvbench ab`, `nvbench run`) on a small
matrix of its own and hands what that wrote to its judgement in ci/acceptance_judge.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import acceptance_judge as judge

DRILL_PCT = 10.0
"""The fire drill's slowdown of side B: the nightly's monthly drill (ci/README.md)."""
PAIRS = 5
"""Interleaved pairs of each A/B: the fewest whose permutation test can reach p <= 0.01 (docs: ci/README.md)."""
VERDICT_CELL = {"model": "resnet18", "image_size": 224, "batch_size": 256, "warmup_steps": 10, "measure_steps": 40}
"""The A/A's and the drill's synthetic cell: a small model, so that 20 processes fit the budget; every process
pays its interpreter start and build, which the window's length would not change."""
COMPILE_CELL = {"model": "resnet18", "image_size": 224, "batch_size": 256, "warmup_steps": 10, "measure_steps": 30}
"""The compile cache's inductor cell: resnet18 compiles in a fraction of resnet50's 77.8 s (610fe19)."""

CELL_MATRIX = """version = 1
[benchmark]
name = "{name}"
model = "{model}"
num_classes = 1000
image_size = {image_size}
batch_size = {batch_size}
warmup_steps = {warmup_steps}
measure_steps = {measure_steps}
val_steps = 0
seed = 42
timeout_s = 600
[axes]
backend = ["synthetic"]
memory_format = ["nhwc"]
precision = ["{precision}"]
compile = [{compile}]
[run]
repeats = {repeats}
nvtx = {nvtx}
{device}"""


def cell_matrix(out: Path, name: str, cell: dict[str, Any], *, compile_modes: Sequence[str] = ("eager",),
                repeats: int = 1, nvtx: bool = True, device: str | None = None, precision: str = "bf16") -> Path:
    """A one-backend synthetic matrix for a claim check, written into `out`."""
    text = CELL_MATRIX.format(name=name, **cell, precision=precision, repeats=repeats, nvtx=str(nvtx).lower(),
                              compile=", ".join(f'"{m}"' for m in compile_modes),
                              device=f'device = "{device}"\n' if device else "")
    path = out / f"{name}.toml"
    path.write_text(text)
    return path


def nvbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    from harness.results import store

    return store.read_cells(run_dir).to_pylist() if (run_dir / "cells").is_dir() else []


def read_steps(run_dir: Path) -> list[dict[str, Any]]:
    from harness.results import store

    return store.read_steps(run_dir).to_pylist() if (run_dir / "steps").is_dir() else []


def read_verdict_rows(ab_dir: Path) -> list[dict[str, Any]]:
    from harness.analysis.load.verdicts_file import read_verdicts

    path = ab_dir / "report" / "verdicts.parquet"
    return [v.to_row() for v in read_verdicts(path)] if path.is_file() else []


def apply(check, j: judge.Judgement, code: int | None = 0, timeout: float = 0.0, log: Path | None = None) -> None:
    """Copy a judgement into `check`; a command that timed out or failed says so first."""
    check.status, check.detail, check.figures = j.status, j.detail, dict(j.figures)
    if code is None:
        check.status, check.detail = "fail", f"timed out after {timeout:.0f} s; {j.detail}"
    elif code != 0 and j.status == "pass":
        check.status, check.detail = "fail", f"exit {code} ({log}); {j.detail}"


def ab_check(out: Path, run: Callable, *, drill: bool, nvtx: bool, device: str | None = None,
             cell: dict[str, Any] | None = None) -> Callable:
    """`nvbench ab` of one synthetic cell, PAIRS pairs, side B drilled or not, judged from its verdicts.parquet
    by judge_drill or judge_aa: the same comparison (harness.analysis.judge.compare) a user's A/B prints."""
    name = "verdict-drill" if drill else "verdict-aa"

    def body(check, timeout: float) -> None:
        matrix = cell_matrix(out, name, cell or VERDICT_CELL, nvtx=nvtx, device=device)
        argv = nvbench("ab", str(matrix), "--repeats", str(PAIRS), "--out", str(out / name),
                       "--reports", str(out / "reports"))
        argv += ["--fire-drill", f"{DRILL_PCT:g}"] if drill else []
        code = run(argv, log=out / f"{name}.log", timeout=timeout)
        verdicts = read_verdict_rows(out / name)
        apply(check, judge.judge_drill(verdicts) if drill else judge.judge_aa(verdicts), code, timeout,
              out / f"{name}.log")
        check.figures["command"] = " ".join(argv[1:])
    return body


def ab_rows(out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The A/A's rows and steps, both sides: eager cells a user's A/B measured."""
    sides = {side: out / "verdict-aa" / side for side in ("a", "b")}
    steps = [dict(s, repeat=f"{side}/{s['repeat']}") for side, d in sides.items() for s in read_steps(d)]
    return [r for d in sides.values() for r in read_rows(d)], steps  # each side's repeats apart


def phases_check(out: Path, run: Callable, *, nvtx: bool, device: str | None = None,
                 cell: dict[str, Any] | None = None) -> Callable:
    """The A/A's steps: phases sum to the step; one cudagraph cell: `phases_graphed`."""
    def body(check, timeout: float) -> None:
        _, steps = ab_rows(out)
        summed = judge.judge_phases(steps) if steps else judge.Judgement(
            status="fail", detail="no steps: verdict-aa did not run")
        matrix = cell_matrix(out, "graphed", cell or VERDICT_CELL, compile_modes=("cudagraph",), nvtx=nvtx,
                             device=device)
        code = run(nvbench("run", str(matrix), "--out", str(out / "graphed"), "--no-progress"),
                   log=out / "graphed.log", timeout=timeout)
        graphed = judge.judge_graphed(read_rows(out / "graphed"))
        status = "pass" if summed.status == graphed.status == "pass" else "fail"
        check.status, check.detail = status, f"{summed.detail}; {graphed.detail}"
        check.figures = {"sum": summed.figures, "cudagraph": graphed.figures}
        if code is None:
            check.status, check.detail = "fail", f"cudagraph cell timed out after {timeout:.0f} s; {check.detail}"
    return body


def autotune_check(out: Path) -> Callable:
    """The A/A's rows: cuDNN's autotuning timed apart (its run is verdict-aa's; nothing runs here)."""
    def body(check, timeout: float) -> None:
        rows, _ = ab_rows(out)
        apply(check, judge.judge_autotune(rows) if rows else judge.Judgement(
            status="fail", detail="no rows: verdict-aa did not run"))
    return body


def compile_cache_check(out: Path, run: Callable, *, nvtx: bool, device: str | None = None,
                        cell: dict[str, Any] | None = None) -> Callable:
    """An inductor cell, 2 repeats: its warm-up fills the run's cache, each repeat reads it."""
    def body(check, timeout: float) -> None:
        from harness.orchestrate.session.compile_cache import read_records

        matrix = cell_matrix(out, "inductor", cell or COMPILE_CELL, compile_modes=("inductor",), repeats=2,
                             nvtx=nvtx, device=device)
        code = run(nvbench("run", str(matrix), "--out", str(out / "inductor"), "--no-progress"),
                   log=out / "inductor.log", timeout=timeout)
        records = read_records(out / "inductor") if (out / "inductor").is_dir() else []
        apply(check, judge.judge_compile_cache(records, read_rows(out / "inductor")), code, timeout,
              out / "inductor.log")
    return body


CLAIMS = {
    "suite": "the CPU suite passes on this machine (--with-suite)",
    "gpu-tests": "the GPU-marked tests pass: CUDA never initialised by the parent, cudagraph replays the eager "
                 "step, a real stream's exposed wait, the prefetcher's streams, autotuning timed apart",
    "dali-tests": "DALI's tests pass (zero-copy GPU buffers outlive a slow consumer)",
    "verdict-aa": "an A/A of one synthetic cell, 5 interleaved pairs, is `unchanged` (or `inconclusive` with its "
                  "reason): the verdict a user's `nvbench ab` prints raises no false alarm on this GPU",
    "verdict-drill": f"the same cell with a {DRILL_PCT:g} % fire drill (GPU sleep in the optimizer phase), 5 pairs, "
                     "is a `regression` naming the optimizer phase",
    "phases": "per-phase CUDA timing: each repeat's phases sum to its steps within 1 %; a cudagraph cell reports "
              "`phases_graphed`, its replay under forward",
    "autotune": "cuDNN's autotuning is timed apart: `autotune_s` > 0 with `cudnn_benchmark` and its limit recorded",
    "compile-cache": "an inductor cell's repeats read the cache its warm-up filled: each repeat's `compile_s` under "
                     "a tenth of the warm-up's",
    "dataset": "the slice's generated dataset is made before the slice",
    "mission-slice": "the mission's world-size-1 slice at the mission's own window (the largest part that fits): no "
                     "failed row; its matrix efficiency and largest non-window part",
    "data-wait-agreement": "the exposed data-wait fraction agrees with 1 - loader efficiency within 0.05 in every "
                           "real-data cell",
    "dali-cells": "the slice's DALI cells run",
    "overhead": "harness / bare loop throughput >= 0.99 (phase timing and NVTX on)",
    "profile": "`nvbench profile --tool torch` writes a trace",
    "mission-slice-smoke": "the CPU part: the slice's synthetic fp32 cell under --smoke, its figures and reports",
}
"""What each check proves, in the words gpu-acceptance.md writes beside its result and figure."""
CLAIMS |= {
    "kernels": "`nvbench ab --kernels` with side B drilled: CUDA kernels under forward, backward and optimizer in "
               "both sides' kernels.parquet, and the kernel diff names the drill's device work (issue 49)",
    "transients": "the start-transient check on GPU windows: benchmarks/transients.py over the slice's and the A/A's "
                  "steps (issue 42's GPU row)",
    "gpu-shared": "a cell run beside a foreign CUDA process says `gpu_shared`, naming its pid",
    "cold-start": "a cell without warm-up opens its window in a start transient: `is_steady` false, "
                  "`start_transient_steps` >= 1",
    "break-cudagraph": "the cudagraph test fails when the captured step ignores the LR (engine.py's fill_ broken)",
    "break-dali": "DALI's lifetime test fails when a zero-copy batch is not held (dali.py's hand_over removed)",
    "nsys-profile": "`nvbench profile --tool nsys` writes an Nsight Systems report of the window",
    "convnets": "the ConvNets family's synthetic fp16 NHWC cells run, MFU filled, beside DLE's A100 img/s",
    "compile-targets": "benchmarks/compile_targets.py: the compile axis's targets on the GPU slice",
}
