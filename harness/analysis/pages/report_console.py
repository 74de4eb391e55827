"""Terminal output of `nvbench report` and `nvbench ab`, made to read like `nvbench run`'s summary: a line per
cell a person must look at (regressions, failures, improvements), every other verdict grouped with its count
and its commonest reason, fitted to the terminal's width without cutting a word."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from harness.catalogue.judged import JUDGED
from harness.analysis.judge.verdict import (
    ACCURACY_BELOW,
    FAILED,
    IMPROVEMENT,
    INCONCLUSIVE,
    REGRESSION,
    SUSPECT_IMPROVEMENT,
    SUSPECT_REGRESSION,
    VERDICTS,
    CellVerdict,
    Comparison,
)
from harness.analysis.pages.wording import self_comparison_note
from harness.fit import wrap
from harness.matrix.cells import cell_label

ONE_LINE_EACH = (REGRESSION, SUSPECT_REGRESSION, FAILED, IMPROVEMENT, SUSPECT_IMPROVEMENT)
"""Verdicts listed cell by cell; every other verdict is a group."""

_CHANGE = re.compile(r"^(?:(?:" + "|".join(re.escape(m.name) for m in JUDGED) + r") )?[+-]?\d[^:]*: ")
"""A reason's leading change figure ('+0.4% [-2.1, +3.0] at 99.0%: '), which differs from cell to cell."""
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
BUSY_GROUP = "busy"
"""The console's group of cells not judged because the machine was busy (CellVerdict.busy)."""


def _why(reason: str | None) -> str:
    """The reason without its change figure: what cells of one verdict have in common."""
    return _CHANGE.sub("", (reason or "no reason recorded").strip().splitlines()[0], count=1)


def _single(v: CellVerdict) -> bool:
    return v.verdict in ONE_LINE_EACH or v.is_regression or bool(v.work_gate)


def _cell_line(v: CellVerdict, width: int) -> list[str]:
    word = "regression" if v.is_regression else v.verdict
    word += ", work gate broken" if v.work_gate else ""
    below = "; top-1 below its band" if v.accuracy_verdict == ACCURACY_BELOW else ""
    return wrap(f"{v.reason or '-'}{below}", width, first=f"{word}: {cell_label(v.cell_id)}: ", indent="    ")


def _group_lines(word: str, members: Sequence[CellVerdict], width: int) -> list[str]:
    """'unchanged: 30 cells' and under it how many share the commonest reason, and the reason itself (one
    cell's words, 'e.g.' when the group's numbers differ)."""
    n = len(members)
    cells = f"{n} cell{'s' if n != 1 else ''}"
    head = (f"INCONCLUSIVE: {cells} neither shown changed nor shown unchanged, not a pass" if word == INCONCLUSIVE
            else f"NOT JUDGED: {cells}, the machine was busy, not a pass" if word == BUSY_GROUP
            else f"{word}: {cells}")
    kinds = Counter(_NUMBER.sub("#", _why(v.reason)) for v in members)
    kind, k = kinds.most_common(1)[0]
    whys = [_why(v.reason) for v in members if _NUMBER.sub("#", _why(v.reason)) == kind]
    why = whys[0] if len(set(whys)) == 1 else f"e.g. {whys[0]}"
    share = f"  {k} of {n}" + (" (the commonest reason)" if len(kinds) > 1 else "") + ": "
    return wrap(head, width, indent="  ") + wrap(why, width, first=share, indent="    ")


def verdict_lines(comparison: Comparison, width: int) -> list[str]:
    """The console's verdict lines at `width` columns: the note when a run is compared with itself, a line per
    regression, failed cell and improvement (suspects of a history screen too), then each other verdict in
    the reports' order with its count and commonest reason; a word longer than a line (a path) stays whole."""
    lines = wrap(note, width, indent="  ") if (note := self_comparison_note(comparison)) else []
    singles = [v for v in comparison.verdicts if _single(v)]
    order = {name: i for i, name in enumerate(VERDICTS)}
    for v in sorted(singles, key=lambda v: (not v.is_regression, order.get(v.verdict, 99), v.cell_id)):
        lines += _cell_line(v, width)
    for word in VERDICTS:
        members = [v for v in comparison.verdicts if v.verdict == word and not _single(v) and not v.busy]
        if members:
            lines += _group_lines(word, members, width)
    if busy := [v for v in comparison.verdicts if v.busy and not _single(v)]:
        lines += _group_lines(BUSY_GROUP, busy, width)
    return lines
