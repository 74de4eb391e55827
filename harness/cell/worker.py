"""What runs inside one cell's process (one per rank under torchrun), stage by stage: set up, build (`build`),
warm up and measure (`measure`), validate (`metrics`), and write this rank's step rows plus, on each node's
local rank 0, the cell's result. Started as `python -m harness.cell run JOB_JSON`."""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import random
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from harness.cell.instruments import capture
from harness.cell import vec_isa
from harness.cell.build import rank_engine, rank_loader
from harness.cell.context import Context
from harness.cell.measure import train
from harness.cell.metrics import NO_VALIDATION, count_flops, memory_columns, mfu_columns, validate
from harness.cell.instruments.timing import CELL, PhaseClock, make_ranges
from harness.results import store
from harness.results.env import cudnn_knobs, usable_cpu_count
from harness.results.schema import step_table
from harness.matrix.cells import Cell
from harness.matrix.job import LAUNCHED_AT_ENV, SLURM_NODE_ENV, cpu_list
from harness.catalogue import col
from harness.exits import EXIT_CELL_NO_SPACE


def _setup(job: dict[str, Any]) -> Context:
    cell = capture.cell_for_job(Cell.from_plain(job["cell"]), job.get("profile"))
    nvtx_on, profiler_ranges = capture.range_modes(cell, job.get("profile"))
    capture.prepare(cell, job.get("profile"))
    phases = PhaseClock() if cell.run.phase_timing else None
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    slot_cores = _say_where(job.get("slot"), rank, local_world)
    if slot_cores is not None:  # the slot's share of cores, whatever the device: torch's pool stays inside it
        torch.set_num_threads(cell.run.threads_per_process or slot_cores)
    if job["device"] == "cuda":
        visible = torch.cuda.device_count()
        if local_rank >= visible:  # the runner skips such cells; never let two ranks share a GPU silently
            raise RuntimeError(f"local rank {local_rank} has no GPU of its own: {visible} visible on this node")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = cell.recipe.cudnn_benchmark
    else:
        device = torch.device("cpu")
        if slot_cores is None:  # the node's cores (as this process may use them) shared by its ranks
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
    return Context(cell=cell, run_id=job[col.run_id], repeat=job["repeat"], out_dir=Path(job["out_dir"]),
                   data_root=Path(job["data_root"]) if job.get("data_root") else None, fault=job.get("fault"),
                   rank=rank, local_rank=local_rank, world_size=world_size, device=device,
                   ranges=make_ranges(nvtx_on, profiler=profiler_ranges, phases=phases), phases=phases,
                   profile=job.get("profile"),
                   fire_drill_pct=float(job.get(col.fire_drill_pct) or 0.0), flops_cache=job.get("flops_cache"),
                   slot_cores=slot_cores)


def _say_where(slot: dict[str, Any] | None, rank: int, local_world: int) -> int | None:
    """One line in the job's log: the cores this process runs on and the GPUs it sees; returns its share of the
    slot's cores when the runner pinned the job to a slot (None: the whole machine)."""
    cores = cpu_list(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    where = f" (slot {slot['index']}, holding {slot[col.num_slots]}; packing {slot['packing']})" if slot else ""
    # One write, its newline included: the runner sets PYTHONUNBUFFERED, where print() writes the text and the
    # newline in two calls, and a rank torn down between them (torchrun ends the group when another rank
    # fails) leaves its line open for the next writer of the shared log to run into.
    sys.stdout.write(f"nvbench: rank {rank} on cores {cores}{where}, CUDA_VISIBLE_DEVICES="
                     f"{os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}\n")
    sys.stdout.flush()
    if not slot or not slot.get("cpus"):
        return None
    return max(1, len(slot["cpus"]) // max(1, local_world))


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
        loader = rank_loader(ctx, "train")  # first: the LR timeline's epoch may be the dataset's size
        batches = iter(loader)  # before the model: the loader's workers load while it builds
        engine = rank_engine(ctx, dataset_images=loader.num_images)
        build_s = time.perf_counter() - t0
        collector_on_after_build()
        flops_per_image = count_flops(ctx) if ctx.local_rank == 0 else None  # each node's result writer
        metrics, steps = train(ctx, engine, loader, batches)
        # Synthetic labels are random: validation would cost time and mean nothing.
        metrics |= validate(ctx, engine) if ctx.cell.backend != "synthetic" else NO_VALIDATION
    n = len(steps["step"])
    steps |= {col.run_id: [ctx.run_id] * n, col.cell_id: [ctx.cell.cell_id] * n, "repeat": np.full(n, ctx.repeat),
              "rank": np.full(n, ctx.rank)}
    store.write_table(ctx.out_dir / f"steps-rank{ctx.rank}.parquet", step_table(steps))
    tf32 = ctx.device.type == "cuda" and ctx.cell.recipe.allow_tf32
    mfu = mfu_columns(ctx, flops_per_image, metrics, tf32) if ctx.local_rank == 0 else {}
    # what this process really started with (the runner sets it from run.malloc): the row shows the fact
    # cuDNN's knobs as this process trained (null on CPU, where no convolution goes through cuDNN)
    cudnn = cudnn_knobs() if ctx.device.type == "cuda" else {}
    return metrics | mfu | memory_columns(ctx) | cudnn | {col.build_s: build_s, col.tf32_allowed: tf32,
                                                          col.glibc_tunables: os.environ.get("GLIBC_TUNABLES", "")}


def warm_compile_cache(ctx: Context) -> dict[str, Any]:
    """A compiled cell's untimed warm-up (the runner's compile_cache.py): build as a repeat does, compile the
    step on the first batch (undone), and leave. The run's compile cache (TORCHINDUCTOR_CACHE_DIR) then holds
    what every timed repeat of the cell reads instead of compiling."""
    with ctx.ranges(CELL):
        t0 = time.perf_counter()
        loader = rank_loader(ctx, "train")
        batches = iter(loader)
        engine = rank_engine(ctx, dataset_images=loader.num_images)
        build_s = time.perf_counter() - t0
        engine.train()
        if ctx.device.type == "cpu":
            vec_isa.probe_once()  # once for the run: its repeats reuse the answer
        compile_s = engine.prepare(*next(batches))
        loader.close()
    return {col.build_s: build_s, col.compile_s: compile_s}


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
        work = warm_compile_cache if job.get("compile_warmup") else run_cell
        result = work(ctx) | {col.startup_s: startup_s}
        # The metrics are all-reduced, so every node's local rank 0 holds the global figures: each node's
        # runner (out_dir is node-local) gets a full row. Per-rank extras (step times, memory) are its own.
        if ctx.local_rank == 0:
            store.write_json(out_dir / "result.json", result)
        return 0
    except store.NoSpace as exc:  # the machine's fault, not the cell's: no row says it failed, the run stops
        with contextlib.suppress(OSError):  # unbuffered: its log is on that full disk too
            os.write(2, f"cell: {exc.line()}\n".encode())
        return EXIT_CELL_NO_SPACE
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
            "time": time.time(), "in_collective": in_collective, "traceback": traceback.format_exc(),
            "node": os.environ.get(SLURM_NODE_ENV)}
