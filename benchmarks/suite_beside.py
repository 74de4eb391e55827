"""The gate beside another job, as a shared CI runner would run it: a fresh clone of a commit, `bash .ci/run` in it
while one busy loop (`python3 -c "while True: pass"`, normal priority, unpinned) runs for the whole time; prints the
exit, the wall time, the counts and every failing test by name (pytest's own JUnit XML, through PYTEST_ADDOPTS).

    python benchmarks/suite_beside.py [--commit HEAD] [--neighbours 1] [--runs 1] [--json OUT]

Run it with nothing else on the machine: the busy loop is the one neighbour it measures beside (0 neighbours: the
suite alone). Its figures go in docs/performance.md, "The test suite"."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUSY_LOOP = [sys.executable, "-c", "while True: pass"]


def failures(junit: Path) -> tuple[dict[str, int], list[str]]:
    """({tests, failures, errors, skipped}, the failing tests' ids) from pytest's JUnit XML."""
    if not junit.is_file():
        return {}, []
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for s in suites for case in s.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    return counts, failed


def one_run(commit: str, neighbours: int, folder: Path) -> dict:
    clone = folder / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
    sha = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()
    junit = folder / "junit.xml"
    env = dict(os.environ, PYTEST_ADDOPTS=f"--junitxml={junit}")
    env.pop("VIRTUAL_ENV", None)
    busy = [subprocess.Popen(BUSY_LOOP) for _ in range(neighbours)]
    start = time.monotonic()
    try:
        with open(folder / "ci-run.log", "w") as log:
            rc = subprocess.run(["bash", ".ci/run"], cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    finally:
        for p in busy:
            p.kill()
            p.wait()
    wall_s = time.monotonic() - start
    counts, failed = failures(junit)
    return {"commit": sha, "neighbours": neighbours, "exit": rc, "wall_s": round(wall_s, 1), **counts,
            "failed": failed, "log": str(folder / "ci-run.log")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commit", default="HEAD")
    p.add_argument("--neighbours", type=int, default=1, help="busy loops beside the suite (default 1)")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--json", type=Path, help="append each run's record here (JSON lines)")
    p.add_argument("--keep", type=Path, help="keep the clones and logs under this folder (default: a temporary one)")
    args = p.parse_args(argv)
    worst = 0
    for i in range(args.runs):
        folder = Path(tempfile.mkdtemp(prefix=f"suite-beside-{i}-", dir=args.keep))
        record = one_run(args.commit, args.neighbours, folder)
        worst = max(worst, record["exit"])
        minutes, seconds = divmod(record["wall_s"], 60)
        print(f"run {i + 1}: {record['commit']} beside {args.neighbours} busy loop(s): exit {record['exit']} in "
              f"{int(minutes)}m{seconds:04.1f}s; {record.get('tests', '?')} tests, {record.get('failures', '?')} "
              f"failed, {record.get('errors', '?')} errors, {record.get('skipped', '?')} skipped")
        for name in record["failed"]:
            print(f"  FAILED {name}")
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(json.dumps(record) + "\n")
    return worst


if __name__ == "__main__":
    sys.exit(main())
