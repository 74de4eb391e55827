"""`nvbench bisect --by work`: the first commit whose counted work is the bad end's, item by item (issue 70).

Each end is counted first (one counted process a cell; two on CUDA, where an item the processes disagree on, a
kernel cuDNN picked by timing, must not decide). The items exact at both ends and different there decide; each item
walks its own bisection, and every probe (one counted process a cell of a commit, never timed) answers all of them at
once: BAD where the probe's value is the bad end's, GOOD where it is any other exact value, SKIPPED where the probe's
processes disagree on it or its cells could not run. Counts are exact, so a probe needs no repeats and never waits
for a quiet machine. The pure part (which items decide, what a probe says, which commit to count next) is apart from
the part that counts a commit (a run folder per probed commit, DIR/work-NN-SHA, kept for --resume)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.analysis.judge.work_diff import ItemChange, SideWork, changes_text, side_work
from harness.catalogue import col
from harness.exits import EXIT_FAILURES, EXIT_INCONCLUSIVE
from harness.orchestrate.bisect.search import BAD, GOOD, SKIPPED, Search

Key = tuple[str, str, str, str]
"""(cell_id, phase, counter, key): one counted item of one cell."""
WORK_DIR = "work-{index:02d}-{sha}"
"""A probed commit's run folder inside the bisect folder (its counted processes' rows and work.parquet)."""


# ---------------------------------------------------------------------------------------------
# the decision (pure)


def counts(rows: Sequence[Mapping[str, Any]], cells: Sequence[str]) -> dict[str, SideWork]:
    """Each cell's counted work from a work.parquet's rows (side_work)."""
    return {cid: side_work(rows, cid) for cid in cells}


def deciding(good: Mapping[str, SideWork], bad: Mapping[str, SideWork]) -> dict[Key, tuple[float, float]]:
    """The items exact at both ends (every counted process of each agrees) whose values differ: key -> (good's,
    bad's). An item some process of an end disagrees on never decides."""
    out: dict[Key, tuple[float, float]] = {}
    for cid in sorted(good.keys() & bad.keys()):
        g, b = good[cid], bad[cid]
        if not g.processes or not b.processes:
            continue
        for item in g.ranges.keys() | b.ranges.keys():
            if g.is_exact(item) and b.is_exact(item) and g.value(item) != b.value(item):
                out[(cid, *item)] = (g.value(item), b.value(item))
    return out


def outcome(probe: Mapping[str, SideWork] | None, key: Key, bad_value: float) -> str:
    """What a probed commit says of one item: BAD at the bad end's value, GOOD at any other exact value, SKIPPED
    where it cannot tell (its cell not counted, or its processes disagree)."""
    if probe is None or key[0] not in probe or not probe[key[0]].processes:
        return SKIPPED
    side, item = probe[key[0]], key[1:]
    if not side.is_exact(item):
        return SKIPPED
    return BAD if side.value(item) == bad_value else GOOD


@dataclass
class ItemSearches:
    """One bisection per deciding item over the same points; a probe answers them all."""

    points: list[str]
    items: dict[Key, tuple[float, float]]
    searches: dict[Key, Search] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in self.items:
            self.searches.setdefault(key, Search(list(self.points)))

    def record(self, index: int, probe: Mapping[str, SideWork] | None) -> None:
        for key, search in self.searches.items():
            if index in search.status:
                continue
            search.record(index, outcome(probe, key, self.items[key][1]))

    def next(self) -> int | None:
        """The point to count next: the next point of the item whose open range is widest (the first such item in
        order), or None when every item's first bad point is known."""
        open_ = sorted((-(s.hi - s.lo), key) for key, s in self.searches.items() if s.next() is not None)
        return self.searches[open_[0][1]].next() if open_ else None

    def steps_left(self) -> int:
        return max((s.steps_left() for s in self.searches.values()), default=0)

    def culprits(self) -> list[tuple[int, list[ItemChange], list[int]]]:
        """(first bad point, the items that turned the bad end's there, points skipped before it), in point order."""
        found: dict[int, list[ItemChange]] = {}
        skipped: dict[int, list[int]] = {}
        for key, search in self.searches.items():
            hi = search.hi
            good, bad = self.items[key]
            found.setdefault(hi, []).append(ItemChange(phase=key[1], counter=key[2], key=key[3], a=good, b=bad))
            skipped[hi] = sorted(set(skipped.get(hi, [])) | set(search.skipped_between()))
        return [(hi, found[hi], skipped[hi]) for hi in sorted(found)]


def culprit_text(changes: Sequence[ItemChange], cells: Sequence[str]) -> str:
    """`forward +16 aten::mm per step` (and the cells when more than one)."""
    words = changes_text(sorted(changes, key=lambda c: (c.phase, c.counter, c.key)))
    return words + (f" ({', '.join(sorted(set(cells)))})" if len(set(cells)) > 1 else "")


# ---------------------------------------------------------------------------------------------
# counting one commit


@dataclass
class Counting:
    """What counts a commit: its worktree, its environment, a run folder of the matrix's cells, `processes`
    counted processes a cell; the folder's work.parquet is kept, so a resumed bisect counts no commit twice."""

    matrix: str
    only: list[str]
    out: Path
    worktree: Callable[[int], Path]
    sha: Callable[[int], str]
    end_processes: int
    """Counted processes a cell at each end: 1, or 2 where the cells run on CUDA (an item two processes disagree on,
    a kernel cuDNN's autotuner picked by timing, must be seen varying before it could decide)."""
    steps: int
    notify: Callable[[str], None] = print

    def cells(self) -> list:
        from harness.matrix.cells import expand
        from harness.matrix.parse import load_matrix, with_repeats

        return expand(with_repeats(load_matrix(self.matrix), 1), only=self.only)

    def folder(self, index: int) -> Path:
        return self.out / WORK_DIR.format(index=index, sha=self.sha(index)[:8])

    def count(self, index: int, processes: int = 1) -> tuple[dict[str, SideWork] | None, str]:
        """(each cell's counted work, "") or (None, why it could not be counted) for the commit at `index`."""
        import shutil
        import sys

        from harness.analysis.load.runs import read_work_table
        from harness.orchestrate.session import opening, runfolder
        from harness.orchestrate.workflows import ab, work_repeats
        from harness.results.work import WORK_FILE

        folder, cells = self.folder(index), self.cells()
        ids = [c.cell_id for c in cells]
        if not (folder / WORK_FILE).is_file():
            shutil.rmtree(folder, ignore_errors=True)  # an interrupted count starts again
            root = self.worktree(index)
            ab.precompile(sys.executable, root)
            try:
                env = ab.collect_env_under(sys.executable, checkout=root)
            except ab.AbInputError as exc:
                return None, f"its environment could not be read: {exc.problems[0]}"
            caps = opening.machine_from_env(cells[0].run.device, env).caps
            plain = {k: v for k, v in env.items() if k != col.env_key}
            runfolder.create_run(_matrix(self.matrix), cells, run_dir=folder, reports_root=self.out, smoke=False,
                                 only=self.only, env=plain)
            order = work_repeats.run_work_repeats(
                {"p": folder}, ids, work_repeats.WorkPlan(repeats=processes, steps=self.steps), caps=caps,
                envs={"p": env}, checkouts={"p": root}, notify=self.notify)
            failed = [(cid, status) for _, cid, _, status in order if status not in ("ok", "skipped")]
            if failed:
                return None, f"its counted process of {failed[0][0]} ended {failed[0][1]}"
        rows = read_work_table(folder)
        if rows is None:
            return None, "no work.parquet was gathered"
        return counts(rows, ids), ""


def counting_for(b) -> Counting:
    """The Counting of a by_time.Bisector: its matrix and --only filters, two processes an end on CUDA."""
    from harness.catalogue.work import DEFAULT_WORK_STEPS
    from harness.matrix.parse import load_matrix

    only = [a.removeprefix("--only=") for a in b.ab_args if a.startswith("--only=")]
    device = load_matrix(b.matrix).run.device
    return Counting(matrix=b.matrix, only=only, out=b.out, worktree=b.worktree, sha=lambda i: b.points[i],
                    end_processes=2 if device == "cuda" else 1, steps=b.work_steps or DEFAULT_WORK_STEPS,
                    notify=b.notify)


def _matrix(path: str):
    from harness.matrix.parse import load_matrix, with_repeats

    return with_repeats(load_matrix(path), 1)


# ---------------------------------------------------------------------------------------------
# the walk


BY_WORK, BY_TIME, BY_AUTO = "work", "time", "auto"


def bisect_by_work(b, counting: Counting, by: str) -> tuple[int, dict[str, Any]] | None:
    """Bisect `b` (a by_time.Bisector) by counts: the ends counted, then one commit at a time until every deciding
    item's first bad commit is known. None where `by` is auto and the counts cannot decide (the ends' work the same,
    or an end not countable): the caller bisects by time, said here. Exit 1 with the culprits; 3 when it could not
    tell (an end not counted, or no item differs, under --by work)."""
    if b.kind != "commits":
        return _cannot(b, by, "a bisect by work counts commits (--pythons bisects interpreters by time)")
    state = b.work_state
    last = len(b.points) - 1
    b.say(f"counting both ends: {counting.end_processes} counted process(es) a cell each, never timed")
    ends = {}
    for index in (0, last):
        ends[index], why = _probe(b, counting, index, counting.end_processes)
        if ends[index] is None:
            return _cannot(b, by, f"{b.name(index)} could not be counted: {why}")
    items = deciding(ends[0], ends[last])
    if not items:
        return _cannot(b, by, f"the counted work of {b.name(last)} is the same as {b.name(0)}'s on every item every "
                              "counted process agrees on: nothing for the counts to find")
    b.say(f"bisecting by work: {len(items)} item(s) differ between the ends: "
          + culprit_text([ItemChange(phase=k[1], counter=k[2], key=k[3], a=v[0], b=v[1]) for k, v in items.items()],
                         [k[0] for k in items]))
    searches = ItemSearches(list(b.points), items)
    for index, probe in ends.items():
        searches.record(index, probe)
    step = 0
    while (index := searches.next()) is not None:
        step += 1
        b.say(f"step {step} of ~{step - 1 + searches.steps_left()}: counting {b.name(index)}")
        why = b.cannot_run(index)
        probe = None
        if not why:
            probe, why = _probe(b, counting, index)
        if probe is None:
            b.say(f"  skipped {b.name(index)}: {why}")
        searches.record(index, probe)
    return _answer(b, searches, counting, state)


def _probe(b, counting: Counting, index: int, processes: int = 1) -> tuple[dict[str, SideWork] | None, str]:
    """The commit's counts (a resumed bisect reads the ones it made), recorded in bisect.json's work state."""
    state = b.work_state.setdefault("probes", {})
    known = state.get(str(index))
    if known is not None and known.get("skipped"):
        return None, known["skipped"]
    probe, why = counting.count(index, processes)
    state[str(index)] = {"folder": counting.folder(index).name} | ({"skipped": why} if probe is None else {})
    if probe is not None:
        b.say(f"  {'(resumed) ' if known is not None else ''}counted {b.name(index)}")
    b.save()
    return probe, why


def _cannot(b, by: str, why: str) -> tuple[int, dict[str, Any]] | None:
    if by == BY_AUTO:
        b.say(f"{why}; bisecting by time (interleaved A/Bs)")
        b.work_state["fallback"] = why
        return None
    answer = {"result": "undecided", "by": BY_WORK, "text": f"{why}; `--by time` bisects by timed A/Bs"}
    b.say(answer["text"])
    b.save(answer)
    return EXIT_INCONCLUSIVE, answer


def _answer(b, searches: ItemSearches, counting: Counting, state: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    probes = [int(k) for k, v in state.get("probes", {}).items() if not v.get("skipped")]
    culprits = []
    for hi, changes, skipped in searches.culprits():
        cells = [k[0] for k, s in searches.searches.items() if s.hi == hi]
        words = culprit_text(changes, cells)
        lead = f"first commit whose work is the bad end's: {b.name(hi)}" if not skipped else \
            (f"first commit whose work is the bad end's: one of {', '.join(b.name(i) for i in skipped)} (skipped: "
             f"could not be counted) or {b.name(hi)}")
        culprits.append({"index": hi, "point": b.points[hi], "label": b.labels.get(b.points[hi], ""),
                         "skipped": [b.points[i] for i in skipped], "cells": sorted(set(cells)),
                         "items": [{"phase": c.phase, "counter": c.counter, "key": c.key, "good": c.a, "bad": c.b}
                                   for c in changes], "text": f"{lead}: {words}"})
    for c in culprits:
        b.say(c["text"])
    text = "; ".join(c["text"] for c in culprits) + (f" (bisected by work: {len(probes)} commit(s) counted, "
                                                      f"{counting.end_processes} process(es) a cell at each end, one a "
                                                      "probe; no timed repeat)")
    answer = {"result": "found", "by": BY_WORK, "culprits": culprits, "counted_commits": len(probes),
              "text": text}
    b.save(answer)
    return EXIT_FAILURES, answer
