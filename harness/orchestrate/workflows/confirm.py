"""Confirming a history's new change points before they alarm: the cells of a step run again as an interleaved
A/B (`nvbench ab`, adaptive repeats) of the commit of the night before the step (A) and the commit of its first
night (B), each checked out as a git worktree; the step is then `confirmed` (the A/B finds the same change),
`not confirmed` (it finds none, or cannot tell) or `could not confirm` (with why: a commit not recorded clean
or not in the repository, the same commit on both nights, a side that could not run). A night's confirmations
are carried to the next night's page from its changes.parquet.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.analysis.judge import decide
from harness.analysis.nights.history import CONFIRMED, COULD_NOT_CONFIRM, NOT_CONFIRMED, Change, History
from harness.analysis.load.runs import load_run
from harness.orchestrate.session import stopping
from harness.matrix.sections import AXES
from harness.catalogue import col
from harness.catalogue.kernels import OPERATORS_NOTE
from harness.exits import EXIT_BAD_INPUT, EXIT_FAILURES, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_OK
from harness.results.env import short_commit

Confirmation = tuple[str, str]
"""(confirmed | not confirmed | could not confirm, the note that says why)."""
RATES = ("throughput", "fast steps")
"""The metrics an A/B judges (its verdict rests on one of them)."""


def unusable_side(ab_dir: Path) -> str | None:
    """Why an A/B run confirms nothing (a side with a cell that has no ok repeat), or None. Cells skipped
    on this machine (a GPU cell on a CPU box, caught by the widened --only filters) do not count."""
    runs = {side: load_run(ab_dir / side) for side in ("a", "b")}
    cells = {row[col.cell_id] for run in runs.values() for row in run.rows if row["status"] != "skipped"}
    for side, run in runs.items():
        ok = {row[col.cell_id] for row in run.rows if row["status"] == "ok"}
        if missing := sorted(cells - ok):
            return f"{ab_dir / side}: no ok repeat of {', '.join(missing)} (see its logs/)"
    return None


@dataclass(frozen=True, slots=True)
class Pair:
    """One A/B to run: the commit before (a) and after (b), and the changes it decides."""

    a: str
    b: str
    changes: tuple[int, ...]


def _sha(history: History, run_id: str) -> tuple[str | None, str]:
    """The full commit a night's harness ran, or None and why it cannot be checked out again."""
    night = next(n for n in history.nights if n.run_id == run_id)
    env = night.run.environment
    sha, dirty = env.get("nvbench_git_sha"), env.get("nvbench_git_dirty")
    if not sha:
        return None, f"night {run_id} recorded no commit"
    if dirty is not False:
        return None, f"night {run_id} ran commit {short_commit(sha)} with uncommitted changes"
    return str(sha), ""


def plan(history: History, wanted: Sequence[int]) -> tuple[list[Pair], dict[int, Confirmation]]:
    """The A/Bs that decide the changes `wanted` (indices into history.changes), and the answer already known
    for those no A/B of commits can decide."""
    pairs: dict[tuple[str, str], list[int]] = {}
    known: dict[int, Confirmation] = {}
    for i in wanted:
        c = history.changes[i]
        if c.kind != "step" or c.metric not in RATES:
            known[i] = (COULD_NOT_CONFIRM, f"an A/B judges throughput and fast steps, not a {c.metric} {c.kind}")
            continue
        (a, why_a), (b, why_b) = _sha(history, c.previous_run_id), _sha(history, c.run_id)
        if a is None or b is None:
            known[i] = (COULD_NOT_CONFIRM, why_a or why_b)
        elif a == b:
            known[i] = (COULD_NOT_CONFIRM, (f"both nights ran commit {short_commit(a)}: no change of the code to test "
                                            "(the machine or its environment changed)"))
        else:
            pairs.setdefault((a, b), []).append(i)
    return [Pair(a, b, tuple(ix)) for (a, b), ix in pairs.items()], known


