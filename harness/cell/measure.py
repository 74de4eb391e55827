"""The measured run of a cell: compile or capture, warm up, then the measured window with its instruments,
and what it yields: the cell's metrics and this rank's step rows."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from harness.cell.instruments import capture
from harness.cell import vec_isa
from harness.cell.context import Context, all_reduce
from harness.cell.engine import Engine
from harness.cell.faults import FireDrill, inject_fault, slow_start_for
from harness.host.meter import InterferenceMeter
from harness.results.interference import interference_reason
from harness.cell.loop import run_window
from harness.cell.metrics import non_finite_reason, telemetry_columns
from harness.cell.instruments.probe import MIN_PROBES, SpeedProbe, probe_every
from harness.cell.instruments.probe import run_once as probe_run_once
from harness.cell.instruments.telemetry import TelemetrySampler
from harness.cell.instruments.timing import DATA, FORWARD, MEASURE, PHASES, StepClock
from harness.cell.warmup import Warmup, warm_up
from harness.stats import window
from harness.catalogue import col
from harness.catalogue.steps import PHASE_MEDIAN_COLUMNS, PHASE_STEP_COLUMNS


class NonFiniteLoss(RuntimeError):
    """Training diverged: the measured window's loss is NaN or infinite."""


def train(ctx: Context, engine: Engine, loader,
          batches: Iterator | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Autotune, compile or capture, warm up, run the measured window; return the cell's metrics (all-reduced)
    and this rank's step rows. `batches`: the loader's stream, where the caller started it already."""
    b, accum = ctx.cell.benchmark, ctx.cell.grad_accum
    batches = iter(loader) if batches is None else batches
    engine.train()
    autotune_s, compile_s, batches = first_steps(ctx, engine, batches)
    warm = warm_up(ctx, engine, batches)
    meas = StepClock(b.measure_steps, ctx.device, accum)
    engine.pop_train_loss()  # warmup loss is not the measured loss
    inject_fault(ctx.fault, ctx.rank, engine)
    # NVML sampling of this process's GPU (nothing on CPU) and the profiler: started before the opening
    # fence, stopped after the closing one.
    sampler = TelemetrySampler(ctx.device.index if ctx.device.type == "cuda" else None)
    meter = InterferenceMeter()  # what else ran on this process's cores (a thread that sleeps between reads)
    recorder = capture.capture(ctx.profile, rank=ctx.rank, is_cuda=ctx.device.type == "cuda")
    drill = FireDrill(ctx.device, ctx.fire_drill_pct, warm.step_times_s) if ctx.fire_drill_pct else None
    if drill is not None:
        print(f"fire drill: +{ctx.fire_drill_pct:g}%: {drill.describe()}", flush=True)
    elif drill := slow_start_for(ctx.fault, ctx.rank):
        print(drill.describe(), flush=True)
    probe = _speed_probe(ctx, warm)
    if ctx.phases is not None:
        ctx.phases.arm(b.measure_steps, ctx.device, accum)
    window_s = run_window(ctx, engine, batches, meas, MEASURE, [i for i in (meter, recorder, sampler) if i is not None],
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
    busy = meter.columns()
    if why := interference_reason(busy[col.foreign_cpu_frac], busy[col.steal_frac], foreign_s=busy[col.foreign_cpu_s],
                                  steal_s=busy[col.steal_s]):  # a neighbour: not steady
        steady = dataclasses.replace(steady, is_steady=False, reason=f"taken under interference: {why}"
                                     + ("" if steady.is_steady is not False else f"; also {steady.reason}"))
    fast = window.fast_step_rate(step_times, ctx.cell.images_per_step)
    metrics = {
        col.warmup_steps_used: warm.steps, col.num_measure_steps: b.measure_steps, col.images_measured: images,
        col.window_s: window_s, col.warmup_window_s: warm.wall_s, col.compile_s: compile_s, col.autotune_s: autotune_s,
        col.throughput_img_per_s: interval.estimate,
        col.throughput_ci_low_img_per_s: interval.low, col.throughput_ci_high_img_per_s: interval.high,
        col.throughput_per_process_img_per_s: images / window_s / ctx.world_size,  # all ranks of all nodes
        col.step_time_mean_s: float(step_times.mean()), col.step_time_median_s: float(np.median(step_times)),
        col.step_time_cv: float(step_times.std(ddof=1) / step_times.mean()) if len(step_times) > 1 else None,
        col.step_time_total_s: float(step_times.sum()),
        col.step_time_p10_s: ctx.cell.images_per_step / fast, col.fast_step_img_per_s: fast,
        col.exposed_data_wait_s: exposed_wait, col.exposed_data_wait_frac: exposed_wait / window_s,
        col.host_data_wait_s: host_wait, col.host_data_wait_frac: host_wait / window_s,
        col.is_steady: steady.is_steady, "steadiness": steady.reason,
        col.start_transient_steps: start.num_steps, **busy,
        col.start_transient_low_x: start.low_ratio if start.found else None,
        col.start_transient_high_x: start.high_ratio if start.found else None,
        col.train_loss: train_loss, col.lr_final: engine.lr(), col.loss_scale: engine.loss_scale(),
    } | _phase_medians(phase_s, engine) | telemetry_columns(ctx, sampler.summary, images, sampler.foreign_pids) \
        | (probe.summary() if probe is not None else {})
    n = warm.steps + b.measure_steps
    local_images = ctx.cell.benchmark.batch_size * accum
    epoch, is_epoch_start = epoch_marks(n, local_images, loader.samples_per_epoch)
    steps = {
        "step": np.arange(n), col.is_warmup: np.arange(n) < warm.steps,
        col.step_time_s: np.concatenate([warm.step_times_s, step_times]),
        col.host_data_wait_s: np.concatenate([warm.host_data_wait_s, meas.host_data_wait_s]),
        col.exposed_data_wait_s: np.concatenate([warm.exposed_data_wait_s, exposed]),
        "loss": step_loss, "lr": step_lr, "epoch": epoch, col.is_epoch_start: is_epoch_start,
        "images": np.full(n, local_images),
    } | {PHASE_STEP_COLUMNS[name]: _nulls_where_nan(np.concatenate([np.full(warm.steps, np.nan), phase_s[:, k]]))
         for k, name in enumerate(PHASES)}
    step_ends = meter.started_at_s + np.cumsum(step_times)  # the step clock's times laid from the window's start
    steps[col.foreign_cpu_frac] = _nulls_where_nan(np.concatenate([np.full(warm.steps, np.nan),
                                                                    meter.per_step(step_ends)]))
    if probe is not None:
        ran = np.concatenate([np.full(warm.steps, np.nan), probe.per_step])
        steps[col.speed_probe_s] = _nulls_where_nan(ran)  # null where none ran
    return metrics, steps


def first_steps(ctx: Context, engine: Engine, batches: Iterator) -> tuple[float, float, Iterator]:
    """(autotune_s, compile_s, the batches warmup starts from): on CUDA the first step of the cell's shapes
    (cuDNN's autotuning) and then the compile or capture, each on the first batch and undone, so neither is
    counted in warmup. The batch goes back in front of the stream where only autotuning read it: warmup
    trains on the batches it trained on before (a compile consumes its batch, as it always has)."""
    if ctx.device.type != "cuda" and ctx.cell.compile == "eager":
        return 0.0, 0.0, batches
    first = next(batches)
    autotune_s = engine.autotune(*first)
    if ctx.cell.compile == "inductor" and ctx.device.type == "cpu":
        vec_isa.reuse_probe()  # what the run's compile-cache warm-up probed: no probe processes here
    if ctx.cell.compile != "eager":
        return autotune_s, engine.prepare(*first), batches
    return autotune_s, 0.0, itertools.chain([first], batches)


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
    out: dict[str, Any] = {col.phases_graphed: engine.is_graphed}
    for k, name in enumerate(PHASES):
        column = phase_s[:, k]
        out[PHASE_MEDIAN_COLUMNS[name]] = float(np.median(column)) if np.isfinite(column).all() and len(column) else None
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
    """The machine-speed probe of a timed single-process CPU cell (run.speed_probe; harness/cell/instruments/probe.py), or
    None. Not in torchrun groups: one rank probing while the others wait in the next all-reduce would put
    the probe into their step times."""
    if not ctx.cell.run.speed_probe or ctx.device.type != "cpu" or ctx.profile or ctx.is_distributed:
        return None
    steps = ctx.cell.benchmark.measure_steps
    if steps < 2 * MIN_PROBES:  # probe_every gives 1 whatever a probe costs: timing five of them would be waste
        return SpeedProbe(steps, 1)
    step_s = float(np.median(warm.step_times_s)) if warm.steps else 0.0
    cost_s = min(probe_run_once()[1] for _ in range(5))  # the first run also allocates the flush buffer
    return SpeedProbe(steps, probe_every(step_s, cost_s, steps))
