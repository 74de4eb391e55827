"""What the commands share: exit codes, the bad-input printer, the reach warning, the threshold flags, the
environment probe and the report printer of report and ab."""

from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_FAILURES, EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
"""nvbench report / ab with --fail-on-regression: 0 every judged cell unchanged or improved (nothing failed);
1 a confirmed regression or a failed cell; 3 nothing regressed but some cell stayed inconclusive; 2 bad
input; 130 interrupted."""


def reach_warning(repeats: int, *, smoke: bool, what: str) -> None:
    """One line up front when runs of `repeats` repeats could never be told apart at the report's default level
    (a description needs no verdict: 1 repeat and --smoke runs say nothing)."""
    from harness.analysis.verdict import Thresholds
    from harness.analysis.decide import reach_problem

    if repeats >= 2 and not smoke and (problem := reach_problem(repeats, Thresholds().level, what=what)):
        print(f"warning: {problem}: two such runs can only be inconclusive", file=sys.stderr)


def bad_input(problems: list[str]) -> int:
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT


def env_and_caps(device: str):
    from harness.orchestrate.capabilities import probe_capabilities
    from harness.results.env import collect_env, env_key

    env = collect_env()
    return env, env_key(env), probe_capabilities(device, env)


def fire_drill_problem(pct: float | None) -> str | None:
    if pct is not None and not 0 < pct <= 1000:
        return f"--fire-drill {pct:g}: must be a percentage in (0, 1000]"
    return None


def add_threshold_flags(p: argparse.ArgumentParser, *, history: bool) -> None:
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 on a confirmed regression or a failed cell, 3 when nothing regressed but a cell "
                        "stayed inconclusive, 0 otherwise")
    p.add_argument("--floor", dest="floor_pct", type=float, metavar="PCT",
                   help="practical floor: smaller changes are never a regression (default: see harness/analysis/verdict.py)")
    p.add_argument("--fdr", dest="fdr_q", type=float, metavar="Q", help="Benjamini-Hochberg FDR across cells (0.01)")
    p.add_argument("--min-repeats", type=int, metavar="N", help="fewest usable repeats per side (5)")
    p.add_argument("--exclude-unsteady", action="store_true", default=None,
                   help="leave out repeats whose window failed the steadiness check")
    p.add_argument("--accuracy-tolerance", type=float, metavar="FRACTION", help="top-1 band half-width (0.01)")
    p.add_argument("--speed-adjust", action=argparse.BooleanOptionalAction, default=None,
                   help="compare CPU cells at equal machine-speed probe time where every repeat has a probe "
                        "(default on; docs/performance.md)")
    p.add_argument("--fast-steps", action=argparse.BooleanOptionalAction, default=None,
                   help="test the fast-step rate beside throughput where every repeat recorded it; either "
                        "can call a regression (default on; --no-fast-steps: throughput alone)")
    if history:
        p.add_argument("--history-runs", type=int, metavar="N", help="past runs that form the history baseline (10)")


def thresholds_from(args: argparse.Namespace):
    """verdict.Thresholds from the report/ab flags that were given (the rest keep their defaults)."""
    from harness.analysis.verdict import Thresholds

    given = {name: getattr(args, name) for name in ("floor_pct", "fdr_q", "min_repeats", "exclude_unsteady",
                                                     "history_runs", "accuracy_tolerance", "speed_adjust",
                                                     "fast_steps")
             if getattr(args, name, None) is not None}
    return Thresholds(**given)


def print_report(result, fail_on_regression: bool) -> int:
    """The report's files, its headline, and the cells a person must read (regressions, failures, then the
    inconclusive ones, loud, with the repeats each needs); the exit status of --fail-on-regression."""
    from harness.analysis.verdict import FAILED, INCONCLUSIVE
    from harness.analysis.wording import headline_words

    comparison = result.comparison
    for note in comparison.notes:
        if note.startswith("warning:"):
            print(note, file=sys.stderr)
    for path in result.files:
        print(path)
    print(f"{comparison.candidate.run_id} vs {comparison.baseline_label}: {headline_words(comparison)}",
          file=sys.stderr)
    for v in comparison.regressions:
        print(f"regression: {v.cell_id}: {v.reason}", file=sys.stderr)
    failed = [v for v in comparison.verdicts if v.verdict == FAILED]
    for v in failed:
        print(f"failed: {v.cell_id}: {v.reason}", file=sys.stderr)
    open_ = [v for v in comparison.verdicts if v.verdict == INCONCLUSIVE and not v.is_regression]
    if open_:
        print(f"INCONCLUSIVE: {len(open_)} cell(s) neither shown changed nor shown unchanged; not a pass:",
              file=sys.stderr)
        for v in open_:
            print(f"inconclusive: {v.cell_id}: {v.reason}", file=sys.stderr)
    if not fail_on_regression:
        return EXIT_OK
    if comparison.regressions or failed:
        return EXIT_FAILURES
    return EXIT_INCONCLUSIVE if open_ else EXIT_OK
