"""What ci/nightly.sh asks before and after it confirms a verdict with an interleaved A/B run:

    python -m harness.orchestrate.workflows.nightly targets REPORT_DIR   # the --only flags of the cells to confirm (empty: none)
    python -m harness.orchestrate.workflows.nightly code [RUN_DIR]       # the commit of the run's harness (no RUN_DIR: this
                                                   # checkout's), printed only when it is recorded and clean
    python -m harness.orchestrate.workflows.nightly ran AB_DIR           # exit 1 (and say why) when a side of an A/B has a
                                                   # cell without one ok repeat: no confirmation then
    python -m harness.orchestrate.workflows.nightly inconclusive REPORT_DIR  # one line per inconclusive cell, with the
                                                   # repeats it needs (the night's last, loud words)
    python -m harness.orchestrate.workflows.nightly gates REPORT_DIR  # one line per cell whose counted work broke a
                                                   # work gate of the matrix; exit 1 when any did
    python -m harness.orchestrate.workflows.nightly history HISTORY_DIR OUT_DIR --matrix MATRIX [--repo DIR]
        [--summary FILE]... [--no-ab WHY] [--reports DIR] [-- AB_FLAGS...]  # the trend, its new steps confirmed
                                                   # by A/B of their commits (harness.orchestrate.workflows.confirm), the
                                                   # promotions and acknowledgements marked; exit 1 when one is
                                                   # a confirmed slowdown
    python -m harness.orchestrate.workflows.nightly alarms REPORT_DIR --reports DIR --night RUN_ID [--summary FILE]...
                                                   # a regression alarms once (harness.orchestrate.workflows.alarm_step):
                                                   # the night's exit status, 1 only for a new or worse one

A confirmation targets the suspects of a history screen (suspects.json) or, in a baseline comparison
(verdicts.parquet), every regression, every inconclusive cell and every slowdown with p <= SCREEN_P: the A/B decides, so the
screen can be loose, and a slowdown the sequential comparison cannot confirm across nights (it carries
the machine's drift between them) still gets its interleaved test (benchmarks/detector.py measures both).

The baseline's code can be checked out again (a git worktree) only when its run recorded a commit and no
uncommitted changes; otherwise `code` prints nothing and the nightly falls back: a sequential rerun of
history suspects, the baseline verdict as it is. So it does when the A/B could not run a side (an old
commit whose harness no longer runs under tonight's runner fails every repeat).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import harness
from harness.results.store import CannotWrite
from harness.analysis.load import verdicts_file
from harness.analysis.load.runs import load_run
from harness.analysis.judge.verdict import INCONCLUSIVE, REGRESSION, CellVerdict
from harness.orchestrate.workflows.confirm import unusable_side
from harness.results import store
from harness.results.env import git_state
from harness.exits import EXIT_BAD_INPUT, EXIT_FAILURES, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_OK

SCREEN_P = 0.2
"""A baseline comparison's slowdown with a p-value up to this goes to the A/B confirmation."""


def targets(report_dir: Path) -> list[str]:
    """Sorted, de-duplicated `--only AXIS=VALUE` flags covering every cell the report asks to confirm."""
    if (report_dir / "suspects.json").is_file():
        flags = {f for s in store.read_json(report_dir / "suspects.json") for f in s["only"]}
    else:
        verdicts = verdicts_file.read_verdicts(report_dir / "verdicts.parquet")
        flags = {f for v in verdicts if _screened(v) for f in v.axis_filters()}
    return [arg for flag in sorted(flags) for arg in ("--only", flag)]


def _screened(v: CellVerdict) -> bool:
    if v.verdict in (REGRESSION, INCONCLUSIVE):  # the A/B decides what one night could not
        return True
    effect, p = v.decided_effect_pct, v.p_value  # the deciding metric's change, the cell's p
    return effect is not None and p is not None and effect < 0 and p <= SCREEN_P


def recorded_code(run_dir: Path | None) -> str | None:
    """The commit a run's harness came from (None: this checkout's), or None when it cannot be re-created."""
    if run_dir is None:
        sha, dirty = git_state(Path(harness.__file__).resolve().parent)  # the package, as collect_env reads it
    else:
        env = load_run(run_dir).environment
        sha, dirty = env.get("nvbench_git_sha"), env.get("nvbench_git_dirty")
    return sha if sha and dirty is False else None


