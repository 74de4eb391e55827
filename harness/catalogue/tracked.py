"""The metrics a history follows night after night, declared once (harness.analysis.nights.history detects their
change points; its cache reads their columns): each by name, the cells column holding a repeat's value, its unit,
and whether it is a rate (detected on log values, changes in %) or a fraction (as it is, changes in points). The
two judged rates take their names and columns from harness.catalogue.judged."""

from __future__ import annotations

from dataclasses import dataclass

from harness.catalogue.judged import FAST_STEPS, THROUGHPUT


@dataclass(frozen=True, slots=True, kw_only=True)
class Tracked:
    """A per-cell quantity followed night after night."""

    name: str
    """As changes.parquet's `metric` and the history page name it."""
    column: str
    """The cells/*.parquet column holding each repeat's value."""
    unit: str
    """Unit of a night's value."""
    relative: bool
    """Rates: detected on log values, changes in %. Fractions: detected as they are, changes in points."""


TRACKED = (
    Tracked(name=THROUGHPUT.name, column=THROUGHPUT.column, unit="img/s", relative=True),
    Tracked(name=FAST_STEPS.name, column=FAST_STEPS.column, unit="img/s", relative=True),
    Tracked(name="top1", column="top1", unit="fraction", relative=False),
    Tracked(name="data wait", column="exposed_data_wait_frac", unit="fraction of the window", relative=False),
)
"""Every metric a history follows, headline first."""
TRACKED_BY_NAME = {m.name: m for m in TRACKED}