def only_flags(changes: Sequence[Change]) -> list[str]:
    """`--only AXIS=VALUE` flags covering the changes' cells (widened to every value any of them has)."""
    flags = sorted({f"{axis}={getattr(c, axis)}" for c in changes for axis in AXES if getattr(c, axis) is not None})
    return [arg for flag in flags for arg in ("--only", flag)]


def judge(change: Change, verdicts: Mapping[str, Any]) -> Confirmation:
    """What the A/B's verdict (a CellVerdict per cell id) of the change's cell says about the change."""
    v = verdicts.get(change.cell_id)
    if v is None or v.verdict not in (decide.REGRESSION, decide.IMPROVEMENT, decide.UNCHANGED, decide.INCONCLUSIVE):
        why = f"{v.verdict}: {v.reason}" if v is not None else "no verdict"
        return COULD_NOT_CONFIRM, f"the A/B has no decision on this cell ({why})"
    effect = v.throughput.effect_pct
    low, high = v.throughput.ci_low_pct, v.throughput.ci_high_pct
    said = (f"A/B: {v.verdict}" + (f" {effect:+.1f}%" if effect is not None else "")
            + (f" [{low:+.1f}, {high:+.1f}]" if low is not None and high is not None else "")
            + f" in {v.num_candidate} pairs")
    same_way = decide.REGRESSION if change.change < 0 else decide.IMPROVEMENT
    if v.verdict == same_way:
        return CONFIRMED, said + (f"; {v.attribution}" if v.attribution else "") \
            + (f"{OPERATORS_NOTE}{v.operators}" if v.operators else "")  # the kernel diff's line, where it profiled
    if v.verdict == decide.INCONCLUSIVE:  # its reason carries the change and its interval
        return NOT_CONFIRMED, f"A/B: inconclusive in {v.num_candidate} pairs: {v.reason}"
    return NOT_CONFIRMED, said


class Confirmer:
    """Runs the A/Bs of a plan: worktrees of the commits under `out`, one `nvbench ab` per pair."""

    def __init__(self, *, repo: Path, matrix: Path, out: Path, ab_args: Sequence[str],
                 notify: Callable[[str], None] = print) -> None:
        self.repo, self.matrix, self.out, self.ab_args, self.notify = repo, matrix, out, list(ab_args), notify

    def run(self, history: History, wanted: Sequence[int]) -> dict[int, Confirmation]:
        pairs, answers = plan(history, wanted)
        try:
            for pair in pairs:
                changes = [history.changes[i] for i in pair.changes]
                answers |= {i: a for i, a in zip(pair.changes, self._pair(pair, changes))}
        finally:
            self.cleanup()
        return answers

    def _pair(self, pair: Pair, changes: list[Change]) -> list[Confirmation]:
        checkouts = {}
        for side, sha in (("a", pair.a), ("b", pair.b)):
            path, why = self.worktree(sha)
            if path is None:
                return [(COULD_NOT_CONFIRM, why)] * len(changes)
            checkouts[side] = path
        folder = self.out / f"ab-{pair.a[:8]}-{pair.b[:8]}"
        shutil.rmtree(folder, ignore_errors=True)
        self.notify(f"confirming {len(changes)} change point(s) by A/B: A = {short_commit(pair.a)} (before), "
                    f"B = {short_commit(pair.b)} (after), in {folder}")
        t0 = time.monotonic()
        argv = [sys.executable, "-m", "harness", "ab", str(self.matrix), "--out", str(folder), "--a-checkout",
                str(checkouts["a"]), "--b-checkout", str(checkouts["b"]), *only_flags(changes), *self.ab_args]
        # a change the A/B calls gets its profiled repeats (nvbench ab's --kernel-repeats): the note names operators
        proc = stopping.run_child(argv)  # stopped with this process, never left running on its own
        why = self._unusable(folder, proc)
        if why:
            self.notify(f"  could not confirm: {why}")
            return [(COULD_NOT_CONFIRM, why)] * len(changes)
        from harness.analysis.load import verdicts_file

        verdicts = {v.cell_id: v for v in verdicts_file.read_verdicts(folder / "report" / "verdicts.parquet")}
        answers = [judge(c, verdicts) for c in changes]
        for c, (word, note) in zip(changes, answers):
            self.notify(f"  {c.cell_id} {c.metric} {c.change:+.1f}{'%' if c.unit == '%' else ' pt'}: {word} ({note})")
        self.notify(f"  ({time.monotonic() - t0:.0f} s)")
        return answers

    @staticmethod
    def _unusable(folder: Path, proc: subprocess.CompletedProcess) -> str:
        """Why an A/B confirms nothing ("" when it can be read)."""
        if not (folder / "report" / "verdicts.parquet").is_file():
            tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or ["no output"]
            return f"the A/B did not run (exit {proc.returncode}: {tail[0]})"
        try:
            side = unusable_side(folder)
        except (OSError, ValueError) as exc:
            return f"the A/B's runs cannot be read ({exc})".splitlines()[0]
        return f"a side of the A/B could not run its cells ({side})" if side else ""

    def worktree(self, sha: str) -> tuple[Path | None, str]:
        """A worktree of `sha` under out/worktrees, or None and why it cannot be made."""
        path = self.out / "worktrees" / short_commit(sha)
        if (path / "harness").is_dir():
            return path, ""
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["git", "-C", str(self.repo), "worktree", "add", "--detach", "--force", str(path), sha],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            last = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or ["git failed"]
            return None, f"commit {short_commit(sha)} cannot be checked out in {self.repo} ({last[0]})"
        return path, ""

    def cleanup(self) -> None:
        """Remove the worktrees this confirmation made."""
        folder = self.out / "worktrees"
        if not folder.exists():
            return
        for path in folder.iterdir():
            subprocess.run(["git", "-C", str(self.repo), "worktree", "remove", "--force", str(path)],
                           capture_output=True, check=False)
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["git", "-C", str(self.repo), "worktree", "prune"], capture_output=True, check=False)


