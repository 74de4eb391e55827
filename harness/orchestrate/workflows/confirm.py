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
