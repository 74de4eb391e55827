"""The nights a cell's counted work changed: each night's work (summaries.work_summary) against the night before
that counted the cell, diffed exactly (work_diff); no statistics. Pure given the nights."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from harness.analysis.judge.work_diff import SideWork, changes_text, diff_sides


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkStep:
    """A night whose counted work differs from the cell's night before it (both counted): an exact step, no
    statistics; only items every counted process of both nights agrees on."""

    cell_id: str
    night: int
    """The first night of the new work (1-based, oldest first)."""
    run_id: str
    previous_run_id: str
    """The night before it that counted the cell's work."""
    commit_from: str
    commit_to: str
    words: str
    """`forward +16 aten::mm per step; optimizer +1 host sync per step (aten::_local_scalar_dense)`."""
    is_new: bool = False
    """Tonight's (the newest night)."""

    def text(self) -> str:
        """`work changed at night 3 (run): cell: forward +16 aten::mm per step`."""
        return f"work changed at night {self.night} ({self.run_id}): {self.cell_id}: {self.words}"


def _side(summary: Mapping[str, Any]) -> SideWork:
    return SideWork(processes=summary["processes"],
                    ranges={(p, c, k): (lo, hi) for p, c, k, lo, hi in summary["ranges"]})


def work_steps(nights: Sequence[Any]) -> tuple[WorkStep, ...]:
    """Every cell's work night against the night before that counted it (history.Night's `work`, oldest first):
    where an exact item changed, a step.
    Nights whose work is byte-for-byte the same (their digests) are passed over without a diff."""
    last: dict[str, tuple[int, Mapping[str, Any]]] = {}
    steps = []
    for i, night in enumerate(nights):
        for cid, summary in sorted(night.work.items()):
            if summary["processes"] == 0:
                continue
            before = last.get(cid)
            last[cid] = (i, summary)
            if before is None or before[1]["digest"] == summary["digest"]:
                continue
            diff = diff_sides(cid, _side(before[1]), _side(summary))
            if diff.changed:
                prev = nights[before[0]]
                steps.append(WorkStep(cell_id=cid, night=i + 1, run_id=night.run_id, previous_run_id=prev.run_id,
                                      commit_from=prev.commit, commit_to=night.commit,
                                      words=changes_text(diff.changed), is_new=i == len(nights) - 1))
    steps.sort(key=lambda w: (-w.night, w.cell_id))
    return tuple(steps)
