"""The same CPU matrix run locally and through a real single-node SLURM, in one session: wall time, matrix
efficiency, and what SLURM adds per job.

    python benchmarks/slurm_overhead.py [MATRIX] [--rounds N] [--empty N] [--no-matrix]

Starts the test suite's SLURM (tests/orchestrate/slurm_cluster.py: munged, slurmctld, slurmd as root in a
temporary folder; no accounting, partition "batch", MinJobAge 2 s). First it times N empty jobs (`true`)
through each executor: the executor's own cost per job, nearly free of the machine's load. Then it alternates
`nvbench run MATRIX` and `nvbench run MATRIX --executor slurm` (the matrix's [executor] defaults: exclusive
nodes, so one job at a time on the one node, as locally), prints one line per run and the per-job
difference, and checks issue 27's acceptance on each pair: the SLURM run lands every row with its job id and
exits as the local run does (exit 1 when it does not).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "orchestrate"))

from slurm_cluster import SlurmCluster, unavailable_reason  # noqa: E402

from harness.orchestrate.placement.executors import Launch  # noqa: E402
from harness.orchestrate.placement.local import LocalExecutor  # noqa: E402
from harness.orchestrate.placement.slurm import SlurmExecutor  # noqa: E402
from harness.results import store  # noqa: E402
from harness.matrix.executor import ExecutorConfig  # noqa: E402


def one_run(matrix: str, out: Path, env: dict[str, str], executor: str) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", "run", matrix, "--out", str(out), "--no-progress",
                           "--executor", executor], cwd=ROOT, env=os.environ | env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    manifest = json.loads((out / "manifest.json").read_text())
    rows = store.read_cells(out).to_pylist() if (out / "cells").is_dir() else []
    return {"executor": executor, "exit": proc.returncode, "command_s": wall, "wall_s": manifest["wall_s"],
            "efficiency": manifest["matrix_efficiency"], "jobs": manifest["num_jobs"],
            "window_s": manifest["window_s_total"], "rows": len(rows),
            "statuses": dict(sorted(Counter(r["status"] for r in rows).items())),
            "with_job_id": sum(bool(r.get("slurm_job_id")) for r in rows)}


def empty_jobs(executor, root: Path, env: dict[str, str], count: int) -> list[float]:
    """Seconds from submit to the executor reporting the end of a job that does nothing (`true`), one job at a
    time: what the executor itself costs a job, nearly free of the machine's load (no cell runs)."""
    out = []
    for i in range(count):
        work = root / f"{executor.kind}-{i}"
        work.mkdir(parents=True)
        launch = Launch(key=f"empty-{executor.kind}-{i}", argv=("true",), env=os.environ | env,
                        log_path=root / f"{executor.kind}-{i}.log", work=work, timeout_s=60)
        t0 = time.monotonic()
        handle = executor.submit(launch)
        while handle not in executor.wait([handle]):
            pass
        out.append(time.monotonic() - t0)
    return out


def acceptance(local: dict, slurm: dict) -> list[str]:
    """Issue 27's acceptance on this pair: through a SLURM not configured for the matrix (partition "batch",
    MinJobAge 2 s, no accounting, no partition named), every job lands a row with its SLURM job id and the run
    exits and ends as the local one does. Empty when it holds."""
    problems = []
    if not slurm["rows"] == slurm["jobs"] == slurm["with_job_id"]:
        problems.append(f"SLURM run: {slurm['rows']} rows, {slurm['with_job_id']} with a job id, of "
                        f"{slurm['jobs']} jobs")
    if (slurm["exit"], slurm["statuses"]) != (local["exit"], local["statuses"]):
        problems.append(f"SLURM run exit {slurm['exit']} {slurm['statuses']} vs local exit {local['exit']} "
                        f"{local['statuses']}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("matrix", nargs="?", default="matrices/cpu-quick.toml")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--empty", type=int, default=5, help="empty jobs per executor (0: none)")
    ap.add_argument("--no-matrix", action="store_true", help="only the empty jobs")
    args = ap.parse_args()
    if reason := unavailable_reason():
        print(reason)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cluster = SlurmCluster(Path(tmp) / "slurm").start()
        try:
            os.environ.update(cluster.env)  # squeue and scontrol of the executor below
            executors = (("local", LocalExecutor()),
                         ("slurm, the default poll_s 5", SlurmExecutor(ExecutorConfig(kind="slurm"))),
                         ("slurm, poll_s 0.2", SlurmExecutor(ExecutorConfig(kind="slurm", poll_s=0.2))))
            for name, executor in executors if args.empty else ():
                times = sorted(empty_jobs(executor, Path(tmp) / "empty" / name.replace(" ", "_"), cluster.env,
                                          args.empty))
                print(json.dumps({"empty_jobs": name, "median_s": times[len(times) // 2], "min_s": times[0],
                                  "max_s": times[-1], "count": len(times)}), flush=True)
            results = []
            for r in range(0 if args.no_matrix else args.rounds):
                for executor in ("local", "slurm"):
                    res = one_run(args.matrix, Path(tmp) / f"{executor}-{r}", cluster.env, executor)
                    results.append(res)
                    print(json.dumps(res), flush=True)
        finally:
            cluster.stop()
    failed = []
    for r in range(len(results) // 2):
        local, slurm = results[2 * r], results[2 * r + 1]
        print(f"round {r}: SLURM adds {(slurm['wall_s'] - local['wall_s']) / local['jobs']:.2f} s per job "
              f"(wall {local['wall_s']:.1f} -> {slurm['wall_s']:.1f} s; efficiency {local['efficiency']:.3f} -> "
              f"{slurm['efficiency']:.3f})")
        failed += [f"round {r}: {p}" for p in acceptance(local, slurm)]
    for line in failed:
        print(f"acceptance FAILED: {line}")
    if results and not failed:
        print(f"acceptance: every round's SLURM run landed {results[1]['jobs']} rows with job ids and exited "
              f"{results[1]['exit']} as the local run did")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
