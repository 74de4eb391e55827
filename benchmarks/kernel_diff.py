"""How the kernel diff behaves over real A/Bs: at A/A (the same checkout both sides) how many A/As call any
operator changed (wanted: at most one in ten), and at A/B (a checkout whose resnet18 runs one extra 448 x 448
matmul per block) how many name aten::mm under forward (wanted: at least nine in ten); and what the profiler
costs (a profiled step's wall time against a timed one's, same cell, same A/Bs).

    python benchmarks/kernel_diff.py --out reports/kernel-bench                       # 10 A/A + 10 A/B, 5 + 5
    python benchmarks/kernel_diff.py --out /tmp/kb --runs 1 --repeats 2 --kernel-repeats 2   # the tiny scale

Every A/B is a real `nvbench ab --kernels` (timed pairs, then the profiled repeats interleaved), so the
figures include whatever else ran on the machine: take them on a quiet one and say so when publishing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.judge.kernel_diff import diff_cell# noqa: E402
from harness.analysis.judge.verdict import IMPROVEMENT, REGRESSION# noqa: E402
from harness.results.kernels import read_kernels  # noqa: E402

MATRIX = """version = 1
[benchmark]
name = "kernel-bench"
model = "resnet18"
num_classes = 10
image_size = 32
batch_size = 8
warmup_steps = 2
measure_steps = 10
val_steps = 1
[data]
workers = 0
[axes]
backend = ["synthetic"]
[run]
repeats = {repeats}
threads_per_process = 1
device = "cpu"
"""
SIZE = 448


def slower_checkout(folder: Path) -> Path:
    """A copy of this checkout's harness whose resnet18 runs one SIZE x SIZE matmul per residual block."""
    shutil.copytree(ROOT / "harness", folder / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    model = folder / "harness" / "models" / "resnet.py"
    old = "        out = self.bn2(self.conv2(out))\n"
    text = model.read_text().replace(old, old + "        torch.mm(_EXTRA, _EXTRA)\n")
    extra = f"\n_EXTRA = torch.ones({SIZE}, {SIZE})\n\n\nclass BasicBlock"
    model.write_text(text.replace("\nclass BasicBlock", extra, 1))
    return folder


def one_ab(matrix: Path, out: Path, args, checkout: Path | None) -> dict:
    argv = [sys.executable, "-m", "harness", "ab", str(matrix), "--kernels", "--out", str(out),
            "--kernel-repeats", str(args.kernel_repeats), "--kernel-steps", str(args.kernel_steps)]
    if checkout:
        argv += ["--b-checkout", str(checkout)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    import pyarrow.parquet as pq

    timed = pq.read_table(out / "a" / "cells").to_pylist()
    cell = timed[0]["cell_id"]
    d = diff_cell(read_kernels(out / "a" / "kernels.parquet"), read_kernels(out / "b" / "kernels.parquet"), cell)
    called = [(o.phase, o.operator) for o in d.operators if o.verdict in (REGRESSION, IMPROVEMENT)]
    step = lambda rows: statistics.median(r["images_per_step"] / r["throughput_img_per_s"]  # noqa: E731
                                          for r in rows if r["status"] == "ok")
    profiled = pq.read_table(out / "a" / "profile" / "cells").to_pylist()
    return {"called": called, "timed_step_s": step(timed), "profiled_step_s": step(profiled),
            "verdict_line": next((x for x in done.stdout.splitlines()
                                  if x.startswith(("regression", "improvement"))), "")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="folder for the A/B folders (must not exist)")
    p.add_argument("--runs", type=int, default=10, help="A/As and A/Bs each (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats a side (default: %(default)s)")
    p.add_argument("--kernel-repeats", type=int, default=5, help="profiled repeats a side (default: %(default)s)")
    p.add_argument("--kernel-steps", type=int, default=10, help="profiled steps each (default: %(default)s)")
    args = p.parse_args()
    args.out.mkdir(parents=True)
    matrix = args.out / "matrix.toml"
    matrix.write_text(MATRIX.format(repeats=args.repeats))
    slower = slower_checkout(args.out / "slower")
    results = {"A/A": [], "A/B": []}
    for i in range(args.runs):
        for kind, checkout in (("A/A", None), ("A/B", slower)):
            r = one_ab(matrix, args.out / f"{kind.replace('/', '')}-{i}", args, checkout)
            results[kind].append(r)
            print(f"{kind} {i}: called {r['called'] or 'nothing'}; profiled step {1e3 * r['profiled_step_s']:.1f} ms, "
                  f"timed {1e3 * r['timed_step_s']:.1f} ms", flush=True)
    aa = sum(bool(r["called"]) for r in results["A/A"])
    ab = sum(("forward", "aten::mm") in r["called"] for r in results["A/B"])
    ratios = [r["profiled_step_s"] / r["timed_step_s"] for rs in results.values() for r in rs]
    print(f"A/A calling any operator changed: {aa} of {args.runs} (wanted <= {max(1, args.runs // 10)})")
    print(f"A/B naming forward aten::mm: {ab} of {args.runs} (wanted >= {args.runs - max(1, args.runs // 10)})")
    print(f"profiler's cost: profiled / timed step time, median {statistics.median(ratios):.2f}x "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}, A side, {len(ratios)} A/Bs)")


if __name__ == "__main__":
    main()
