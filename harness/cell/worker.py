"""What runs inside one cell's process (one per rank under torchrun): build, train, validate, and write
this rank's step rows plus, on each node's local rank 0, the cell's result. Started as
`python -m harness.cell run JOB_JSON`."""

from __future__ import annotations

import faulthandler
import gc
import math
import os
import random
import resource
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from harness.cell import capture, flops
from harness.cell.engine import Engine
from harness.cell.faults import FireDrill, inject_fault
from harness.cell.probe import SpeedProbe, probe_every
from harness.cell.probe import run_once as probe_run_once
from harness.cell.recipe import EngineOptions
from harness.cell.telemetry import THROTTLE_REASON_BITS, TelemetrySampler, TelemetrySummary
from harness.cell.timing import (
    CELL,
    DATA,
    FORWARD,
    H2D,
    MEASURE,
    PHASES,
    STEP,
    VALIDATION,
    WARMUP,
    Instrument,
    PhaseClock,
    Ranges,
    StepClock,
    make_ranges,
)
from harness.data import LoaderSpec, build_loader
from harness.models import build_model
from harness.results import store
from harness.results.env import usable_cpu_count
from harness.results.schema import step_table
from harness.spec.cells import Cell
from harness.spec.job import LAUNCHED_AT_ENV
from harness.spec.matrix import WARMUP_CHUNK, WARMUP_TOLERANCE
from harness.stats import window


