"""How far the estimate of cells no past row measured lands when it scales this machine's rows of other cells by
model cost (harness/orchestrate/cost/scaled.py): run a donor matrix into a fresh reports folder, then a target matrix
of other cells (another model) into the same folder, and print each target run's estimate beside what it took.

    python benchmarks/estimate_scaling.py --out reports/estimate-scaling --smoke

The donor is matrices/cpu-quick.toml (resnet18), the target matrices/resnet50.toml, both filtered to their
synthetic fp32 nchw cells of world size 1 (and grad_accum 1); --rounds repeats the target run so the spread of
`took` shows. Needs a quiet machine for figures (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONLY = ["--only", "backend=synthetic", "--only", "precision=fp32", "--only", "memory_format=nchw"]


def nvbench(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "harness", *args, "--quiet"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"nvbench {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[-500:]}")


def took_and_estimate(run_dir: Path) -> tuple[float, dict]:
    session = json.loads((run_dir / "manifest.json").read_text())["sessions"][-1]
    took = (datetime.fromisoformat(session["finished_at"]) - datetime.fromisoformat(session["started_at"]))
    return took.total_seconds(), session["estimate"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a fresh reports folder (the donor and target runs go there)")
    p.add_argument("--smoke", action="store_true", help="both matrices shrunk (--smoke): seconds, not minutes")
    p.add_argument("--rounds", type=int, default=1, help="target runs (default: %(default)s)")
    args = p.parse_args(argv)
    out = Path(args.out).absolute()
    if out.exists() and any(out.iterdir()):
        sys.exit(f"--out {out}: not empty (the estimate would learn from what is there)")
    smoke = ["--smoke"] if args.smoke else []
    target_only = ONLY + ["--only", "world_size=1", "--only", "grad_accum=1"]
    nvbench("run", "matrices/cpu-quick.toml", *ONLY, *smoke, "--out", str(out / "donors" / "donor"))
    print("round  estimated_s  took_s  off_pct  source")
    for k in range(args.rounds):
        run = out / "targets" / f"target-{k}"  # outside donors/: each round's estimate sees the donor alone
        nvbench("run", "matrices/resnet50.toml", *target_only, *smoke, "--out", str(run), "--reports",
                str(out / "donors"))
        took, est = took_and_estimate(run)
        print(f"{k:>5}  {est['wall_s']:>11.1f}  {took:>6.1f}  {100 * (est['wall_s'] / took - 1):>+7.0f}  "
              f"{est['source']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
