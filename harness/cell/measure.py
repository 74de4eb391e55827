"""The measured run of a cell: compile or capture, warm up, then the measured window with its instruments,
and what it yields: the cell's metrics and this rank's step rows."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from harness.cell import capture
from harness.cell.context import Context, all_reduce
from harness.cell.engine import Engine
from harness.cell.faults import FireDrill, inject_fault, slow_start_for
from harness.cell.loop import run_window
from harness.cell.metrics import non_finite_reason, telemetry_columns
from harness.cell.probe import SpeedProbe, probe_every
from harness.cell.probe import run_once as probe_run_once
from harness.cell.telemetry import TelemetrySampler
from harness.cell.timing import DATA, FORWARD, MEASURE, PHASES, StepClock
from harness.cell.warmup import Warmup, warm_up
from harness.stats import window


class NonFiniteLoss(RuntimeError):
    """Training diverged: the measured window's loss is NaN or infinite."""


def train(ctx: Context, engine: Engine, loader) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Compile or capture, warm up, run the measured window; return the cell's metrics (all-reduced) and
    this rank's step rows."""
    b, accum = ctx.cell.benchmark, ctx.cell.grad_accum
    batches = iter(loader)
    engine.train()
    # Compile or capture on a real batch, then undo that step: before any window (eager: nothing to do).
    compile_s = engine.prepare(*next(batches)) if ctx.cell.compile != "eager" else 0.0
    warm = warm_up(ctx, engine, batches)
    meas = StepClock(b.measure_steps, ctx.device, accum)
    engine.pop_train_loss()  # warmup loss is not the measured loss
    inject_fault(ctx.fault, ctx.rank, engine)
    # NVML sampling of this process's GPU (nothing on CPU) and the profiler: started before the opening
    # fence, stopped after the closing one.
    sampler = TelemetrySampler(ctx.device.index if ctx.device.type == "cuda" else None)
    recorder = capture.capture(ctx.profile, rank=ctx.rank, is_cuda=ctx.device.type == "cuda")
    drill = FireDrill(ctx.device, ctx.fire_drill_pct, warm.step_times_s) if ctx.fire_drill_pct else None
    if drill is not None:
        print(f"fire drill: +{ctx.fire_drill_pct:g}%: {drill.describe()}", flush=True)
    elif drill := slow_start_for(ctx.fault, ctx.rank):
        print(drill.describe(), flush=True)
    probe = _speed_probe(ctx, warm)
    if ctx.phases is not None:
        ctx.phases.arm(b.measure_steps, ctx.device, accum)
    window_s = run_window(ctx, engine, batches, meas, MEASURE, [i for i in (recorder, sampler) if i is not None],
                          drill=drill, probe=probe)
    loader.close()
    # Everything below reads device values: outside the window, after its closing fence.
    loss_sum, count = all_reduce(ctx, engine.pop_train_loss().double()).tolist()
    train_loss = loss_sum / count
    step_loss, step_lr = engine.step_records()
    if not math.isfinite(train_loss):
        raise NonFiniteLoss(non_finite_reason(train_loss, step_loss, step_lr, warm.steps))
    step_times = meas.resolve()
    exposed = meas.resolve_exposed_data_wait()
    phase_s = _phase_times(ctx, engine, step_times)
    waits = torch.tensor([meas.host_data_wait_s.sum(), exposed.sum()], dtype=torch.float64, device=ctx.device)
    host_wait, exposed_wait = (all_reduce(ctx, waits) / ctx.world_size).tolist()
    window_s = all_reduce(ctx, torch.tensor([window_s], dtype=torch.float64, device=ctx.device), dist.ReduceOp.MAX).item()
    images = b.measure_steps * ctx.cell.images_per_step
    interval = window.window_throughput_interval(step_times, ctx.cell.images_per_step, images, window_s)
    steady, start = window.window_steadiness(warm.step_times_s, step_times)
    fast = window.fast_step_rate(step_times, ctx.cell.images_per_step)
    metrics = {
        "warmup_steps_used": warm.steps, "num_measure_steps": b.measure_steps, "images_measured": images,
        "window_s": window_s, "warmup_window_s": warm.wall_s, "compile_s": compile_s,
        "throughput_img_per_s": interval.estimate,
        "throughput_ci_low_img_per_s": interval.low, "throughput_ci_high_img_per_s": interval.high,
        "throughput_per_process_img_per_s": images / window_s / ctx.world_size,  # all ranks of all nodes
        "step_time_mean_s": float(step_times.mean()), "step_time_median_s": float(np.median(step_times)),
        "step_time_cv": float(step_times.std(ddof=1) / step_times.mean()) if len(step_times) > 1 else None,
        "step_time_total_s": float(step_times.sum()),
        "step_time_p10_s": ctx.cell.images_per_step / fast, "fast_step_img_per_s": fast,
        "exposed_data_wait_s": exposed_wait, "exposed_data_wait_frac": exposed_wait / window_s,
        "host_data_wait_s": host_wait, "host_data_wait_frac": host_wait / window_s,
        "is_steady": steady.is_steady, "steadiness": steady.reason,
        "start_transient_steps": start.num_steps,
        "train_loss": train_loss, "lr_final": engine.lr(), "loss_scale": engine.loss_scale(),
    } | _phase_medians(phase_s, engine) | telemetry_columns(ctx, sampler.summary, images) | (probe.summary() if probe is not None else {})
    n = warm.steps + b.measure_steps
    local_images = ctx.cell.benchmark.batch_size * accum
    epoch, is_epoch_start = epoch_marks(n, local_images, loader.samples_per_epoch)
    steps = {
        "step": np.arange(n), "is_warmup": np.arange(n) < warm.steps,
        "step_time_s": np.concatenate([warm.step_times_s, step_times]),
        "host_data_wait_s": np.concatenate([warm.host_data_wait_s, meas.host_data_wait_s]),
        "exposed_data_wait_s": np.concatenate([warm.exposed_data_wait_s, exposed]),
        "loss": step_loss, "lr": step_lr, "epoch": epoch, "is_epoch_start": is_epoch_start,
        "images": np.full(n, local_images),
    } | {f"phase_{name}_s": _nulls_where_nan(np.concatenate([np.full(warm.steps, np.nan), phase_s[:, k]]))
         for k, name in enumerate(PHASES)}
    if probe is not None:
        ran = np.concatenate([np.full(warm.steps, np.nan), probe.per_step])
        steps["speed_probe_s"] = _nulls_where_nan(ran)  # null where none ran
    return metrics, steps


