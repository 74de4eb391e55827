"""Seconds of a job whose cell no past row measured: this machine's rows of other cells (of any matrix) on the same
device, backend, compile mode and size (--smoke or not): their time outside the steps as it was, their steps'
time scaled by model cost (forward FLOPs per image, the registry's at the image size, times the images trained)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.models.registry import MODELS
from harness.matrix.cells import Cell
from harness.catalogue import col

MAX_DONORS = 200
"""Past rows of other cells read at most for the scaling, newest runs first."""
DONOR_COLUMNS = ("model", col.image_size, col.images_per_step, col.warmup_steps_used, col.num_measure_steps, "backend",
                 "compile", "device", col.is_smoke, col.window_s, col.warmup_window_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class Donor:
    """A past ok job of this machine as the scaling reads it: its kind, its seconds per unit of cost in its steps
    and its seconds outside them (start, build, validation: not scaled)."""

    kind: tuple[str, str, str, bool]
    """(device, backend, compile, is_smoke): a job is scaled only from jobs of the same kind."""
    s_per_gflop: float
    other_s: float
    run: str


def gflops(model: str | None, image_size: int | None, images: int | None) -> float | None:
    """Forward GFLOPs of `images` images of `model` at `image_size` (convolutions scale with the pixels); None
    for a model the registry does not know (its cost is not known before it is built)."""
    entry = MODELS.get(model or "")
    if entry is None or not image_size or not images:
        return None
    return entry.forward_flops * (image_size / entry.recipe.image_size) ** 2 * images / 1e9


def donor(row: Mapping[str, Any], seconds: float, run: str) -> Donor | None:
    """A past ok row as a donor, or None when its cost is unknown."""
    steps = (row.get(col.warmup_steps_used) or 0) + (row.get(col.num_measure_steps) or 0)
    cost = gflops(row.get("model"), row.get(col.image_size), (row.get(col.images_per_step) or 0) * steps)
    stepping = (row.get(col.window_s) or 0.0) + (row.get(col.warmup_window_s) or 0.0)
    if not cost or seconds <= 0 or not 0 < stepping <= seconds:
        return None
    kind = (row.get("device") or "", row.get("backend") or "", row.get("compile") or "eager", bool(row.get(col.is_smoke)))
    return Donor(kind=kind, s_per_gflop=stepping / cost, other_s=seconds - stepping, run=run)


def cell_gflops(cell: Cell) -> float | None:
    b = cell.benchmark
    warmup = b.warmup_min_steps if b.warmup_steps == "auto" else b.warmup_steps
    return gflops(cell.model, b.image_size, cell.images_per_step * (warmup + b.measure_steps))


def scaled_seconds(cells: Mapping[str, Cell], device: str,
                   donors: Sequence[Donor]) -> tuple[dict[str, float], tuple[str, ...]]:
    """cell_id -> seconds of one job from the donors of its kind (the median of their seconds outside the steps,
    plus the median seconds per GFLOP times the cell's), and the runs those donors came from; a cell without a
    known cost or a donor of its kind is left out."""
    out: dict[str, float] = {}
    runs: dict[str, None] = {}
    for cid, cell in cells.items():
        kind = (device, cell.backend, cell.compile, cell.is_smoke)
        same = [d for d in donors if d.kind == kind]
        cost = cell_gflops(cell)
        if same and cost:
            per_gflop = statistics.median(d.s_per_gflop for d in same)
            out[cid] = statistics.median(d.other_s for d in same) + per_gflop * cost
            runs.update(dict.fromkeys(d.run for d in same))
    return out, tuple(runs)

