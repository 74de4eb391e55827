"""Issue 57's coverage check: each feature the suite must keep covered is broken once in place (one line of its
code replaced), its tests run, the file restored; a feature whose tests still pass is reported uncovered.

    python benchmarks/break_features.py            # all six; exit 1 if any break went unnoticed

Each break names its file, the exact text replaced, what stands in for it, and the tests that must fail. The tests
are the exact ones (constructed rows, injected samples, fault injection), not timing."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Break:
    feature: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


BREAKS = (
    Break("the verdict's correction (Benjamini-Hochberg across cells)", "harness/stats/inference.py",
          "    return adjusted, adjusted <= q\n", "    return p, p <= q  # broken: no correction\n",
          ("tests/stats/test_inference.py", "tests/analysis/test_compare.py")),
    Break("the A/B's re-run of a spoiled window", "harness/orchestrate/workflows/rerun.py",
          "    if row.get(\"status\") != \"ok\":\n        return None\n",
          "    return None  # broken: nothing is ever spoiled\n",
          ("tests/orchestrate/test_rerun.py",
           "tests/orchestrate/test_ab.py::test_a_repeat_whose_window_opens_in_a_transient_runs_again_and_the_verdict"
           "_on_stdout_says_so")),
    Break("bisect's choice of the first bad commit", "harness/orchestrate/bisect/search.py",
          "        self.status[index] = outcome\n",
          "        self.status[index] = {BAD: GOOD, GOOD: BAD}.get(outcome, outcome)  # broken: outcomes swapped\n",
          ("tests/orchestrate/test_bisect.py::test_the_search_halves_the_open_range_and_steps_around_skipped_points",)),
    Break("the history's step (the night it names)", "harness/analysis/nights/history.py",
          "    at, before = series.points[step.index].night, series.points[step.index - 1].night\n",
          "    at, before = series.points[step.index - 1].night, series.points[step.index - 1].night  # broken\n",
          ("tests/analysis/test_history.py",)),
    Break("the alarm's once-only rule", "harness/analysis/nights/alarms.py",
          "    if previous is None or again:  # a night judged again is still its own first night\n",
          "    if True:  # broken: every night's regression is new again\n",
          ("tests/analysis/test_alarms.py",)),
    Break("the kernel diff's pairing (a kernel replaced under its operator)", "harness/analysis/judge/kernel_diff.py",
          "        for g, n in zip(gone[:big], new[:big]):\n",
          "        for g, n in []:  # broken: no kernel is paired\n",
          ("tests/analysis/test_kernel_diff.py",)),
)


def check(b: Break) -> tuple[bool, str]:
    """(the break failed a test, pytest's last line), the file restored whatever happens."""
    path = ROOT / b.path
    text = path.read_text()
    if text.count(b.old) != 1:
        return False, f"the anchor is not in {b.path} exactly once: update this script"
    try:
        path.write_text(text.replace(b.old, b.new))
        proc = subprocess.run([sys.executable, "-m", "pytest", *b.tests, "-q", "-p", "no:cacheprovider", "-x",
                               "-o", "addopts=--strict-markers"], cwd=ROOT, capture_output=True, text=True,
                              timeout=900)
    finally:
        path.write_text(text)
    lines = [x for x in proc.stdout.strip().splitlines() if x.strip()] or ["(no output)"]
    return proc.returncode == 1, lines[-1]


def main() -> int:
    missed = 0
    for b in BREAKS:
        failed, last = check(b)
        missed += not failed
        print(f"{'caught' if failed else 'MISSED'}: {b.feature} ({b.path}): {last}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
