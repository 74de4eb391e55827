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

TIMING = (
    "tests/orchestrate/test_verdicts_end_to_end.py",
    "tests/orchestrate/test_kernel_ab.py",
    "tests/orchestrate/test_bisect.py::test_bisect_on_its_defaults_survives_a_stop_then_names_the_second_commit_and_its_phase",
    "tests/orchestrate/test_confirm.py",
    "tests/orchestrate/test_nightly.py::test_nightly_describes_then_fails_on_a_fire_drill",
    "tests/orchestrate/test_nightly.py::test_a_stopped_night_leaves_no_process_and_its_run_resumes",
    "tests/orchestrate/test_nightly_alarms.py",
    "tests/analysis/test_history_e2e.py",
    "tests/orchestrate/test_ab.py::test_ab_with_more_pairs_while_inconclusive_starts_at_once_and_finishes",
    "tests/orchestrate/test_work_ab.py",
    "tests/cell/test_interference.py",
)
"""The tests that once decided on processes timed on this machine (docs/performance.md, "The test suite")."""


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
