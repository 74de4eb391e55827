"""Harness overhead: nvbench's reported throughput vs a bare loop doing the same work on synthetic data. Both
sides run one cell parsed from the same matrix text, in fresh processes, alternating in a seeded random order
so machine drift hits both alike. Prints each round and the ratio harness / bare with its spread; `--json PATH`
also writes those figures as data (what ci/gpu_acceptance.py reads).

    python benchmarks/overhead.py --rounds 6                         # CPU defaults: resnet18, 32 px, batch 32
    python benchmarks/overhead.py --model resnet50 --image-size 224 --batch-size 256 --precision fp16 \
        --memory-format nhwc --steps 100 --warmup 30                 # the GPU acceptance configuration
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MATRIX = """
version = 1
[benchmark]
name = "overhead"
model = "{model}"
num_classes = 1000
image_size = {image_size}
batch_size = {batch_size}
warmup_steps = {warmup}
measure_steps = {steps}
val_steps = 1
[axes]
backend = ["synthetic"]
memory_format = ["{memory_format}"]
precision = ["{precision}"]
[run]
device = "{device}"
speed_probe = {speed_probe}
phase_timing = {phase_timing}
"""


def overhead_matrix(args: argparse.Namespace) -> str:
    """The one matrix both sides read: the harness runs it, the bare loop builds its cell from it."""
    return MATRIX.format(**(vars(args) | {"speed_probe": str(args.speed_probe).lower(),
                                          "phase_timing": str(args.phase_timing).lower()}))


def bare_cell(args: argparse.Namespace):
    """The single cell of overhead_matrix, parsed and expanded as `nvbench run` does."""
    from harness.matrix.cells import expand
    from harness.matrix.parse import parse_matrix

    text = overhead_matrix(args)
    (cell,) = expand(parse_matrix(tomllib.loads(text), "overhead.toml", text))
    return cell


def build_bare(args: argparse.Namespace):
    """(cell, engine, images, labels): the engine a cell process builds (harness.cell.build.build_engine: param
    groups, fused SGD, GradScaler, label smoothing, autocast, channels_last, LR schedule) and the batch its
    synthetic loader serves, with the process settings the worker applies. Nothing else of the harness."""
    import torch

    from harness.cell.build import build_engine
    from harness.data import LoaderSpec, build_loader

    cell = bare_cell(args)
    is_cuda = cell.run.device != "cpu" and torch.cuda.is_available()
    device = torch.device("cuda", 0) if is_cuda else torch.device("cpu")
    if is_cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = cell.recipe.cudnn_benchmark
    else:
        torch.set_num_threads(cell.run.threads_per_process or len(os.sched_getaffinity(0)))
    torch.manual_seed(cell.benchmark.seed)
    b = cell.benchmark
    spec = LoaderSpec(root=None, split="train", batch_size=b.batch_size, image_size=b.image_size,
                      num_classes=b.num_classes, memory_format=cell.memory_format, device=str(device), seed=b.seed)
    loader = build_loader("synthetic", spec)
    engine = build_engine(cell, device, dataset_images=loader.num_images)  # the LR timeline's epoch, as a cell's
    images, labels = next(iter(loader))
    return cell, engine, images, labels


def bare_loop(args: argparse.Namespace) -> float:
    """The engine's steps in a plain loop: no NVTX, no step clocks, no data-wait timing; one sync at the end."""
    import torch

    cell, engine, images, labels = build_bare(args)
    accum, b = cell.grad_accum, cell.benchmark

    def step() -> None:
        for micro in range(accum):
            engine.forward_backward(images, labels, sync_grads=micro == accum - 1)
        engine.optimizer_step()

    for _ in range(b.warmup_steps):
        step()
    if engine.device.type == "cuda":
        torch.cuda.synchronize(engine.device)  # sync: the timed steps start on an idle GPU
    t0 = time.perf_counter()
    for _ in range(b.measure_steps):
        step()
    if engine.device.type == "cuda":
        torch.cuda.synchronize(engine.device)  # sync: the one read of the clock needs all kernels done
    return b.measure_steps * cell.images_per_step / (time.perf_counter() - t0)


