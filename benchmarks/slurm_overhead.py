"""The same CPU matrix run locally and through a real single-node SLURM, in one session: wall time, matrix
efficiency, and what SLURM adds per job.

    python benchmarks/slurm_overhead.py [MATRIX] [--rounds N]

Starts the test suite's SLURM (tests/orchestrate/slurm_cluster.py: munged, slurmctld, slurmd as root in a
temporary folder; no accounting, partition "batch", MinJobAge 2 s), then alternates `nvbench run MATRIX`
and `nvbench run MATRIX --executor slurm` (the matrix's [executor] defaults: exclusive nodes, so one job at a
time on the one node, as locally). Prints one line per run and the per-job difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "orchestrate"))

from slurm_cluster import SlurmCluster, unavailable_reason  # noqa: E402


def one_run(matrix: str, out: Path, env: dict[str, str], executor: str) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", "run", matrix, "--out", str(out), "--no-progress",
                           "--executor", executor], cwd=ROOT, env=os.environ | env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    manifest = json.loads((out / "manifest.json").read_text())
    return {"executor": executor, "exit": proc.returncode, "command_s": wall, "wall_s": manifest["wall_s"],
            "efficiency": manifest["matrix_efficiency"], "jobs": manifest["num_jobs"],
            "window_s": manifest["window_s_total"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("matrix", nargs="?", default="matrices/cpu-quick.toml")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    if reason := unavailable_reason():
        print(reason)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cluster = SlurmCluster(Path(tmp) / "slurm").start()
        try:
            results = []
            for r in range(args.rounds):
                for executor in ("local", "slurm"):
                    res = one_run(args.matrix, Path(tmp) / f"{executor}-{r}", cluster.env, executor)
                    results.append(res)
                    print(json.dumps(res), flush=True)
        finally:
            cluster.stop()
    for r in range(args.rounds):
        local, slurm = results[2 * r], results[2 * r + 1]
        print(f"round {r}: SLURM adds {(slurm['wall_s'] - local['wall_s']) / local['jobs']:.2f} s per job "
              f"(wall {local['wall_s']:.1f} -> {slurm['wall_s']:.1f} s; efficiency {local['efficiency']:.3f} -> "
              f"{slurm['efficiency']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