class NonFiniteLoss(RuntimeError):
    """Training diverged: the measured window's loss is NaN or infinite."""


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

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def _setup(job: dict[str, Any]) -> Context:
    cell = capture.cell_for_job(Cell.from_plain(job["cell"]), job.get("profile"))
    nvtx_on, profiler_ranges = capture.range_modes(cell, job.get("profile"))
    phases = PhaseClock() if cell.run.phase_timing else None
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if job["device"] == "cuda":
        visible = torch.cuda.device_count()
        if local_rank >= visible:  # the runner skips such cells; never let two ranks share a GPU silently
            raise RuntimeError(f"local rank {local_rank} has no GPU of its own: {visible} visible on this node")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = cell.recipe.cudnn_benchmark
    else:
        device = torch.device("cpu")
        # The node's cores (as this process may use them) shared by its ranks.
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        torch.set_num_threads(cell.run.threads_per_process or max(1, usable_cpu_count() // local_world))
    if world_size != cell.world_size * cell.launch.nnodes:  # images_per_step and every rate assume the cell's
        raise RuntimeError(f"WORLD_SIZE={world_size} but the cell runs world_size x nnodes = "
                           f"{cell.world_size} x {cell.launch.nnodes} processes; start it with nvbench run")
    if world_size > 1:
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo",
                                device_id=device if device.type == "cuda" else None)
    seed = cell.benchmark.seed + rank
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return Context(cell=cell, run_id=job["run_id"], repeat=job["repeat"], out_dir=Path(job["out_dir"]),
                   data_root=Path(job["data_root"]) if job.get("data_root") else None, fault=job.get("fault"),
                   rank=rank, local_rank=local_rank, world_size=world_size, device=device,
                   ranges=make_ranges(nvtx_on, profiler=profiler_ranges, phases=phases), phases=phases,
                   profile=job.get("profile"),
                   fire_drill_pct=float(job.get("fire_drill_pct") or 0.0), flops_cache=job.get("flops_cache"))


def _loader(ctx: Context, split: str):
    """The split's loader for this rank; training's is endless (one stream across epochs)."""
    c = ctx.cell
    spec = LoaderSpec(endless=split == "train",
        root=ctx.data_root, split=split, batch_size=c.benchmark.batch_size, image_size=c.benchmark.image_size,
        num_classes=c.benchmark.num_classes, memory_format=c.memory_format, device=str(ctx.device),
        rank=ctx.rank, world_size=ctx.world_size, seed=c.benchmark.seed + ctx.rank, workers=c.data.workers,
        prefetch_factor=c.data.prefetch_factor, dali_threads=c.data.dali_threads,
        dali_prefetch_queue=c.data.dali_prefetch_queue)
    return build_loader(c.backend, spec, h2d=ctx.ranges(H2D))


def epoch_images(cell: Cell, dataset_images: int) -> int:
    """Images in one epoch of the cell's LR timeline: recipe.epoch_images, or else the training split's
    (`dataset_images`; ImageNet's count for synthetic data)."""
    return cell.recipe.epoch_images or dataset_images


def most_warmup_steps(cell: Cell) -> int:
    """Warmup steps the cell may run: fixed, or auto's maximum."""
    b = cell.benchmark
    return b.warmup_max_steps if b.warmup_steps == "auto" else b.warmup_steps


def engine_options(cell: Cell, device: str, *, dataset_images: int) -> EngineOptions:
    """How `cell` trains, as the engine takes it: the recipe, the axes and the epoch of its LR timeline."""
    r = cell.recipe
    return EngineOptions(
        precision=cell.precision, memory_format=cell.memory_format, grad_accum=cell.grad_accum, device=device,
        global_batch=cell.images_per_step, total_steps=most_warmup_steps(cell) + cell.benchmark.measure_steps,
        lr_per_256=r.lr_per_256, momentum=r.momentum, nesterov=r.nesterov, weight_decay=r.weight_decay,
        bn_bias_weight_decay=r.bn_bias_weight_decay, label_smoothing=r.label_smoothing, schedule=r.schedule,
        lr_timeline=r.lr_timeline, epochs=r.epochs, lr_warmup_epochs=r.lr_warmup_epochs,
        epoch_images=epoch_images(cell, dataset_images), step_milestones=r.step_milestones,
        step_gamma=r.step_gamma, init_loss_scale=r.init_loss_scale, dynamic_loss_scale=r.dynamic_loss_scale,
        loss_scale_growth_interval=r.loss_scale_growth_interval, allow_tf32=r.allow_tf32, compile=cell.compile)


def build_engine(cell: Cell, device: torch.device, *, dataset_images: int, wrap=None,
                 ranges: Ranges | None = None) -> Engine:
    """The cell's model and engine on `device`, as every cell process builds them (benchmarks/overhead.py's
    bare loop builds its engine here too, so the two cannot drift apart)."""
    with torch.device(device):  # initialised where it trains: no host-side init and copy
        model = build_model(cell.benchmark.model, num_classes=cell.benchmark.num_classes,
                            zero_init_residual=cell.recipe.zero_init_residual)
    return Engine(model, engine_options(cell, str(device), dataset_images=dataset_images), wrap=wrap,
                  ranges=ranges)


def _engine(ctx: Context, *, dataset_images: int) -> Engine:
    wrap = None
    if ctx.is_distributed:
        from torch.nn.parallel import DistributedDataParallel

        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        wrap = lambda m: DistributedDataParallel(m, device_ids=ids)  # noqa: E731
    engine = build_engine(ctx.cell, ctx.device, dataset_images=dataset_images, wrap=wrap, ranges=ctx.ranges)
    if ctx.is_distributed and ctx.phases is not None and not engine.is_graphed:
        ctx.phases.watch_gradients(engine.model.parameters())  # the all-reduce wait, a phase of its own
    return engine


def _fence(ctx: Context) -> None:
    """Window boundary: the wall clock may only be read once all queued work is done on every rank."""
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)  # sync: the window's wall time must include all queued kernels
    if ctx.is_distributed:
        dist.barrier()  # sync: every rank opens and closes the same window


