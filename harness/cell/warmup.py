"""Warm-up: the steps before the measured window, a fixed number or (auto) chunk after chunk until the step
time is steady."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from harness.cell.context import Context, all_reduce
from harness.cell.engine import Engine
from harness.cell.loop import run_window
from harness.cell.instruments.timing import WARMUP, StepClock
from harness.matrix.cells import Cell
from harness.matrix.sections import WARMUP_CHUNK, WARMUP_TOLERANCE
from harness.stats.settle import has_settled


def most_warmup_steps(cell: Cell) -> int:
    """Warmup steps the cell may run: fixed, or auto's maximum."""
    b = cell.benchmark
    return b.warmup_max_steps if b.warmup_steps == "auto" else b.warmup_steps


@dataclass(frozen=True, slots=True, kw_only=True)
class Warmup:
    """The warmup steps as they ran: fixed, or chunk after chunk until steady (`auto`)."""

    step_times_s: np.ndarray
    host_data_wait_s: np.ndarray
    exposed_data_wait_s: np.ndarray
    wall_s: float

    @property
    def steps(self) -> int:
        return len(self.step_times_s)


def is_steady(step_times_s: np.ndarray, chunk: int = WARMUP_CHUNK, tolerance: float = WARMUP_TOLERANCE) -> bool:
    """The auto-warmup rule: the median time of the last `chunk` steps is within `tolerance` (relative) of the
    median of the `chunk` steps before them, and the series has settled by the last chunk (no transient at its
    start, no hiccup at its end: harness.stats.settle.has_settled), so the window opens on settled steps."""
    if len(step_times_s) < 2 * chunk:
        return False
    last, before = np.median(step_times_s[-chunk:]), np.median(step_times_s[-2 * chunk:-chunk])
    return abs(last / before - 1.0) <= tolerance and has_settled(step_times_s, chunk)


def warm_up(ctx: Context, engine: Engine, batches, *, clock: Callable[[int], StepClock] | None = None) -> Warmup:
    """benchmark.warmup_steps steps, or (auto) warmup_min_steps and then chunks of WARMUP_CHUNK until
    is_steady or warmup_max_steps. Each chunk is a window of its own, so reading its step times costs no sync
    beyond its closing fence; every rank stops when all are steady (one all-reduce per chunk). `clock` makes a
    chunk's StepClock (tests pass one on a simulated device)."""
    b, accum = ctx.cell.benchmark, ctx.cell.grad_accum
    clock = clock or (lambda n: StepClock(n, ctx.device, accum))
    auto = b.warmup_steps == "auto"
    todo = b.warmup_min_steps if auto else b.warmup_steps
    clocks, wall = [], 0.0
    while todo:
        clocks.append(clock(todo))
        wall += run_window(ctx, engine, batches, clocks[-1], WARMUP)
        if not auto:
            break
        times = np.concatenate([c.resolve() for c in clocks])
        done = is_steady(times) or len(times) >= b.warmup_max_steps
        if ctx.is_distributed:  # all ranks stop together: the least steady decides
            done = bool(all_reduce(ctx, torch.tensor([int(done)], device=ctx.device), dist.ReduceOp.MIN).item())
        todo = 0 if done else min(WARMUP_CHUNK, b.warmup_max_steps - len(times))
    cat = (lambda arrays: np.concatenate(arrays)) if clocks else (lambda arrays: np.zeros(0))
    return Warmup(step_times_s=cat([c.resolve() for c in clocks]), host_data_wait_s=cat([c.host_data_wait_s for c in clocks]),
                  exposed_data_wait_s=cat([c.resolve_exposed_data_wait() for c in clocks]), wall_s=wall)
