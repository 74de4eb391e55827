"""A run folder's step times as the report plots them: rank 0's steps of each (cell, repeat), read through
results.store (any schema version, one file a job or folded)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from harness.catalogue import col
from harness.results import store


@dataclass(frozen=True, slots=True)
class StepSeries:
    """Rank 0's optimizer steps of one (cell, repeat), in order."""

    repeat: int
    step: np.ndarray
    time_s: np.ndarray
    is_warmup: np.ndarray
    is_epoch_start: np.ndarray


def load_steps(run_dir: Path) -> dict[str, list[StepSeries]]:
    """Every (cell, repeat) of a run folder's steps (one file a job, or folded: store.read_steps; a superseded
    attempt's left out), rank 0, by cell id; {} when the folder has none."""
    if not (Path(run_dir) / "steps").is_dir():
        return {}
    table = store.read_steps(Path(run_dir))
    table = table.filter(pc.equal(table.column("rank"), 0))
    if not table.num_rows:
        return {}
    table = table.sort_by([(col.cell_id, "ascending"), ("repeat", "ascending"), ("step", "ascending")])
    keys = list(zip(table.column(col.cell_id).to_pylist(), table.column("repeat").to_pylist()))
    out: dict[str, list[StepSeries]] = {}
    start = 0
    for end in [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]] + [len(keys)]:
        part = table.slice(start, end - start)
        out.setdefault(keys[start][0], []).append(StepSeries(
            repeat=int(keys[start][1]), step=part.column("step").to_numpy(),
            time_s=part.column(col.step_time_s).to_numpy(),
            is_warmup=part.column(col.is_warmup).fill_null(False).to_numpy(),
            is_epoch_start=part.column(col.is_epoch_start).fill_null(False).to_numpy()))
        start = end
    return out
