"""Whether a row's window was taken under interference, in words: read by the cell (its steadiness), the A/B (what
to run again) and the reports (what to leave out, what to name). The figures: harness.cell.interference."""

from __future__ import annotations

from typing import Any, Mapping

from harness.catalogue import col
from harness.catalogue.cells import INTERFERENCE_THRESHOLD


def interference_reason(foreign: float | None, steal: float | None) -> str | None:
    """The words of a window taken under interference, or None when it was not (or nothing was measured)."""
    parts = []
    if foreign is not None and foreign > INTERFERENCE_THRESHOLD:
        parts.append(f"other processes used {foreign:.0%} of this cell's cores")
    if steal is not None and steal > INTERFERENCE_THRESHOLD:
        parts.append(f"the hypervisor took {steal:.0%} of them (steal)")
    return "; ".join(parts) or None


def row_interference(row: Mapping[str, Any]) -> str | None:
    """interference_reason of a cells row (None for rows written before schema 6: never measured)."""
    return interference_reason(row.get(col.foreign_cpu_frac), row.get(col.steal_frac))
