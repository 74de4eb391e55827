"""What runs inside one cell's process (one per rank under torchrun): build, train, validate, and write
this rank's step rows plus, on rank 0, the cell's result. Started as `python -m harness.launch cell JOB_JSON`."""

from __future__ import annotations

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
from typing import Any, Iterator

import numpy as np
import torch
import torch.distributed as dist

from harness import stats, store
from harness.data import LoaderSpec, build_loader
from harness.engine import Engine, EngineOptions
from harness.matrix import Cell
from harness.models import build_model
from harness.records import step_table
from harness.timing import CELL, DATA, MEASURE, STEP, VALIDATION, WARMUP, Ranges, StepClock, make_ranges


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

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def _setup(job: dict[str, Any]) -> Context:
    cell = Cell.from_plain(job["cell"])
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if job["device"] == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = cell.recipe.cudnn_benchmark
    else:
        device = torch.device("cpu")
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        torch.set_num_threads(cell.run.threads_per_process or max(1, (os.cpu_count() or 1) // local_world))
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
                   ranges=make_ranges(cell.run.nvtx))


def _loader(ctx: Context, split: str):
    c = ctx.cell
    spec = LoaderSpec(
        root=ctx.data_root, split=split, batch_size=c.benchmark.batch_size, image_size=c.benchmark.image_size,
        num_classes=c.benchmark.num_classes, memory_format=c.memory_format, device=str(ctx.device),
        rank=ctx.rank, world_size=ctx.world_size, seed=c.benchmark.seed + ctx.rank, workers=c.data.workers,
        prefetch_factor=c.data.prefetch_factor, dali_threads=c.data.dali_threads,
        dali_prefetch_queue=c.data.dali_prefetch_queue)
    return build_loader(c.backend, spec)


def _endless(loader) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def _engine(ctx: Context) -> Engine:
    c, r = ctx.cell, ctx.cell.recipe
    model = build_model(c.benchmark.model, num_classes=c.benchmark.num_classes,
                        zero_init_residual=r.zero_init_residual)
    opts = EngineOptions(
        precision=c.precision, memory_format=c.memory_format, grad_accum=c.grad_accum, device=str(ctx.device),
        global_batch=c.images_per_step, total_steps=c.benchmark.warmup_steps + c.benchmark.measure_steps,
        lr_per_256=r.lr_per_256, momentum=r.momentum, nesterov=r.nesterov, weight_decay=r.weight_decay,
        bn_bias_weight_decay=r.bn_bias_weight_decay, label_smoothing=r.label_smoothing, schedule=r.schedule,
        lr_warmup_fraction=r.lr_warmup_fraction, step_milestones=r.step_milestones, step_gamma=r.step_gamma,
        init_loss_scale=r.init_loss_scale, loss_scale_growth_interval=r.loss_scale_growth_interval,
        allow_tf32=r.allow_tf32)
    wrap = None
    if ctx.is_distributed:
        from torch.nn.parallel import DistributedDataParallel

        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        wrap = lambda m: DistributedDataParallel(m, device_ids=ids)  # noqa: E731
    return Engine(model, opts, wrap=wrap)


def _fence(ctx: Context) -> None:
    """Window boundary: the wall clock may only be read once all queued work is done on every rank."""
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)  # sync: the window's wall time must include all queued kernels
    if ctx.is_distributed:
        dist.barrier()  # sync: every rank opens and closes the same window


def _window(ctx: Context, engine: Engine, batches, clock: StepClock, name: str) -> float:
    """Run `clock.num_steps` optimizer steps; return the window's wall time. No host sync inside."""
    accum, ranges = ctx.cell.grad_accum, ctx.ranges
    perf = time.perf_counter
    _fence(ctx)
    t0 = perf()
    with ranges(name):
        for i in range(clock.num_steps):
            with ranges(STEP):
                clock.begin(i)
                wait = 0.0
                for micro in range(accum):
                    t = perf()
                    with ranges(DATA):
                        images, labels = next(batches)
                    wait += perf() - t
                    engine.forward_backward(images, labels, sync_grads=micro == accum - 1)
                engine.optimizer_step()
                clock.end(i)
                clock.data_wait_s[i] = wait
    _fence(ctx)
    return perf() - t0


def _all_reduce(ctx: Context, t: torch.Tensor, op=None) -> torch.Tensor:
    if ctx.is_distributed:
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t


def _inject_fault(ctx: Context, engine: Engine) -> None:
    """Test-only failure modes (NVBENCH_FAULT), applied as the measured window opens."""
    kind, _, only_rank = (ctx.fault or "").partition("@")
    if not kind or (only_rank and int(only_rank) != ctx.rank):
        return
    if kind == "raise":
        raise RuntimeError("injected fault: raise")
    if kind == "oom":
        raise torch.OutOfMemoryError("injected fault: out of memory")
    if kind == "exit":
        os._exit(3)
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "nan":
        with torch.no_grad():
            next(engine.model.parameters()).fill_(float("nan"))
        return
    raise ValueError(f"unknown injected fault {kind!r}")


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