def carried(history: History, earlier: Sequence[Change]) -> dict[int, Confirmation]:
    """The confirmations an earlier night's page gave the changes still shown tonight (the same cell, metric and
    kind, starting within a night of it, the same sign)."""
    out = {}
    for i, c in enumerate(history.changes):
        for e in earlier:
            if e.confirmation and e.cell_id == c.cell_id and e.metric == c.metric and e.kind == c.kind \
                    and abs(e.night - c.night) <= 1 and (e.change > 0) == (c.change > 0):
                out[i] = (e.confirmation, e.confirmation_note or "")
                break
    return out


def fails_the_night(change: Change) -> bool:
    """A confirmed change for the worse: a rate that fell (only rates are confirmed)."""
    return change.confirmation == CONFIRMED and change.metric in RATES and change.change < 0


Answer = Callable[[History], Mapping[int, Confirmation]]
"""What a trend asks of its history before the page is drawn: the confirmations of its changes, by index."""


def write_trend(history_dir: Path, out: Path, *, settings=None, use_cache: bool = True, reports: Path | None = None,
                summaries: Sequence[Path] = (), answer: Answer | None = None):
    """The one history conductor (`nvbench history` and the nightly's history step): the nights of HISTORY_DIR
    analysed, the changes confirmed as `answer` says (None: none asked), the trend page written into OUT with the
    promotions and acknowledgements of `reports` marked, and tonight's new change points appended to each summary.
    trend.write_history's result."""
    from harness.analysis.nights import baselines, history
    from harness.analysis.pages import trend
    from harness.results import store

    loaded = history.load_history(history_dir, settings, use_cache=use_cache)
    if answer is not None:
        loaded = history.with_confirmations(loaded, answer(loaded))
    marks = baselines.event_marks(Path(reports)) if reports else []
    result = trend.write_history(loaded, out, marks)
    for summary in map(Path, summaries):
        before = summary.read_text(encoding="utf-8") if summary.is_file() else ""
        store.write_bytes(summary, (before + trend.new_changes_markdown(result.history)).encode())
    return result


