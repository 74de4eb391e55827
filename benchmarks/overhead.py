"""Harness overhead: nvbench's reported throughput vs a bare, hand-written loop of the same model, batch and
precision on synthetic data. Both sides run in fresh processes, alternating in a seeded random order, so
machine drift hits both alike. Prints each round and the ratio harness / bare with its spread.

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bare_loop(args: argparse.Namespace) -> float:
    """The loop a user would write by hand: no harness, one sync at the end of the timed steps."""
    import torch
    import torch.nn.functional as F

    from harness.models import build_model

    device = torch.device("cuda" if torch.cuda.is_available() and args.device != "cpu" else "cpu")
    torch.manual_seed(0)
    fmt = torch.channels_last if args.memory_format == "nhwc" else torch.contiguous_format
    model = build_model(args.model, num_classes=1000).to(device, memory_format=fmt)
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device).to(memory_format=fmt)
    y = torch.randint(0, 1000, (args.batch_size,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.875, weight_decay=3e-5)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return args.steps * args.batch_size / (time.perf_counter() - t0)


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
"""


def harness_run(args: argparse.Namespace, workdir: Path, index: int) -> float:
    matrix = workdir / "overhead.toml"
    matrix.write_text(MATRIX.format(**vars(args)))
    out = workdir / f"run{index}"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(matrix), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"nvbench run failed:\n{proc.stderr[-2000:]}")
    import pyarrow.parquet as pq

    return pq.read_table(out / "cells").column("throughput_img_per_s")[0].as_py()


def bare_run(args: argparse.Namespace) -> float:
    argv = [sys.executable, __file__, "--bare"] + [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                                                   if k not in ("bare", "rounds", "seed")]
    from harness.runner import with_stable_malloc

    # the allocator settings nvbench gives its cells (run.malloc = "stable"): overhead, not malloc, is measured
    env = dict(os.environ, GLIBC_TUNABLES=with_stable_malloc(os.environ.get("GLIBC_TUNABLES")))
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"bare loop failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["img_per_s"]


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
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.bare:
        print(json.dumps({"img_per_s": bare_loop(args)}))
        return
    rng = random.Random(args.seed)
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = ["harness", "bare"]
            rng.shuffle(order)
            got = {side: (harness_run(args, Path(tmp), i) if side == "harness" else bare_run(args)) for side in order}
            ratios.append(got["harness"] / got["bare"])
            print(f"round {i}: harness {got['harness']:9.1f} img/s   bare {got['bare']:9.1f} img/s   "
                  f"ratio {ratios[-1]:.3f}   (order: {' then '.join(order)})", flush=True)
    spread = statistics.stdev(ratios) if len(ratios) > 1 else float("nan")
    print(f"harness / bare: median {statistics.median(ratios):.3f}, mean {statistics.mean(ratios):.3f} "
          f"± {spread:.3f} (sd), min {min(ratios):.3f}, max {max(ratios):.3f} over {len(ratios)} rounds")


if __name__ == "__main__":
    main()
