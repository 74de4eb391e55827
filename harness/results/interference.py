"""Whether a row's window was taken under interference, in words: read by the cell (its steadiness), the A/B (what
to run again) and the reports (what to leave out, what to name). The figures: harness.host.meter."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from harness.catalogue import col
from harness.catalogue.cells import INTERFERENCE_THRESHOLD, MIN_INTERFERENCE_S, RERUN_INTERFERENCE, RERUN_TRANSIENT


def interference_reason(foreign: float | None, steal: float | None, *, foreign_s: float | None = None,
                        steal_s: float | None = None) -> str | None:
    """The words of a window taken under interference, or None when it was not (or nothing was measured): a share
    above INTERFERENCE_THRESHOLD of at least MIN_INTERFERENCE_S of CPU time (None: the time was not recorded)."""
    parts = []
    if _over(foreign, foreign_s):
        parts.append(f"other processes used {foreign:.0%} of this cell's cores")
    if _over(steal, steal_s):
        parts.append(f"the hypervisor took {steal:.0%} of them (steal)")
    return "; ".join(parts) or None


def _over(share: float | None, seconds: float | None) -> bool:
    return share is not None and share > INTERFERENCE_THRESHOLD and (seconds is None or seconds >= MIN_INTERFERENCE_S)


def row_interference(row: Mapping[str, Any]) -> str | None:
    """interference_reason of a cells row (None for rows written before schema 6: never measured)."""
    return interference_reason(row.get(col.foreign_cpu_frac), row.get(col.steal_frac),
                               foreign_s=row.get(col.foreign_cpu_s), steal_s=row.get(col.steal_s))


def rerun_cause(row: Mapping[str, Any]) -> str:
    """A superseded row's cause: its `rerun_cause`, or for a row kept before schema version 7 what its own numbers
    say (its interference columns were kept with it): RERUN_INTERFERENCE or RERUN_TRANSIENT."""
    if row.get(col.rerun_cause):
        return row[col.rerun_cause]
    return RERUN_INTERFERENCE if row_interference(row) else RERUN_TRANSIENT


MIN_CLEAN_FRAC = 0.5
"""A cell's side stands on its clean windows only when at least this share of its ok windows is clean (and at
least one): with fewer, the machine's load, not the code, decides what is left (a quarter-speed window among clean
ones reads as a step; the clean few as a side measured on less than it was meant to be). Such a side is busy: a
comparison does not judge the cell (inconclusive, `busy`), an alarm is neither opened nor ended by it, and history
leaves the night out of the cell's series (harness.analysis.nights.summaries)."""


def clean_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if row_interference(r) is None]


def too_busy(ok: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a side's ok rows are too few clean ones to stand for it (MIN_CLEAN_FRAC); False without rows."""
    return bool(ok) and len(clean_rows(ok)) < max(1, math.ceil(MIN_CLEAN_FRAC * len(ok)))