def new_lines(h: History) -> list[str]:
    """One line per change and per work step new tonight (stderr's words of both callers of write_trend)."""
    from harness.analysis.pages import trend

    lines = [f"new {c.kind}: {c.cell_id} {c.metric} {trend.change_text(c)} at night {c.night} ({c.run_id}), "
             f"commits {trend.commit_range(c)}" + (f": {trend.confirmation_text(c)}" if c.confirmation else "")
             for c in h.changes if c.is_new]
    return lines + [f"new: {w.text()}, commits {w.commit_from}..{w.commit_to}" for w in h.work_steps if w.is_new]


def nightly_answer(out: Path, *, matrix: Path, repo: Path | None = None, ab_args: Sequence[str] = (),
                   no_ab: str | None = None) -> Answer:
    """The nightly's answers: the earlier nights' confirmations carried from the night before's page (its
    RUN/history), tonight's new steps confirmed by A/B of their commits (each `could not confirm (NO_AB)` when
    no A/B may run)."""
    from harness.analysis.nights.history import COULD_NOT_CONFIRM as CANNOT
    from harness.orchestrate.workflows import ab

    def answer(h: History) -> dict[int, Confirmation]:
        answers = {i: a for i, a in carried(h, _earlier(h)).items() if not h.changes[i].is_new}
        wanted = [i for i, c in enumerate(h.changes) if c.is_new and c.kind == "step"]
        if no_ab:
            return answers | {i: (CANNOT, no_ab) for i in wanted}
        if wanted:
            answers |= Confirmer(repo=repo or ab.checkout_root(), matrix=matrix, out=out, ab_args=ab_args,
                                 notify=lambda line: print(line, file=sys.stderr)).run(h, wanted)
        return answers

    return answer


def _earlier(h: History) -> list[Change]:
    """The changes the night before's page showed (its RUN/history/changes.parquet), or none."""
    from harness.analysis.load.changes_file import read_changes

    if len(h.nights) < 2:
        return []
    path = Path(h.nights[-2].run.path) / "history" / "changes.parquet"
    try:
        return read_changes(path) if path.is_file() else []
    except ValueError as exc:  # an unreadable page of the night before: tonight's stands without its words
        print(f"nightly history: {exc} (its confirmations are not carried)".splitlines()[0], file=sys.stderr)
        return []


def history_step(history_dir: Path, out: Path, *, matrix: Path, repo: Path | None = None,
                 summaries: Sequence[Path] = (), no_ab: str | None = None, reports: Path | None = None,
                 ab_args: Sequence[str] = ()) -> int:
    """The nightly's history step: the trend of HISTORY_DIR into OUT (RUN/history), its new steps confirmed
    (nightly_answer). Exit 1 when a new step is a confirmed slowdown, 3 when the history had nothing to judge, 2
    when it could not be read or written, 130 interrupted (the A/B's worktrees removed again), 0 otherwise."""
    from harness.analysis.load.runs import RunInputError
    from harness.analysis.pages.wording import coverage_line
    from harness.results.formats import UnreadableFile
    from harness.results.store import CannotWrite

    answer = nightly_answer(out, matrix=matrix, repo=repo, ab_args=ab_args, no_ab=no_ab)
    try:
        result = write_trend(history_dir, out, reports=reports, summaries=summaries, answer=answer)
    except RunInputError as exc:
        print(f"nightly history: {exc.problems[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UnreadableFile as exc:  # an alarms, acks or promotions file it cannot read: its one line
        print(f"nightly history: {exc}", file=sys.stderr)
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
    for line in new_lines(h):
        print(line, file=sys.stderr)
    if any(c.is_new and fails_the_night(c) for c in h.changes):
        return EXIT_FAILURES
    return EXIT_INCONCLUSIVE if h.coverage.nothing_to_judge else EXIT_OK