def harness_run(args: argparse.Namespace, workdir: Path, index: int) -> float:
    matrix = workdir / "overhead.toml"
    matrix.write_text(overhead_matrix(args))
    out = workdir / f"run{index}"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(matrix), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"nvbench run failed:\n{proc.stderr[-2000:]}")
    import pyarrow.parquet as pq

    return pq.read_table(out / "cells").column("throughput_img_per_s")[0].as_py()


def bare_run(args: argparse.Namespace) -> float:
    flags = [(k.replace("_", "-"), v) for k, v in vars(args).items() if k not in ("bare", "rounds", "seed", "json")]
    argv = [sys.executable, __file__, "--bare"] + [
        (f"--{k}" if v else f"--no-{k}") if isinstance(v, bool) else f"--{k}={v}" for k, v in flags]
    from harness.orchestrate.session.job import with_stable_malloc

    # the allocator settings nvbench gives its cells (run.malloc = "stable"): overhead, not malloc, is measured
    env = dict(os.environ, GLIBC_TUNABLES=with_stable_malloc(os.environ.get("GLIBC_TUNABLES")))
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"bare loop failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["img_per_s"]


def figures(rounds: list[dict]) -> dict:
    """The run's figures as data: each round ({round, harness_img_per_s, bare_img_per_s, ratio, order}) and the
    ratios' median, mean, sd (null under two rounds), min and max (null without a round)."""
    ratios = [r["ratio"] for r in rounds]
    if not ratios:
        return {"rounds": [], **dict.fromkeys(("median_ratio", "mean_ratio", "sd_ratio", "min_ratio", "max_ratio"))}
    return {"rounds": rounds, "median_ratio": statistics.median(ratios), "mean_ratio": statistics.mean(ratios),
            "sd_ratio": statistics.stdev(ratios) if len(ratios) > 1 else None, "min_ratio": min(ratios),
            "max_ratio": max(ratios)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--precision", default="fp32", choices=("fp32", "fp16", "bf16"))
    p.add_argument("--memory-format", default="nchw", choices=("nchw", "nhwc"))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--speed-probe", action=argparse.BooleanOptionalAction, default=True,
                   help="run.speed_probe of the harness side (CPU cells; default on, as in nvbench)")
    p.add_argument("--phase-timing", action=argparse.BooleanOptionalAction, default=True,
                   help="run.phase_timing of the harness side (per-phase step timing; default on, as in nvbench)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None,
                   help="also write the rounds and the ratio's figures to this JSON file (default: none)")
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.bare:
        print(json.dumps({"img_per_s": bare_loop(args)}))
        return
    rng = random.Random(args.seed)
    ratios, rounds = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = ["harness", "bare"]
            rng.shuffle(order)
            got = {side: (harness_run(args, Path(tmp), i) if side == "harness" else bare_run(args)) for side in order}
            ratios.append(got["harness"] / got["bare"])
            rounds.append({"round": i, "harness_img_per_s": got["harness"], "bare_img_per_s": got["bare"],
                           "ratio": ratios[-1], "order": order})
            print(f"round {i}: harness {got['harness']:9.1f} img/s   bare {got['bare']:9.1f} img/s   "
                  f"ratio {ratios[-1]:.3f}   (order: {' then '.join(order)})", flush=True)
    spread = statistics.stdev(ratios) if len(ratios) > 1 else float("nan")
    print(f"harness / bare: median {statistics.median(ratios):.3f}, mean {statistics.mean(ratios):.3f} "
          f"± {spread:.3f} (sd), min {min(ratios):.3f}, max {max(ratios):.3f} over {len(ratios)} rounds")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures(rounds), indent=2) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # the bare side imports this checkout's harness, as `-m harness` does here
    main()
