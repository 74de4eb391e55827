"""`nvbench bisect` by time: from "BAD is slower than GOOD" to the first commit (or environment) that made it so.

`Bisector` runs a search.Search (first-parent commits GOOD..BAD, or interpreters from a --pythons file): each
point is judged by interleaved A/B comparisons (`nvbench ab` in its own process, adaptive repeats), every
comparison and the answer go to DIR/bisect.json and DIR/bisect.md, and --resume reuses the comparisons
already made. With --by work or auto it first hands the walk to by_work (counted work, exact), which hands it
back where the counts cannot decide (auto).

A point is **bad** when it is a regression against GOOD; **good** when it is unchanged or an improvement
against GOOD, or when BAD is a regression against it (the slowdown lies after it). Either way a decision
rests on a comparison that decided, never on one that could not tell; a point neither comparison decides
ends the search with exit 3 and the narrowest range reached. A point whose code cannot run the cells (an
import error, a failed cell) is skipped and said.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.orchestrate.bisect.search import BAD, GOOD, SKIPPED, BisectInputError, Search
from harness.orchestrate.session import stopping, worktrees
from harness.orchestrate.workflows import ab
from harness.catalogue import col
from harness.exits import EXIT_INCONCLUSIVE, EXIT_OK
from harness.results.env import short_commit

STATE = "bisect.json"
LOG = "bisect.md"


class MachineBusy(Exception):
    """An A/B of the search ended undecided because the machine stayed busy past its wait budget (`nvbench ab`
    exit 3, ab.json's `stopped_busy`): the point's code is not to blame, so it is not skipped; the
    bisect stops, exit 3, and `--resume` on a quiet machine runs that comparison again."""


# ---------------------------------------------------------------------------------------------
# points: commits or interpreters


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BisectInputError(f"git {' '.join(args)}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'}")
    return proc.stdout.strip()


def commit_points(repo: Path, good: str, bad: str) -> tuple[list[str], dict[str, str]]:
    """[GOOD, first-parent commits after it .. BAD] as full SHAs, and each one's subject line."""
    try:
        top = git(repo, "rev-parse", "--show-toplevel")
    except BisectInputError:
        raise BisectInputError(f"{repo}: not a git checkout (bisect runs in the repository of the code under test)") \
            from None
    repo = Path(top)
    good_sha = _rev(repo, good, "--good")
    bad_sha = _rev(repo, bad, "--bad")
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", good_sha, bad_sha]).returncode != 0:
        raise BisectInputError(f"--good {good} is not an ancestor of --bad {bad}")
    between = git(repo, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}").split()
    points = [good_sha, *between]
    subjects = {sha: git(repo, "log", "-1", "--format=%s", sha) for sha in points}
    return points, subjects


def _rev(repo: Path, rev: str, flag: str) -> str:
    try:
        return git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}")
    except BisectInputError:
        raise BisectInputError(f"{flag} {rev}: no such commit in {repo}") from None


