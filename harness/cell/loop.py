"""The step loop that every window runs (each warm-up chunk and the measured window) between its two fences:
instruments around it, no host sync inside."""

from __future__ import annotations

import time
from typing import Sequence

import torch
import torch.distributed as dist

from harness.cell.context import Context
from harness.cell.engine import Engine
from harness.cell.faults import FireDrill, SlowStart
from harness.cell.instruments.probe import SpeedProbe
from harness.cell.instruments.timing import DATA, STEP, Instrument, StepClock


def _fence(ctx: Context) -> None:
    """Window boundary: the wall clock may only be read once all queued work is done on every rank."""
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)  # sync: the window's wall time must include all queued kernels
    if ctx.is_distributed:
        dist.barrier()  # sync: every rank opens and closes the same window


def run_window(ctx: Context, engine: Engine, batches, clock: StepClock, name: str,
               instruments: Sequence[Instrument] = (), drill: FireDrill | SlowStart | None = None,
               probe: SpeedProbe | None = None) -> float:
    """Run `clock.num_steps` optimizer steps; return the window's wall time. No host sync inside.

    `instruments` start before the opening fence and stop after the closing one, in reverse order, so
    their own start-up and shutdown stay out of the timed interval. `probe` (CPU only) runs between a
    step's end mark and the next step's start mark; its time is taken out of the returned wall time.
    """
    accum, ranges = ctx.cell.grad_accum, ctx.ranges
    perf = time.perf_counter
    for instrument in instruments:
        instrument.start()
    _fence(ctx)
    t0 = perf()
    phases = ctx.phases if ctx.phases is not None and ctx.phases.armed else None
    with ranges(name):
        for i in range(clock.num_steps):
            if phases is not None:
                phases.step(i)
            with ranges(STEP):
                clock.begin(i)
                if drill is not None:
                    drill.begin()
                for micro in range(accum):
                    clock.fetch_begin(i, micro)
                    with ranges(DATA):
                        images, labels = next(batches)
                    clock.fetch_end(i, micro)
                    sync = micro == accum - 1
                    if phases is not None:
                        phases.syncing = sync  # only this backward waits for an all-reduce
                    engine.forward_backward(images, labels, sync_grads=sync)
                engine.optimizer_step(extra=drill)  # a drill's work runs inside the optimizer phase
                clock.end(i)
            if probe is not None:
                probe.after_step(i)
    _fence(ctx)
    elapsed = perf() - t0 - (probe.total_s if probe is not None else 0.0)
    for instrument in reversed(instruments):
        instrument.stop()
    return elapsed
