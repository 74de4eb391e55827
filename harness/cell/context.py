"""Where a cell's process sits (its Context: rank, device, the job's inputs), and the all-reduce over its
ranks that the stages outside the windows share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from harness.cell.instruments.timing import PhaseClock, Ranges
from harness.matrix.cells import Cell


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """Where this process sits: rank, device and the job's inputs."""

    cell: Cell
    run_id: str
    repeat: int
    out_dir: Path
    data_root: Path | None
    fault: str | None
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    ranges: Ranges
    profile: dict[str, Any] | None = None
    """The job's profile section (tool, steps, dir, name) under `nvbench profile`; None in timed runs."""
    flops_cache: str | None = None
    """File where this run keeps FLOP counts per (model, classes, image size)."""
    fire_drill_pct: float = 0.0
    """Extra work per measured step in % of the step's cost (nvbench run --fire-drill); 0 in real runs."""
    phases: PhaseClock | None = None
    """Marks of the step's phases (the ranges carry them); armed for the measured window only."""
    slot_cores: int | None = None
    """This process's share of its slot's cores (the job's slot cores / its ranks on the node) when the runner
    pinned the job to a slot; None on the whole machine. Loader workers and threads keep within it."""

    def within_slot(self, wanted: int) -> int:
        """`wanted` workers or threads, no more than this process's share of its slot's cores (0 stays 0)."""
        return wanted if self.slot_cores is None else min(wanted, self.slot_cores)

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def all_reduce(ctx: Context, t: torch.Tensor, op=None) -> torch.Tensor:
    """`t` reduced in place over the cell's ranks (a sum unless `op`); as it is in a single process."""
    if ctx.is_distributed:
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t
