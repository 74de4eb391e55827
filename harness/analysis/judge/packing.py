"""What a slot calibration's comparison (packed against solo, compare.compare_runs) says per backend, and the
warnings a report gives about rows that packing may have touched (pure)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.analysis.judge.verdict import (
    IMPROVEMENT, INCONCLUSIVE, NOTE_GPU_SHARED, NOTE_UNCALIBRATED, REGRESSION, UNCHANGED, WARNING, CellVerdict, Note,
    metric_change_text)
from harness.catalogue.cells import row_label
from harness.catalogue import col


def backend_verdicts(verdicts: Sequence[CellVerdict]) -> dict[str, dict[str, Any]]:
    """Per backend: `unchanged` (cleared: every cell's every tested interval inside the floor, equivalence
    shown) or what stopped it, first that applies: a `regression` or an `improvement` of some cell (packing
    moves it), a cell that could not be judged (its verdict word: failed, skipped, ...), `inconclusive`. The
    change is the mean of the cells' throughput changes with the hull of their intervals."""
    by_backend: dict[str, list[CellVerdict]] = defaultdict(list)
    for v in verdicts:
        by_backend[v.backend or "?"].append(v)
    out = {}
    for backend, cells in sorted(by_backend.items()):
        words = [v.verdict for v in cells]
        word = next((w for w in (REGRESSION, IMPROVEMENT) if w in words), None) \
            or next((w for w in words if w not in (UNCHANGED, INCONCLUSIVE)), None) \
            or (INCONCLUSIVE if INCONCLUSIVE in words else UNCHANGED)
        out[backend] = {"verdict": word, "cleared": word == UNCHANGED, "change": _hull(cells),
                        "cells": {v.cell_id: f"{v.verdict} {metric_change_text(v)}" for v in cells}}
    return out


def _hull(cells: Sequence[CellVerdict]) -> str:
    t = [v.throughput for v in cells if v.throughput.effect_pct is not None]
    if not t:
        return ""
    text = f"{float(np.mean([m.effect_pct for m in t])):+.1f}%"
    lows = [m.ci_low_pct for m in t if m.ci_low_pct is not None]
    highs = [m.ci_high_pct for m in t if m.ci_high_pct is not None]
    if lows and highs:
        text += f" [{min(lows):+.1f}, {max(highs):+.1f}]"
    return text + (f" over {len(t)} cells" if len(t) > 1 else "")


UNCALIBRATED_NOTE = "ran packed beside other jobs with no slot calibration of this machine clearing their backend"
"""The words of the note on uncalibrated rows (a calibration's own packed side leaves it out: it is the point)."""


def _joined(pids: Sequence[int] | None) -> str:
    """A row's foreign pids as its note shows them: `4242, 4243`; `?` where NVML named none."""
    return ", ".join(map(str, pids)) if pids else "?"


def packing_notes(rows: Sequence[Mapping[str, Any]]) -> tuple[Note, ...]:
    """Warnings naming the rows whose numbers packing may carry: a foreign process on their GPU (gpu_shared),
    or packed with no calibration of the machine clearing their backend (packing = uncalibrated)."""
    notes = []
    shared = [r for r in rows if r.get(col.gpu_shared)]
    if shared:
        names = "; ".join(f"{row_label(r)} r{r['repeat']} (pid {_joined(r.get(col.gpu_foreign_pids))})"
                          for r in shared)
        notes.append(Note(f"{len(shared)} row(s) shared their GPU with a process of no job of the run during "
                          f"their window (gpu_shared), so their numbers may carry its load: {names}", WARNING,
                          NOTE_GPU_SHARED))
    unproven = [r for r in rows if r.get("packing") == "uncalibrated" and r.get("status") == "ok"]
    if unproven:
        backends = ", ".join(sorted({str(r.get("backend")) for r in unproven}))
        notes.append(Note(f"{len(unproven)} row(s) {UNCALIBRATED_NOTE} ({backends}): `nvbench calibrate-slots` "
                          "says whether packing moves them", WARNING, NOTE_UNCALIBRATED))
    return tuple(notes)