def _phase_times(ctx: Context, engine: Engine, step_times: np.ndarray) -> np.ndarray:
    """(measured steps, PHASES) seconds, NaN where a step never entered a phase. A captured CUDA graph runs
    forward, backward and the update in one launch: its time (the step less its data fetch) is reported as
    forward, backward and optimizer stay NaN, and the cell says phases_graphed."""
    if ctx.phases is None or not ctx.phases.armed:
        return np.full((len(step_times), len(PHASES)), np.nan)
    ctx.phases.disarm()
    out = ctx.phases.resolve()
    if engine.is_graphed:  # the h2d copy happens inside the data fetch: data alone is outside the graph
        out[:, PHASES.index(FORWARD)] = step_times - np.nan_to_num(out[:, PHASES.index(DATA)])
    return out


def _phase_medians(phase_s: np.ndarray, engine: Engine) -> dict[str, Any]:
    out: dict[str, Any] = {"phases_graphed": engine.is_graphed}
    for k, name in enumerate(PHASES):
        column = phase_s[:, k]
        out[f"phase_{name}_median_s"] = float(np.median(column)) if np.isfinite(column).all() and len(column) else None
    return out


def _nulls_where_nan(values: np.ndarray) -> list:
    return [None if math.isnan(v) else float(v) for v in values]


def epoch_marks(num_steps: int, images_per_step: int, samples_per_epoch: int | None) -> tuple[list, list]:
    """Per step of this rank: the data epoch of its first image, and whether it holds an epoch's first image.

    The training loader streams epochs back to back, so step k covers this rank's images
    [k * images_per_step, (k + 1) * images_per_step). Null for data without epochs (synthetic).
    """
    if not samples_per_epoch:
        return [None] * num_steps, [None] * num_steps
    first = np.arange(num_steps) * images_per_step
    last = first + images_per_step - 1
    return (first // samples_per_epoch).tolist(), (last // samples_per_epoch > (first - 1) // samples_per_epoch).tolist()


def _speed_probe(ctx: Context, warm: Warmup) -> SpeedProbe | None:
    """The machine-speed probe of a timed single-process CPU cell (run.speed_probe; harness/cell/probe.py), or
    None. Not in torchrun groups: one rank probing while the others wait in the next all-reduce would put
    the probe into their step times."""
    if not ctx.cell.run.speed_probe or ctx.device.type != "cpu" or ctx.profile or ctx.is_distributed:
        return None
    step_s = float(np.median(warm.step_times_s)) if warm.steps else 0.0
    cost_s = min(probe_run_once()[1] for _ in range(5))  # the first run also allocates the flush buffer
    steps = ctx.cell.benchmark.measure_steps
    return SpeedProbe(steps, probe_every(step_s, cost_s, steps))
