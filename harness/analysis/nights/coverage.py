"""What a history read and what it left out, as counts: nights, windows, the windows and nights taken under
interference, nights with no measured window, run folders skipped by kind. The writers word it (wording.coverage_line);
an empty answer is never silent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

UNREADABLE, OTHER_MATRIX = "unreadable", "other matrix"
"""Why a run folder of a history was skipped (Skipped.kind)."""


class Skipped(NamedTuple):
    """A run folder history read no night from: its path, why in words, and the kind (UNREADABLE, OTHER_MATRIX)."""

    path: str
    why: str
    kind: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Coverage:
    """A history's reach, counted."""

    num_nights: int
    """Nights read (runs of the newest run's matrix)."""
    num_windows: int
    """Their measured windows (ok rows with a throughput)."""
    num_busy_windows: int
    """Windows taken under interference: left out of every point."""
    num_busy_nights: int
    """Nights with at least one busy cell (too few clean windows: no point that night for it)."""
    num_busy_cell_nights: int
    """(night, cell) pairs left out as busy."""
    num_empty_nights: int
    """Nights with no measured window (every row failed, skipped or superseded)."""
    num_unreadable: int
    """Run folders that could not be read."""
    num_other_matrix: int
    """Run folders of another matrix than the newest run's."""
    num_series: int
    """(cell, metric) series with at least one point."""
    num_points: int
    """Points over all series: what change detection had to judge."""

    @property
    def nothing_to_judge(self) -> bool:
        """No series has a single point: every night was busy, empty or skipped."""
        return self.num_points == 0

    @property
    def all_busy(self) -> bool:
        return self.num_windows > 0 and self.num_busy_windows == self.num_windows


def count(nights: Sequence, skipped: Sequence, series: Sequence) -> Coverage:
    """The Coverage of a history's nights (history.Night), skipped folders and series."""
    return Coverage(
        num_nights=len(nights), num_windows=sum(n.num_windows for n in nights),
        num_busy_windows=sum(n.num_busy_windows for n in nights),
        num_busy_nights=sum(1 for n in nights if n.busy),
        num_busy_cell_nights=sum(len(n.busy) for n in nights),
        num_empty_nights=sum(1 for n in nights if n.num_windows == 0),
        num_unreadable=sum(1 for s in skipped if s.kind != OTHER_MATRIX),
        num_other_matrix=sum(1 for s in skipped if s.kind == OTHER_MATRIX),
        num_series=len(series), num_points=sum(len(s.points) for s in series))