def python_points(path: Path) -> list[str]:
    """The interpreters of a --pythons file: one per line (blank lines and # comments ignored), oldest first."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise BisectInputError(f"--pythons {path}: cannot be read ({exc.strerror})") from None
    points = [line.split("#", 1)[0].strip() for line in lines]
    points = [p for p in points if p]
    missing = [p for p in points if shutil.which(p) is None]
    if missing:
        raise BisectInputError(f"--pythons {path}: no such interpreter: {missing[0]}")
    if len(points) < 2:
        raise BisectInputError(f"--pythons {path}: needs at least two interpreters (good first, bad last)")
    return [str(Path(shutil.which(p)).absolute()) for p in points]


# ---------------------------------------------------------------------------------------------
# running it


@dataclass
class Comparison:
    """One `nvbench ab` of point a (side A) against point b (side B), as bisect.json keeps it."""

    a: int
    b: int
    folder: str
    exit: int
    cells: list[dict[str, Any]]
    """Per cell: verdict, effect_pct, ci_low_pct, ci_high_pct, num_candidate (pairs), attribution, reason."""
    seconds: float
    error: str = ""

    @property
    def regression(self) -> bool:
        return any(c["verdict"] == "regression" for c in self.cells)

    @property
    def not_slower(self) -> bool:
        """Every cell decided and none slower: unchanged (shown) or improvement."""
        return bool(self.cells) and all(c["verdict"] in ("unchanged", "improvement") for c in self.cells)

    @property
    def failed(self) -> bool:
        return bool(self.error) or any(c["verdict"] == "failed" for c in self.cells)


class Bisector:
    """Runs a Search with `nvbench ab` comparisons; keeps its state in `out` for --resume."""

    def __init__(self, *, matrix: str, points: list[str], labels: dict[str, str], kind: str, out: Path,
                 ab_args: Sequence[str], repo: Path | None, notify: Callable[[str], None] = print,
                 by: str = "time", work_steps: int | None = None) -> None:
        self.matrix, self.points, self.labels, self.kind = matrix, points, labels, kind
        self.out, self.ab_args, self.repo, self.notify = out, list(ab_args), repo, notify
        self.by, self.work_steps = by, work_steps
        self.work_state: dict[str, Any] = {}
        """bisect.json's `work`: each counted commit's folder (or why it was skipped), a fallback's reason."""
        self.search = Search(points)
        self.comparisons: list[Comparison] = []
        self.log: list[str] = []
        self.runnable: dict[int, str] = {}
        """Point -> why its code cannot run ("" when it can), checked once."""

    # --- state -----------------------------------------------------------------------------------

    def load(self) -> None:
        state = json.loads((self.out / STATE).read_text())
        if state["points"] != self.points or state["matrix"] != self.matrix:
            raise BisectInputError(f"--resume {self.out}: its bisect is of other points or another matrix")
        self.comparisons = [Comparison(**c) for c in state["comparisons"]]
        self.log = state.get("log", [])
        self.by, self.work_state = state.get("by", "time"), state.get("work") or {}
        self.work_steps = state.get("work_steps", self.work_steps)
        for index, outcome in state.get("status", {}).items():
            self.search.record(int(index), outcome)

    def save(self, answer: dict[str, Any] | None = None) -> None:
        from harness.results import store

        state = {"kind": self.kind, "matrix": self.matrix, "points": self.points, "labels": self.labels,
                 "ab_args": self.ab_args, "status": {str(k): v for k, v in self.search.status.items()},
                 "comparisons": [c.__dict__ for c in self.comparisons], "log": self.log, "answer": answer,
                 "by": self.by, "work_steps": self.work_steps, "work": self.work_state}
        store.write_json(self.out / STATE, state)
        store.write_bytes(self.out / LOG, self.markdown(answer).encode())

    def say(self, line: str) -> None:
        self.log.append(line)
        self.notify(line)

    def name(self, index: int) -> str:
        point = self.points[index]
        short = short_commit(point) if self.kind == "commits" else point
        return f"{short} {self.labels.get(point, '')}".strip()

    # --- comparisons -------------------------------------------------------------------------------

    def compare(self, a: int, b: int) -> Comparison:
        for c in self.comparisons:
            if (c.a, c.b) == (a, b):
                self.say(f"  (resumed) {self.name(b)} vs {self.name(a)}: {self._verdict_text(c)}")
                return c
        folder = self.out / f"ab-{len(self.comparisons) + 1:02d}-{self.points[a][:8]}-{self.points[b][:8]}"
        shutil.rmtree(folder, ignore_errors=True)  # an interrupted comparison starts again
        t0 = time.monotonic()
        argv = [sys.executable, "-m", "harness", "ab", self.matrix, "--out", str(folder),
                *self._ab_args(profiled=a == 0), *self._side_args("a", a), *self._side_args("b", b)]
        proc = stopping.run_child(argv)  # stopped with this bisect, and dies with it even when it is SIGKILLed
        cells, error = [], ""
        verdicts = folder / "report" / "verdicts.parquet"
        if verdicts.exists():
            import pyarrow.parquet as pq

            for r in pq.read_table(verdicts).to_pylist():
                cell = {k: r.get(k) for k in (col.cell_id, "verdict", col.effect_pct, col.ci_low_pct, col.ci_high_pct,
                                              col.num_candidate, col.num_baseline, "attribution", "reason",
                                              "operators")}  # operators: the kernel diff's line (verdicts 13)
                cells.append(cell)
        else:
            busy = ab.stopped_busy(folder)  # the A/B's own record (ab.json), not its words on stdout
            if busy:  # not recorded: --resume runs this comparison again
                raise MachineBusy(f"{self.name(b)} vs {self.name(a)}: {busy}")
            tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or ["no output"]
            error = f"nvbench ab exited {proc.returncode}: {tail[0]}"
        comparison = Comparison(a=a, b=b, folder=str(folder.relative_to(self.out)), exit=proc.returncode,
                                cells=cells, seconds=time.monotonic() - t0, error=error)
        self.comparisons.append(comparison)
        self.say(f"  {self.name(b)} vs {self.name(a)}: {self._verdict_text(comparison)} "
                 f"({comparison.seconds:.0f} s, {folder.name})")
        return comparison

    def _ab_args(self, *, profiled: bool) -> list[str]:
        """The A/B's flags. Only an A/B against GOOD profiles (when it calls a change: `nvbench ab`'s own rule),
        since the answer is the first bad point against GOOD; one against BAD only decides a step. A bisect begun
        before bisects profiled keeps its profile-free A/Bs. No counted processes: a bisect's answer is a timing's
        (its estimate prices no counted process)."""
        args = list(self.ab_args)
        if "--work-repeats" not in args:
            args += ["--work-repeats", "0"]
        if "--kernel-repeats" not in args:
            return args + ["--kernel-repeats", "0"]
        if not profiled:
            args[args.index("--kernel-repeats") + 1] = "0"
        return args

    def _side_args(self, side: str, index: int) -> list[str]:
        if self.kind == "pythons":
            return [f"--{side}", self.points[index]]
        return [f"--{side}-checkout", str(self.worktree(index))]

    def worktree(self, index: int) -> Path:
        try:
            return worktrees.add(self.repo, self.points[index], self.out / worktrees.FOLDER)
        except worktrees.WorktreeError as exc:
            raise BisectInputError(str(exc)) from None

    def cleanup(self) -> None:
        """Remove the worktrees this bisect made (a resumed one makes them again)."""
        worktrees.remove_all(self.repo, self.out / worktrees.FOLDER)

    def cannot_run(self, index: int) -> str:
        """Why point `index`'s code cannot run a cell ("" when it can): its harness must import."""
        if index not in self.runnable:
            if self.kind == "pythons":
                argv, env = [self.points[index], "-c", "import harness.cell.worker"], None
                cwd = None
            else:
                root = self.worktree(index)
                argv = [sys.executable, "-c", "import harness.cell.worker"]
                env, cwd = os.environ | {"PYTHONPATH": str(root), "PYTHONSAFEPATH": "1"}, root
            proc = stopping.run_child(argv, env=env, cwd=cwd)
            last = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or [""]
            self.runnable[index] = "" if proc.returncode == 0 else f"cannot import its harness: {last[0]}"
        return self.runnable[index]

    @staticmethod
    def _verdict_text(c: Comparison) -> str:
        if c.error:
            return c.error
        return "; ".join(f"{x['verdict']} {x[col.effect_pct]:+.1f}% [{x[col.ci_low_pct]:+.1f}, {x[col.ci_high_pct]:+.1f}] "
                         f"in {x[col.num_candidate]} pairs" if x[col.effect_pct] is not None and x[col.ci_low_pct] is not None
                         else f"{x['verdict']}: {x['reason']}" for x in c.cells)

    # --- the search --------------------------------------------------------------------------------

    def run(self) -> tuple[int, dict[str, Any]]:
        """(exit code, answer). By work (work_bisect): 1 with the culprits. By time: 0 an answer, or BAD is not
        slower. Either: 3 could not tell."""
        if self.by != "time":
            from harness.orchestrate.bisect import by_work

            found = by_work.bisect_by_work(self, by_work.counting_for(self), self.by)
            if found is not None:
                return found
        last = len(self.points) - 1
        self.say(f"confirming that {self.name(last)} is slower than {self.name(0)}")
        confirm = self.compare(0, last)
        if confirm.failed:
            answer = {"result": "error", "text": f"the confirmation could not run: {self._verdict_text(confirm)}"}
            self.say(answer["text"])
            self.save(answer)
            return EXIT_INCONCLUSIVE, answer
        if not confirm.regression:
            word = "not slower" if confirm.not_slower else "not shown slower (the comparison could not tell)"
            answer = {"result": "not slower", "text": f"{self.name(last)} is {word} than {self.name(0)}: "
                      f"nothing to bisect ({self._verdict_text(confirm)})"}
            self.say(answer["text"])
            self.save(answer)
            return (0 if confirm.not_slower else 3), answer
        first_bad = {c.b: c for c in self.comparisons if c.a == 0 and c.regression}  # resumed ones too
        step = 0
        while (index := self.search.next()) is not None:
            step += 1
            lo, hi = self.search.lo, self.search.hi
            self.say(f"step {step} of ~{step - 1 + self.search.steps_left()}: first bad among "
                     f"{self.name(lo + 1)} .. {self.name(hi)} ({hi - lo} points); testing {self.name(index)}")
            why = self.cannot_run(index)
            if why:
                self.say(f"  skipped {self.name(index)}: {why}")
                self.search.record(index, SKIPPED)
                self.save()
                continue
            against_good = self.compare(0, index)
            if against_good.failed:
                self.say(f"  skipped {self.name(index)}: its cells did not run ({self._verdict_text(against_good)})")
                self.search.record(index, SKIPPED)
            elif against_good.regression:
                self.search.record(index, BAD)
                first_bad[index] = against_good
            elif against_good.not_slower:
                self.search.record(index, GOOD)
            else:  # the comparison with GOOD could not tell: is BAD slower than this point?
                against_bad = self.compare(index, last)
                if not against_bad.failed and against_bad.regression:
                    self.search.record(index, GOOD)
                else:
                    answer = self._undecided(index)
                    self.save(answer)
                    return EXIT_INCONCLUSIVE, answer
            self.save()
        hi = self.search.hi
        skipped = self.search.skipped_between()
        verdict = first_bad[hi]
        cells = [c for c in verdict.cells if c["verdict"] == "regression"]
        where = "; ".join(f"{c[col.cell_id]}: throughput {c[col.effect_pct]:+.1f}% [{c[col.ci_low_pct]:+.1f}, "
                          f"{c[col.ci_high_pct]:+.1f}] in {c[col.num_candidate]} pairs"
                          + (f"; {c['attribution']}" if c.get("attribution") else "")
                          + (f"; operators: {c['operators']}" if c.get("operators") else "") for c in cells)
        answer = {"result": "found", "index": hi, "point": self.points[hi], "label": self.labels.get(self.points[hi], ""),
                  "skipped": [self.points[i] for i in skipped], "cells": cells,
                  "comparisons": len(self.comparisons),
                  "pairs": sum(max(c[col.num_candidate] or 0 for c in x.cells) if x.cells else 0
                               for x in self.comparisons)}
        lead = f"first bad: {self.name(hi)}" if not skipped else \
            f"first bad: one of {', '.join(self.name(i) for i in skipped)} (skipped: could not run) or {self.name(hi)}"
        answer["text"] = f"{lead}; against {self.name(0)}: {where}"
        self.say(answer["text"])
        self.save(answer)
        return EXIT_OK, answer

    def _undecided(self, index: int) -> dict[str, Any]:
        lo, hi = self.search.lo, self.search.hi
        text = (f"could not tell whether {self.name(index)} is slower than {self.name(0)} within the A/B's budget "
                f"(more pairs: --max-repeats); the first bad point is among {self.name(lo + 1)} .. {self.name(hi)} "
                f"({hi - lo} points)")
        self.say(text)
        return {"result": "undecided", "range": [self.points[lo + 1], self.points[hi]], "text": text}

    def markdown(self, answer: dict[str, Any] | None) -> str:
        lines = [f"# nvbench bisect of {self.matrix}", "",
                 f"{len(self.points)} points ({self.kind}), good first, bad last:", ""]
        for i, p in enumerate(self.points):
            lines.append(f"- `{self.name(i)}`: {self.search.status.get(i, 'not tested')}")
        lines += ["", "## Comparisons (B vs A)", "", "| # | A | B | verdicts | s |", "|---|---|---|---|---|"]
        for k, c in enumerate(self.comparisons, 1):
            lines.append(f"| {k} | `{self.name(c.a)}` | `{self.name(c.b)}` | {self._verdict_text(c)} | {c.seconds:.0f} |")
        lines += ["", "## Log", "", *[f"    {line}" for line in self.log], ""]
        lines += ["## Answer", "", answer["text"] if answer else "(not finished: `nvbench bisect --resume` continues)", ""]
        return "\n".join(lines)