def _window(ctx: Context, engine: Engine, batches, clock: StepClock, name: str,
            instruments: Sequence[Instrument] = (), drill: FireDrill | None = None,
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


def _all_reduce(ctx: Context, t: torch.Tensor, op=None) -> torch.Tensor:
    if ctx.is_distributed:
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t


def _validate(ctx: Context, engine: Engine) -> dict[str, Any]:
    c = ctx.cell
    loader = _loader(ctx, "val")
    steps = c.benchmark.val_steps or len(loader)
    engine.eval()
    t0 = time.perf_counter()
    with ctx.ranges(VALIDATION):
        for _, (images, labels) in zip(range(steps), loader):
            engine.validate_batch(images, labels)
    totals = _all_reduce(ctx, engine.pop_val().double()).tolist()  # sync: read once after validation
    loader.close()
    loss_sum, correct1, correct5, count = totals
    real = c.backend != "synthetic" and count > 0  # synthetic labels are random: accuracy means nothing
    return {"val_loss": loss_sum / count if real else None, "top1": correct1 / count if real else None,
            "top5": correct5 / count if real else None, "num_val_images": int(count),
            "val_s": time.perf_counter() - t0}


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
    median of the `chunk` steps before them."""
    if len(step_times_s) < 2 * chunk:
        return False
    last, before = np.median(step_times_s[-chunk:]), np.median(step_times_s[-2 * chunk:-chunk])
    return abs(last / before - 1.0) <= tolerance


def _warm_up(ctx: Context, engine: Engine, batches, *, clock: Callable[[int], StepClock] | None = None) -> Warmup:
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
        wall += _window(ctx, engine, batches, clocks[-1], WARMUP)
        if not auto:
            break
        times = np.concatenate([c.resolve() for c in clocks])
        done = is_steady(times) or len(times) >= b.warmup_max_steps
        if ctx.is_distributed:  # all ranks stop together: the least steady decides
            done = bool(_all_reduce(ctx, torch.tensor([int(done)], device=ctx.device), dist.ReduceOp.MIN).item())
        todo = 0 if done else min(WARMUP_CHUNK, b.warmup_max_steps - len(times))
    cat = (lambda arrays: np.concatenate(arrays)) if clocks else (lambda arrays: np.zeros(0))
    return Warmup(step_times_s=cat([c.resolve() for c in clocks]), host_data_wait_s=cat([c.host_data_wait_s for c in clocks]),
                  exposed_data_wait_s=cat([c.resolve_exposed_data_wait() for c in clocks]), wall_s=wall)


def _train(ctx: Context, engine: Engine, loader) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    b, accum = ctx.cell.benchmark, ctx.cell.grad_accum
    batches = iter(loader)
    engine.train()
    # Compile or capture on a real batch, then undo that step: before any window (eager: nothing to do).
    compile_s = engine.prepare(*next(batches)) if ctx.cell.compile != "eager" else 0.0
    warm = _warm_up(ctx, engine, batches)
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
    probe = _speed_probe(ctx, warm)
    if ctx.phases is not None:
        ctx.phases.arm(b.measure_steps, ctx.device, accum)
    window_s = _window(ctx, engine, batches, meas, MEASURE, [i for i in (recorder, sampler) if i is not None],
                       drill=drill, probe=probe)
    loader.close()
    # Everything below reads device values: outside the window, after its closing fence.
    loss_sum, count = _all_reduce(ctx, engine.pop_train_loss().double()).tolist()
    train_loss = loss_sum / count
    step_loss, step_lr = engine.step_records()
    if not math.isfinite(train_loss):
        raise NonFiniteLoss(non_finite_reason(train_loss, step_loss, step_lr, warm.steps))
    step_times = meas.resolve()
    exposed = meas.resolve_exposed_data_wait()
    phase_s = _phase_times(ctx, engine, step_times)
    waits = torch.tensor([meas.host_data_wait_s.sum(), exposed.sum()], dtype=torch.float64, device=ctx.device)
    host_wait, exposed_wait = (_all_reduce(ctx, waits) / ctx.world_size).tolist()
    window_s = _all_reduce(ctx, torch.tensor([window_s], dtype=torch.float64, device=ctx.device), dist.ReduceOp.MAX).item()
    images = b.measure_steps * ctx.cell.images_per_step
    interval = window.window_throughput_interval(step_times, ctx.cell.images_per_step, images, window_s)
    steady = window.steadiness(step_times)
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
        "train_loss": train_loss, "lr_final": engine.lr(), "loss_scale": engine.loss_scale(),
    } | _phase_medians(phase_s, engine) | _telemetry_columns(ctx, sampler.summary, images) | (probe.summary() if probe is not None else {})
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


def non_finite_reason(train_loss: float, step_loss: np.ndarray, step_lr: np.ndarray, warmup_steps: int) -> str:
    """The row's reason for a diverged cell: the window's loss, and where this rank's losses first went bad."""
    reason = f"non-finite training loss ({train_loss}) in the measured window"
    bad = np.flatnonzero(~np.isfinite(step_loss))
    if bad.size == 0:
        return reason + "; this rank's step losses are finite (another rank diverged)"
    k = int(bad[0])
    phase = "warmup" if k < warmup_steps else "measured"
    return reason + f"; first non-finite step loss at step {k} ({phase}), lr {step_lr[k]:.4g}"


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


def _telemetry_columns(ctx: Context, summary: TelemetrySummary, images: int) -> dict[str, Any]:
    """The ranks' NVML summaries as one row: power and energy summed over the cell's GPUs, rates averaged,
    memory at its highest, throttling on any GPU. A figure missing on some rank is null, never partial."""
    mine = {"power_avg_w": summary.power_avg_w, "energy_j": summary.energy_j,
            "gpu_util_avg_pct": summary.gpu_util_avg_pct, "sm_clock_avg_mhz": summary.sm_clock_avg_mhz,
            "mem_clock_avg_mhz": summary.mem_clock_avg_mhz, "gpu_mem_used_peak_bytes": summary.mem_used_peak_bytes,
            "is_throttled": summary.is_throttled, "throttle_reasons": summary.throttle_reasons,
            "num_telemetry_samples": summary.num_samples}
    ranks = [mine]
    if ctx.is_distributed:  # outside the window; a collective every rank reaches
        ranks = [None] * ctx.world_size
        dist.all_gather_object(ranks, mine)

    def every(key: str) -> list | None:
        values = [r[key] for r in ranks]
        return None if any(v is None for v in values) else values

    def mean(key: str) -> float | None:
        values = every(key)
        return None if values is None else sum(values) / len(values)

    energy, power, peak, throttled, reasons = map(
        every, ("energy_j", "power_avg_w", "gpu_mem_used_peak_bytes", "is_throttled", "throttle_reasons"))
    seen = {name for names in reasons or () for name in names}
    known = [name for _, name in THROTTLE_REASON_BITS]
    ordered = [name for name in known if name in seen] + sorted(seen.difference(known))
    return {
        "power_avg_w": sum(power) if power else None, "energy_j": sum(energy) if energy else None,
        "img_per_joule": images / sum(energy) if energy and sum(energy) > 0 else None,
        "gpu_util_avg_pct": mean("gpu_util_avg_pct"), "sm_clock_avg_mhz": mean("sm_clock_avg_mhz"),
        "mem_clock_avg_mhz": mean("mem_clock_avg_mhz"), "gpu_mem_used_peak_bytes": max(peak) if peak else None,
        "is_throttled": any(throttled) if throttled else None,
        "throttle_reasons": ",".join(ordered) if reasons is not None else None,
        "num_telemetry_samples": min(r["num_telemetry_samples"] for r in ranks),
    }


def _count_flops(ctx: Context) -> float | None:
    """FLOPs of one training image, counted on the meta device before any window (rank 0 reports them).

    Counting takes a second or two and depends only on model, classes and image size, so a run keeps
    the counts in one small file (job["flops_cache"]) that later cells of the run reuse.
    """
    b = ctx.cell.benchmark
    key = f"{b.model}/{b.num_classes}/{b.image_size}"
    cache = Path(ctx.flops_cache) if ctx.flops_cache else None
    known = store.read_json(cache) if cache and cache.is_file() else {}
    if key in known:
        return known[key]
    try:
        value = flops.training_flops_per_image(b.model, num_classes=b.num_classes, image_size=b.image_size)
    except Exception as exc:  # a model the meta device cannot run costs the MFU columns, not the cell
        print(f"nvbench: warning: FLOPs not counted ({type(exc).__name__}: {exc}); MFU columns are null",
              file=sys.stderr)
        return None
    if cache:
        store.write_json(cache, known | {key: value})
    return value


def _mfu(ctx: Context, flops_per_image: float | None, metrics: dict[str, Any], tf32: bool) -> dict[str, Any]:
    name = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "cpu"
    peak = flops.peak_tflops(name, ctx.cell.precision, tf32_allowed=tf32)
    if peak.tflops is None:
        print(f"nvbench: warning: mfu_pct is null: {peak.why_none}", file=sys.stderr)
    return flops.mfu_columns(flops_per_image=flops_per_image, throughput_img_per_s=metrics["throughput_img_per_s"],
                             throughput_per_process_img_per_s=metrics["throughput_per_process_img_per_s"], peak=peak)


def _memory(ctx: Context) -> dict[str, Any]:
    if ctx.device.type == "cuda":
        return {"mem_peak_bytes": torch.cuda.max_memory_allocated(ctx.device), "mem_kind": "device"}
    return {"mem_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "mem_kind": "host_rss"}


NO_VALIDATION = {"val_loss": None, "top1": None, "top5": None, "num_val_images": 0, "val_s": 0.0}


def collector_on_after_build() -> None:
    """Where a cell's process (harness.cell.__main__ starts it with the collector off) turns it on.

    Everything alive now (torch and torch._dynamo's modules, the model, the loader) moves to the permanent
    generation first, so a full collection later, in the measured window included, walks only the objects
    made since (0.2 ms after a few steps) instead of all of these (0.13-0.18 s on CI's cores); the loader's
    workers fork from a heap the collector no longer writes to. A caller that kept the collector on (a
    test running a cell in its own process) is left as it is.
    """
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def run_cell(ctx: Context) -> dict[str, Any]:
    """Train and validate one cell; write this rank's steps; return the cell metrics (all-reduced: global)."""
    with ctx.ranges(CELL):
        t0 = time.perf_counter()
        loader = _loader(ctx, "train")  # first: the LR timeline's epoch may be the dataset's size
        engine = _engine(ctx, dataset_images=loader.num_images)
        build_s = time.perf_counter() - t0
        collector_on_after_build()
        flops_per_image = _count_flops(ctx) if ctx.local_rank == 0 else None  # each node's result writer
        metrics, steps = _train(ctx, engine, loader)
        # Synthetic labels are random: validation would cost time and mean nothing.
        metrics |= _validate(ctx, engine) if ctx.cell.backend != "synthetic" else NO_VALIDATION
    n = len(steps["step"])
    steps |= {"run_id": [ctx.run_id] * n, "cell_id": [ctx.cell.cell_id] * n, "repeat": np.full(n, ctx.repeat),
              "rank": np.full(n, ctx.rank)}
    store.write_table(ctx.out_dir / f"steps-rank{ctx.rank}.parquet", step_table(steps))
    tf32 = ctx.device.type == "cuda" and ctx.cell.recipe.allow_tf32
    mfu = _mfu(ctx, flops_per_image, metrics, tf32) if ctx.local_rank == 0 else {}
    # what this process really started with (the runner sets it from run.malloc): the row shows the fact
    return metrics | mfu | _memory(ctx) | {"build_s": build_s, "tf32_allowed": tf32,
                                           "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m harness.cell run JOB_JSON", file=sys.stderr)
        return 2
    job = store.read_json(Path(argv[0]))
    # The runner's launch to here: the interpreter, torch's import, torchrun's rendezvous (one clock: same host).
    launched_at = float(os.environ.get(LAUNCHED_AT_ENV) or job.get("launched_at") or 0)  # SLURM: at its srun
    startup_s = time.time() - launched_at if launched_at else None
    out_dir, rank = Path(job["out_dir"]), int(os.environ.get("RANK", 0))
    _stack_on_sigterm(out_dir / f"stack-rank{rank}.txt")
    try:
        ctx = _setup(job)
        result = run_cell(ctx) | {"startup_s": startup_s}
        # The metrics are all-reduced, so every node's local rank 0 holds the global figures: each node's
        # runner (out_dir is node-local) gets a full row. Per-rank extras (step times, memory) are its own.
        if ctx.local_rank == 0:
            store.write_json(out_dir / "result.json", result)
        return 0
    except BaseException as exc:  # every failure becomes the cell's reason, then a non-zero exit
        store.write_json(out_dir / f"error-rank{rank}.json", _error_record(exc, rank))
        traceback.print_exc()
        return 1
    finally:
        # Failed ranks too: NCCL's communicators are released rather than left to the exit.
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


_STACK_FILE = None


def _stack_on_sigterm(path: Path) -> None:
    """On SIGTERM (a cell timeout, or torchrun stopping the group) write this process's Python stacks to `path`,
    then die as before: a timed-out cell's row can say where each rank was (a hung rank vs. one in a barrier)."""
    global _STACK_FILE
    _STACK_FILE = open(path, "w")  # kept open: faulthandler writes to the fd from inside the signal handler
    faulthandler.register(signal.SIGTERM, file=_STACK_FILE, all_threads=True, chain=True)
    # Forked DataLoader workers inherit the handler; they must not write into this rank's file.
    os.register_at_fork(after_in_child=lambda: faulthandler.unregister(signal.SIGTERM))


def _error_record(exc: BaseException, rank: int) -> dict[str, Any]:
    """What the runner reports for this rank. `in_collective` marks an error that torch.distributed raised
    (a peer that died or hung shows up on the other ranks this way), so the runner can prefer the cause."""
    frames = traceback.extract_tb(exc.__traceback__)
    in_dist = any("torch/distributed/" in f.filename or "torch/nn/parallel/" in f.filename for f in frames)
    in_collective = (in_dist or isinstance(exc, dist.DistError)
                     or any(word in str(exc) for word in ("gloo", "NCCL", "ProcessGroup")))
    return {"rank": rank, "type": type(exc).__name__, "message": str(exc) or type(exc).__name__,
            "time": time.time(), "in_collective": in_collective, "traceback": traceback.format_exc()}
