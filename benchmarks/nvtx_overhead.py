"""Cost of nvbench's NVTX ranges, so they can stay on in timed runs.

1. Per range: ns for one `with ranges(NAME):` (push + pop) with ranges off, on with no tool attached
   (the nvtx package then hands out a no-op domain), and on with a tool attached (tests/nvtx_inject.c,
   built here, loaded through NVTX_INJECTION64_PATH, logging off: a tool that records nothing, so this
   is the cost of reaching a tool; Nsight's own recording adds its buffer write).
2. Per step: ranges per optimizer step x that cost, against the step time.
3. End to end: `nvbench run` of one cell with run.nvtx = true (tool attached) and = false, fresh processes
   alternating in a seeded random order; the ratio on / off of throughput_img_per_s.

    python benchmarks/nvtx_overhead.py                       # CPU: resnet18, 16 px, batch 4, 6 rounds
    python benchmarks/nvtx_overhead.py --threads 1           # a shared CPU box: less noise per round
    python benchmarks/nvtx_overhead.py --model resnet50 --image-size 224 --batch-size 256 \
        --precision fp16 --memory-format nhwc --measure-steps 100 --rounds 6     # on a GPU
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIRS = 200_000

MICRO = textwrap.dedent("""
    import sys, time
    from harness.cell.instruments.timing import STEP, make_ranges
    ranges = make_ranges(sys.argv[1] == "on")
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter_ns()
        for _ in range({pairs}):
            with ranges(STEP):
                pass
        best = min(best, (time.perf_counter_ns() - t0) / {pairs})
    print(best)
""")

MATRIX = """
version = 1
[benchmark]
name = "nvtx-overhead"
model = "{model}"
num_classes = 1000
image_size = {image_size}
batch_size = {batch_size}
warmup_steps = {warmup_steps}
measure_steps = {measure_steps}
val_steps = 1
[axes]
backend = ["synthetic"]
precision = ["{precision}"]
memory_format = ["{memory_format}"]
[run]
nvtx = {nvtx}
threads_per_process = {threads}
"""


def build_tool(out: Path) -> Path | None:
    cc = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cc is None:
        return None
    lib = out / "libnvtx_inject.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(ROOT / "tests" / "nvtx_inject.c")],
                   check=True)
    return lib


def micro(mode: str, env: dict[str, str]) -> float:
    done = subprocess.run([sys.executable, "-c", MICRO.format(pairs=PAIRS), mode], capture_output=True,
                          text=True, check=True, cwd=ROOT, env=env)
    return float(done.stdout.strip())


def run_cell(args: argparse.Namespace, nvtx: bool, work: Path, env: dict[str, str]) -> tuple[float, float]:
    import pyarrow.parquet as pq

    matrix = work / f"m-{nvtx}.toml"
    matrix.write_text(MATRIX.format(nvtx=str(nvtx).lower(), **vars(args)))
    out = Path(tempfile.mkdtemp(dir=work))
    subprocess.run([sys.executable, "-m", "harness", "run", str(matrix), "--out", str(out / "run"),
                    "--no-progress"], check=True, cwd=ROOT, env=env, capture_output=True)
    (row,) = pq.read_table(out / "run" / "cells").to_pylist()
    return row["throughput_img_per_s"], row["step_time_median_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--image-size", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--memory-format", default="nchw")
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--measure-steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=0, help="torch threads per CPU cell; 0 = all cores")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="nvtx-overhead-"))
    lib = build_tool(work)
    base = {k: v for k, v in os.environ.items() if not k.startswith("NVTX_")}
    tool = base | {"NVTX_INJECTION64_PATH": str(lib)} if lib else None
    print(f"1. one range (push + pop), best of 7 x {PAIRS} in a fresh process:")
    print(f"   ranges off                  {micro('off', base):7.1f} ns")
    print(f"   ranges on, no tool attached {micro('on', base):7.1f} ns")
    if tool:
        print(f"   ranges on, tool attached    {micro('on', tool):7.1f} ns   (tests/nvtx_inject.c, logging off)")
    print("2. ranges per optimizer step: step + optimizer + (data, forward, backward) per micro-batch "
          "= 5 at grad_accum 1 (+1 h2d per batch in the CUDA prefetcher)")

    print(f"3. end to end, {args.rounds} rounds, fresh `nvbench run` each, order shuffled (seed {args.seed}):")
    order = [(r, nvtx) for r in range(args.rounds) for nvtx in (True, False)]
    random.Random(args.seed).shuffle(order)
    results: dict[bool, list[float]] = {True: [], False: []}
    for r, nvtx in order:
        ips, step = run_cell(args, nvtx, work, tool if (nvtx and tool) else base)
        results[nvtx].append(ips)
        print(f"   round {r} nvtx={'on ' if nvtx else 'off'} {ips:9.2f} img/s  median step {step * 1e3:8.2f} ms")
    ratios = [on / off for on, off in zip(results[True], results[False])]
    print(f"   on / off throughput: median {statistics.median(ratios):.4f}, "
          f"min {min(ratios):.4f}, max {max(ratios):.4f} (paired by round)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