def inconclusive_lines(report_dir: Path) -> list[str]:
    """`INCONCLUSIVE cell: reason` for every inconclusive cell of a report's verdicts.parquet (`NOT JUDGED cell:
    reason` for one the machine kept busy: a quiet machine, not more repeats, would decide it)."""
    verdicts = verdicts_file.read_verdicts(report_dir / "verdicts.parquet")
    return [f"  {'NOT JUDGED' if v.busy else 'INCONCLUSIVE'} {v.cell_id}: {v.reason}" for v in verdicts
            if v.verdict == INCONCLUSIVE]


def gate_lines(report_dir: Path) -> list[str]:
    """`WORK GATE BROKEN cell: work gate ... broken: <where>` for every cell of a report's verdicts.parquet whose
    counted work broke a gate: the night fails on it from one counted process, whatever the timing says."""
    verdicts = verdicts_file.read_verdicts(report_dir / "verdicts.parquet")
    return [f"  WORK GATE BROKEN {v.cell_id}: {v.work_gate}" for v in verdicts if v.work_gate]


def history_step(argv: list[str]) -> int:
    """The nightly's history step: the trend page of HISTORY_DIR into OUT_DIR, tonight's new steps confirmed by
    A/B (or each `could not confirm (WHY)` under --no-ab), the earlier nights' confirmations carried from the
    night before's OUT_DIR (RUN/history, where the nightly writes it). Exit 1 when a new step is a confirmed
    slowdown, 0 otherwise, 2 bad input."""
    from harness.analysis.nights import baselines, history
    from harness.analysis.pages import trend
    from harness.analysis.pages.wording import coverage_line
    from harness.analysis.load.runs import RunInputError
    from harness.orchestrate.workflows import ab, confirm

    p = argparse.ArgumentParser(prog="python -m harness.orchestrate.workflows.nightly history")
    p.add_argument("history_dir")
    p.add_argument("out")
    p.add_argument("--matrix", required=True, help="the matrix whose cells the A/B runs")
    p.add_argument("--repo", help="the git repository of the nights' commits (default: this harness's checkout)")
    p.add_argument("--summary", action="append", default=[], help="append tonight's new change points here")
    p.add_argument("--no-ab", metavar="WHY", help="run no A/B: every new step could not be confirmed, for WHY")
    p.add_argument("--reports", help="the reports folder whose promotions and acknowledgements the trends mark")
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: flags for nvbench ab (--repeats ...)
    args, ab_args = p.parse_args(argv[:cut]), argv[cut + 1:]
    out = Path(args.out)
    try:
        h = history.load_history(args.history_dir)
        answers = {i: a for i, a in confirm.carried(h, _earlier(h, trend)).items() if not h.changes[i].is_new}
        wanted = [i for i, c in enumerate(h.changes) if c.is_new and c.kind == "step"]
        if args.no_ab:
            answers |= {i: (history.COULD_NOT_CONFIRM, args.no_ab) for i in wanted}
        elif wanted:
            repo = Path(args.repo) if args.repo else ab.checkout_root()
            answers |= confirm.Confirmer(repo=repo, matrix=Path(args.matrix), out=out, ab_args=ab_args,
                                         notify=lambda line: print(line, file=sys.stderr)).run(h, wanted)
        marks = baselines.event_marks(Path(args.reports)) if args.reports else []
        result = trend.write_history(history.with_confirmations(h, answers), out, marks)
        for summary in map(Path, args.summary):
            before = summary.read_text(encoding="utf-8") if summary.is_file() else ""
            store.write_bytes(summary, (before + trend.new_changes_markdown(result.history)).encode())
    except RunInputError as exc:
        print(f"nightly history: {exc.problems[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except CannotWrite as exc:  # a step's failure, not the night's verdict: the night says the step failed
        print(f"nightly: {exc.line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"nightly history: {exc.filename or out}: cannot write the history: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # the worktrees are gone again (Confirmer.run's finally); no page half-written
        print("nightly history: interrupted during the A/B confirmation", file=sys.stderr)
        return EXIT_INTERRUPTED
    h = result.history
    print(coverage_line(h.coverage, f": {len(h.changes)} change(s), {sum(c.is_new for c in h.changes)} new tonight")
          + f"; trend in {out}")
    failing = [c for c in h.changes if c.is_new and confirm.fails_the_night(c)]
    for c in h.changes:
        if c.is_new:
            print(f"new {c.kind}: {c.cell_id} {c.metric} {trend.change_text(c)} at night {c.night} ({c.run_id}), "
                  f"commits {trend.commit_range(c)}" + (f": {trend.confirmation_text(c)}" if c.confirmation else ""),
                  file=sys.stderr)
    for w in h.work_steps:
        if w.is_new:
            print(f"new: {w.text()}, commits {w.commit_from}..{w.commit_to}", file=sys.stderr)
    if failing:
        return EXIT_FAILURES
    return EXIT_INCONCLUSIVE if h.coverage.nothing_to_judge else EXIT_OK


def _earlier(h, trend) -> list:
    """The changes the night before's page showed (its RUN/history/changes.parquet), or none."""
    if len(h.nights) < 2:
        return []
    path = Path(h.nights[-2].run.path) / "history" / "changes.parquet"
    try:
        return trend.read_changes(path) if path.is_file() else []
    except ValueError as exc:  # an unreadable page of the night before: tonight's stands without its words
        print(f"nightly history: {exc} (its confirmations are not carried)".splitlines()[0], file=sys.stderr)
        return []


def unfinished_jobs(run_dir: Path) -> tuple[int, int] | None:
    """(jobs without a row, jobs planned) of a run that stopped before its end (a full disk, a crash of nvbench
    itself: a failed cell still has its row), or None when every job has one."""
    from harness.orchestrate.session import runfolder

    _, jobs, _ = runfolder.load_plan(run_dir)
    left = runfolder.pending(run_dir, jobs)
    return (len(left), len(jobs)) if left else None


def main(argv: list[str]) -> int:
    if argv[:1] == ["alarms"]:
        from harness.orchestrate.workflows.alarm_step import alarm_step

        return alarm_step(argv[1:])
    if argv[:1] == ["culprits"]:  # its bisect is a child that ends with it
        from harness.orchestrate.session import stopping
        from harness.orchestrate.workflows.culprit_step import culprit_step

        return stopping.run(lambda: culprit_step(argv[1:]))
    if argv[:1] == ["history"]:  # SIGTERM from ci/nightly.sh stops it as Ctrl-C does: no worktree left behind
        from harness.orchestrate.session import stopping

        return stopping.run(lambda: history_step(argv[1:]))
    try:
        if argv[:1] == ["targets"] and len(argv) == 2:
            print(" ".join(targets(Path(argv[1]))))
            return EXIT_OK
        if argv[:1] == ["inconclusive"] and len(argv) == 2:
            print("\n".join(inconclusive_lines(Path(argv[1]))))
            return EXIT_OK
        if argv[:1] == ["gates"] and len(argv) == 2:
            lines = gate_lines(Path(argv[1]))
            for line in lines:
                print(line, file=sys.stderr)
            return EXIT_FAILURES if lines else EXIT_OK
        if argv[:1] == ["code"] and len(argv) <= 2:
            print(recorded_code(Path(argv[1]) if len(argv) == 2 else None) or "")
            return EXIT_OK
        if argv[:1] == ["culprit-lines"] and len(argv) == 2:
            from harness.orchestrate.workflows.culprit_step import culprit_lines

            for line in culprit_lines(Path(argv[1])):
                print(line)
            return EXIT_OK
        if argv[:1] == ["finished"] and len(argv) == 2:
            left = unfinished_jobs(Path(argv[1]))
            if left:
                print(f"nightly: {argv[1]}: {left[0]} of {left[1]} jobs never ended (the run stopped before its end)",
                      file=sys.stderr)
            return EXIT_FAILURES if left else EXIT_OK
        if argv[:1] == ["ran"] and len(argv) == 2:
            why = unusable_side(Path(argv[1]))
            if why:
                print(why, file=sys.stderr)
            return EXIT_FAILURES if why else EXIT_OK
    except (OSError, ValueError) as exc:  # a missing report or run folder: one line, exit 2
        print(f"harness.orchestrate.workflows.nightly: {exc}".splitlines()[0], file=sys.stderr)
        return EXIT_BAD_INPUT
    print("usage: python -m harness.orchestrate.workflows.nightly targets REPORT_DIR | code [RUN_DIR] | ran AB_DIR | "
          "gates REPORT_DIR | finished RUN_DIR", file=sys.stderr)
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