def _train(ctx: Context, engine: Engine) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    b = ctx.cell.benchmark
    loader = _loader(ctx, "train")
    batches = _endless(loader)
    engine.train()
    warm = StepClock(b.warmup_steps, ctx.device)
    meas = StepClock(b.measure_steps, ctx.device)
    warm_s = _window(ctx, engine, batches, warm, WARMUP) if b.warmup_steps else 0.0
    engine.pop_train_loss()  # warmup loss is not the measured loss
    _inject_fault(ctx, engine)
    window_s = _window(ctx, engine, batches, meas, MEASURE)
    loader.close()
    # Everything below reads device values: outside the window, after its closing fence.
    loss_sum, count = _all_reduce(ctx, engine.pop_train_loss().double()).tolist()
    train_loss = loss_sum / count
    if not math.isfinite(train_loss):
        raise NonFiniteLoss(f"non-finite training loss ({train_loss}) in the measured window")
    step_times = meas.resolve()
    wait = _all_reduce(ctx, torch.tensor([meas.data_wait_s.sum()], dtype=torch.float64, device=ctx.device)).item() / ctx.world_size
    window_s = _all_reduce(ctx, torch.tensor([window_s], dtype=torch.float64, device=ctx.device), dist.ReduceOp.MAX).item()
    images = b.measure_steps * ctx.cell.images_per_step
    interval = stats.batch_means_interval(step_times, ctx.cell.images_per_step)
    steady = stats.steadiness(step_times)
    metrics = {
        "num_warmup_steps": b.warmup_steps, "num_measure_steps": b.measure_steps, "images_measured": images,
        "window_s": window_s, "warmup_window_s": warm_s,
        "throughput_img_per_s": images / window_s,
        "throughput_ci_low_img_per_s": interval.low, "throughput_ci_high_img_per_s": interval.high,
        "throughput_per_process_img_per_s": images / window_s / (ctx.world_size * ctx.cell.launch.nnodes),
        "step_time_mean_s": float(step_times.mean()), "step_time_median_s": float(np.median(step_times)),
        "step_time_cv": float(step_times.std(ddof=1) / step_times.mean()) if len(step_times) > 1 else None,
        "data_wait_s": wait, "data_wait_frac": wait / window_s,
        "is_steady": steady.is_steady, "steadiness": steady.reason,
        "train_loss": train_loss, "lr_final": engine.lr(), "loss_scale": engine.loss_scale(),
    }
    local_images = ctx.cell.benchmark.batch_size * ctx.cell.grad_accum
    steps = {
        "step": np.arange(b.warmup_steps + b.measure_steps),
        "is_warmup": np.arange(b.warmup_steps + b.measure_steps) < b.warmup_steps,
        "step_time_s": np.concatenate([warm.resolve(), step_times]),
        "data_wait_s": np.concatenate([warm.data_wait_s, meas.data_wait_s]),
        "images": np.full(b.warmup_steps + b.measure_steps, local_images),
    }
    return metrics, steps


def _memory(ctx: Context) -> dict[str, Any]:
    if ctx.device.type == "cuda":
        return {"mem_peak_bytes": torch.cuda.max_memory_allocated(ctx.device), "mem_kind": "device"}
    return {"mem_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "mem_kind": "host_rss"}


def run_cell(ctx: Context) -> dict[str, Any]:
    """Train and validate one cell; write this rank's steps; return the cell metrics (global on rank 0)."""
    with ctx.ranges(CELL):
        t0 = time.perf_counter()
        engine = _engine(ctx)
        build_s = time.perf_counter() - t0
        metrics, steps = _train(ctx, engine)
        metrics |= _validate(ctx, engine)
    n = len(steps["step"])
    steps |= {"run_id": [ctx.run_id] * n, "cell_id": [ctx.cell.cell_id] * n, "repeat": np.full(n, ctx.repeat),
              "rank": np.full(n, ctx.rank)}
    store.write_table(ctx.out_dir / f"steps-rank{ctx.rank}.parquet", step_table(steps))
    tf32 = ctx.device.type == "cuda" and ctx.cell.recipe.allow_tf32
    return metrics | _memory(ctx) | {"build_s": build_s, "tf32_allowed": tf32}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m harness.launch cell JOB_JSON", file=sys.stderr)
        return 2
    job = store.read_json(Path(argv[0]))
    out_dir, rank = Path(job["out_dir"]), int(os.environ.get("RANK", 0))
    try:
        ctx = _setup(job)
        result = run_cell(ctx)
        if ctx.rank == 0:
            store.write_json(out_dir / "result.json", result)
        if ctx.is_distributed:
            dist.destroy_process_group()
        return 0
    except BaseException as exc:  # every failure becomes the cell's reason, then a non-zero exit
        store.write_json(out_dir / f"error-rank{rank}.json",
                         {"rank": rank, "type": type(exc).__name__, "message": str(exc) or type(exc).__name__,
                          "traceback": traceback.format_exc()})
        traceback.print_exc()
        return 1
