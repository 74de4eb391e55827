"""A run as the analysis sees it (RunData: its cell rows and its manifest's figures), read by harness.analysis.load
.runs and judged by the rest of this room; and where its time went that was not measuring (largest_cut). Pure data:
nothing here reads the disk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from harness.catalogue import col


@dataclass(frozen=True, slots=True, kw_only=True)
class RunData:
    """One run folder as the comparison sees it: its cell rows and its manifest."""

    path: str
    """The run folder, as given."""
    run_id: str
    created_at: str
    """The manifest's ISO time of the run folder's creation (UTC): runs sort by it."""
    environment: Mapping[str, Any]
    """The manifest's environment (commit, library versions, GPU, driver): what `env_diff` compares."""
    rows: tuple[Mapping[str, Any], ...]
    matrix_efficiency: float | None = None
    """manifest.json's matrix_efficiency (measured window seconds / run wall seconds), where the run records it."""
    time_breakdown_s: Mapping[str, float] | None = None
    """manifest.json's time_breakdown_s: where the run's wall time went (harness/orchestrate/session/derive.py)."""
    wall_s: float | None = None
    """manifest.json's wall_s: the wall time of every session of the run."""
    matrix_text: str = ""
    """manifest.json's matrix_text: the matrix as the run read it (its [judge] sets the floors a report uses)."""
    unreadable: tuple[str, ...] = ()
    """A job's result file that could not be read, each as its one line naming it: its row is left out, the
    others stand."""

    def cut_text(self) -> str | None:
        """'val_s 120.3 s (31% of the wall)': the largest part of the run's time that was not measuring."""
        cut = largest_cut(self.time_breakdown_s)
        if cut is None or not self.wall_s:
            return None
        return f"{cut[0]} {cut[1]:.1f} s ({cut[1] / self.wall_s:.0%} of the wall)"

    def cost_text(self) -> str | None:
        """'matrix efficiency 0.25; largest other part: val_s 120.3 s (31% of the wall)', where recorded."""
        if self.matrix_efficiency is None:
            return None
        cut = self.cut_text()
        return f"matrix efficiency {self.matrix_efficiency:.2f}" + (f"; largest other part: {cut}" if cut else "")


NON_WINDOW = (col.startup_s, col.build_s, col.autotune_s, col.compile_s, col.warmup_window_s, col.val_s, "rest_of_jobs_s",
              "compile_warmups_s", "between_jobs_s")
"""The parts of a run's time breakdown that are not measuring."""


def largest_cut(breakdown: Mapping[str, Any] | None) -> tuple[str, float] | None:
    """The largest part of a run's time breakdown that is not the measured window, as (name, seconds): where
    the next cut is. None without a breakdown (a manifest written before breakdowns)."""
    parts = [(name, float(breakdown[name])) for name in NON_WINDOW
             if isinstance((breakdown or {}).get(name), (int, float))]
    return max(parts, key=lambda part: part[1]) if parts else None
