"""How often a test passes: each chosen test run N times, each time in a fresh pytest process (so no run leans on
another's fixtures or caches), its outcome and wall time written per run, and a pass rate per test.

    python benchmarks/flakiness.py --runs 20 --out reports/flakiness tests/orchestrate/test_kernel_ab.py::test_x ...
    python benchmarks/flakiness.py --runs 20 --timing --out reports/flakiness   # every test listed in TIMING

A test below N/N is flaky: fix it or make it exact (issue 57); docs/performance.md keeps the rates of every test
that ever depended on timing. Runs one test at a time, nothing beside it: the rates are of the machine as it is."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TIMING = (  # the gate's tests whose outcome could still meet this machine's speed (issue 57's audit)
    "tests/orchestrate/test_kernel_ab.py",
    "tests/orchestrate/test_work_ab.py::test_beside_a_neighbour_that_stays_the_timing_is_undecided_and_the_work_diff_still_names_the_sync",
    "tests/orchestrate/test_busy_ab.py",
    "tests/orchestrate/test_distributed.py::test_a_failing_rank_ends_its_cell_within_the_timeout_and_leaves_no_process",
    "tests/orchestrate/test_stopping.py::test_a_stopped_run_leaves_no_process_and_resumes",
    "tests/orchestrate/test_slots.py::test_the_local_executor_follows_several_processes_each_to_its_own_end_or_timeout",
    "tests/cell/test_interference.py",
    "tests/orchestrate/test_confirm.py::test_a_step_between_two_commits_of_the_same_code_is_not_confirmed",
    "tests/orchestrate/test_nightly.py::test_a_stopped_night_leaves_no_process_and_its_run_resumes",
)
"""The gate's tests that once decided on, or still meet, processes timed on this machine (docs/performance.md, "The
test suite"); the e2e lane's were measured in earlier sessions."""


def run_once(test: str, timeout_s: float) -> tuple[str, float, str]:
    """(outcome, seconds, last line) of one fresh pytest process running `test`."""
    argv = [sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider", "-o", "addopts=--strict-markers"]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, f"over {timeout_s:.0f} s"
    seconds = time.monotonic() - t0
    lines = [x for x in proc.stdout.strip().splitlines() if x.strip()] or ["(no output)"]
    if proc.returncode not in (0, 5):  # what failed, where: the assertion's lines beside the summary
        lines = [x for x in lines if x.startswith(("E ", ">", "FAILED"))][:6] + lines[-1:]
        return "failed", seconds, " | ".join(lines)
    outcome = {0: "passed", 5: "none collected"}.get(proc.returncode, "failed")
    if outcome == "passed" and " skipped" in lines[-1] and " passed" not in lines[-1]:
        outcome = "skipped"
    return outcome, seconds, lines[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", nargs="*", help="pytest node ids or files")
    parser.add_argument("--timing", action="store_true", help="add every test of TIMING")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run before it counts as a failure")
    parser.add_argument("--out", type=Path, required=True, help="folder for runs.jsonl and rates.md")
    args = parser.parse_args(argv)
    tests = [*args.tests, *(TIMING if args.timing else ())]
    if not tests:
        parser.error("name tests, or --timing")
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "runs.jsonl"
    results: dict[str, list[dict]] = {t: [] for t in tests}
    for k in range(args.runs):  # round by round: a drift of the machine reaches every test alike
        for test in tests:
            outcome, seconds, last = run_once(test, args.timeout)
            entry = {"test": test, "run": k, "outcome": outcome, "seconds": round(seconds, 2), "last": last}
            results[test].append(entry)
            with log.open("a") as f:
                f.write(json.dumps(entry) + "\n")
            print(f"{k + 1}/{args.runs} {outcome:>8} {seconds:6.1f} s  {test}", flush=True)
    rows = ["| test | passed | runs | wall s (min-max) | failures |", "|---|---|---|---|---|"]
    for test, entries in results.items():
        passed = sum(e["outcome"] in ("passed", "skipped") for e in entries)
        secs = [e["seconds"] for e in entries]
        fails = "; ".join(f"run {e['run']}: {e['last']}" for e in entries if e["outcome"] not in ("passed", "skipped"))
        rows.append(f"| {test} | {passed}/{len(entries)} | {len(entries)} | {min(secs):.0f}-{max(secs):.0f} | "
                    f"{fails or '-'} |")
    (args.out / "rates.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0 if all(all(e["outcome"] in ("passed", "skipped") for e in v) for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
