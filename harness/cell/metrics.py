"""The cell row's figures besides the window's own: validation, the ranks' NVML telemetry, FLOPs and MFU,
peak memory, and where a diverged cell's loss went bad."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from harness.cell.instruments import flops
from harness.cell.build import rank_loader
from harness.cell.context import Context, all_reduce
from harness.cell.engine import Engine
from harness.cell.instruments.telemetry import THROTTLE_REASON_BITS, TelemetrySummary
from harness.cell.instruments.timing import VALIDATION
from harness.models import build_model
from harness.models.user import is_import_path
from harness.results import store
from harness.catalogue import col


def validate(ctx: Context, engine: Engine) -> dict[str, Any]:
    """val_steps batches (or the whole split) in eval mode: loss, top-1 and top-5 over all ranks."""
    c = ctx.cell
    loader = rank_loader(ctx, "val")
    steps = c.benchmark.val_steps or len(loader)
    engine.eval()
    t0 = time.perf_counter()
    with ctx.ranges(VALIDATION):
        for _, (images, labels) in zip(range(steps), loader):
            engine.validate_batch(images, labels)
    totals = all_reduce(ctx, engine.pop_val().double()).tolist()  # sync: read once after validation
    loader.close()
    loss_sum, correct1, correct5, count = totals
    real = c.backend != "synthetic" and count > 0  # synthetic labels are random: accuracy means nothing
    return {col.val_loss: loss_sum / count if real else None, "top1": correct1 / count if real else None,
            "top5": correct5 / count if real else None, col.num_val_images: int(count),
            col.val_s: time.perf_counter() - t0}


NO_VALIDATION = {col.val_loss: None, "top1": None, "top5": None, col.num_val_images: 0, col.val_s: 0.0}


def non_finite_reason(train_loss: float, step_loss: np.ndarray, step_lr: np.ndarray, warmup_steps: int) -> str:
    """The row's reason for a diverged cell: the window's loss, and where this rank's losses first went bad."""
    reason = f"non-finite training loss ({train_loss}) in the measured window"
    bad = np.flatnonzero(~np.isfinite(step_loss))
    if bad.size == 0:
        return reason + "; this rank's step losses are finite (another rank diverged)"
    k = int(bad[0])
    phase = "warmup" if k < warmup_steps else "measured"
    return reason + f"; first non-finite step loss at step {k} ({phase}), lr {step_lr[k]:.4g}"


def telemetry_columns(ctx: Context, summary: TelemetrySummary, images: int,
                      foreign: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The ranks' NVML summaries as one row: power and energy summed over the cell's GPUs, rates averaged,
    memory at its highest, throttling on any GPU, a foreign process on any GPU (`foreign`: this rank's, from
    its sampler). A figure missing on some rank is null, never partial."""
    mine = {"foreign_pids": foreign, col.power_avg_w: summary.power_avg_w, col.energy_j: summary.energy_j,
            col.gpu_util_avg_pct: summary.gpu_util_avg_pct, col.sm_clock_avg_mhz: summary.sm_clock_avg_mhz,
            col.mem_clock_avg_mhz: summary.mem_clock_avg_mhz, col.gpu_mem_used_peak_bytes: summary.mem_used_peak_bytes,
            col.is_throttled: summary.is_throttled, col.throttle_reasons: summary.throttle_reasons,
            col.num_telemetry_samples: summary.num_samples}
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

    energy, power, peak, throttled, reasons, foreign_by_rank = map(
        every, (col.energy_j, col.power_avg_w, col.gpu_mem_used_peak_bytes, col.is_throttled, col.throttle_reasons,
                "foreign_pids"))
    foreign_all = sorted({pid for pids in foreign_by_rank or () for pid in pids})
    seen = {name for names in reasons or () for name in names}
    known = [name for _, name in THROTTLE_REASON_BITS]
    ordered = [name for name in known if name in seen] + sorted(seen.difference(known))
    return {
        col.power_avg_w: sum(power) if power else None, col.energy_j: sum(energy) if energy else None,
        col.img_per_joule: images / sum(energy) if energy and sum(energy) > 0 else None,
        col.gpu_util_avg_pct: mean(col.gpu_util_avg_pct), col.sm_clock_avg_mhz: mean(col.sm_clock_avg_mhz),
        col.mem_clock_avg_mhz: mean(col.mem_clock_avg_mhz), col.gpu_mem_used_peak_bytes: max(peak) if peak else None,
        col.is_throttled: any(throttled) if throttled else None,
        col.throttle_reasons: ",".join(ordered) if reasons is not None else None,
        col.num_telemetry_samples: min(r[col.num_telemetry_samples] for r in ranks),
        col.gpu_shared: bool(foreign_all) if foreign_by_rank is not None else None,
        col.gpu_foreign_pids: foreign_all if foreign_by_rank is not None else None,
    }


def count_flops(ctx: Context) -> float | None:
    """FLOPs of one training image, counted on the meta device before any window (rank 0 reports them).

    Counting costs a first cell 1.5-2 s (FlopCounterMode's first use imports torch._dynamo) and depends only on
    the model's code, classes, image size and torch, so the count is kept twice: in the run's own small file
    (job["flops_cache"]) that later cells of the run reuse, and, for registry models, in the machine's nvbench
    cache (machine_flops_cache()), keyed by the torch version and a digest of harness/models' source, where every
    later run finds it. A user's model (an import path) is counted once per run: its source is the user's.
    """
    b = ctx.cell.benchmark
    key = f"{b.model}/{b.num_classes}/{b.image_size}"
    cache = Path(ctx.flops_cache) if ctx.flops_cache else None
    known = store.read_json(cache) if cache and cache.is_file() else {}
    if key in known:
        return known[key]
    machine = machine_flops_cache() if not is_import_path(b.model) else None
    machine_key = f"{key}/torch {torch.__version__}/models {models_digest()}"
    value = _read_machine_count(machine, machine_key)
    if value is None:
        try:
            # The counter the registry's figures come from, for every model; a user's module found where the cell's was.
            builder = functools.partial(build_model, search_dirs=ctx.cell.model_search_dirs)
            value = flops.training_flops_per_image(b.model, num_classes=b.num_classes, image_size=b.image_size,
                                                   builder=builder)
        except Exception as exc:  # a model the meta device cannot run costs the MFU columns, not the cell
            print(f"nvbench: warning: FLOPs not counted ({type(exc).__name__}: {exc}); MFU columns are null",
                  file=sys.stderr)
            return None
        if machine is not None:
            with contextlib.suppress(OSError):  # a read-only cache costs the next run a count, not this cell
                store.write_json(machine, (_read_machine(machine) or {}) | {machine_key: value})
    if cache:
        store.write_json(cache, known | {key: value})
    return value


def machine_flops_cache() -> Path:
    """$NVBENCH_CACHE (or ~/.cache/nvbench)/flops.json: registry models' FLOPs per image, shared by every run."""
    return Path(os.environ.get("NVBENCH_CACHE") or Path.home() / ".cache" / "nvbench").expanduser() / "flops.json"


@functools.lru_cache(maxsize=1)
def models_digest() -> str:
    """A digest of harness/models' Python source: a commit that changes a registry model counts it afresh."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parents[1].joinpath("models").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _read_machine(path: Path | None) -> dict[str, Any] | None:
    if path is None or not path.is_file():
        return None
    try:
        known = store.read_json(path)
    except (OSError, ValueError):  # torn or foreign: counted again and written whole
        return None
    return known if isinstance(known, dict) else None


def _read_machine_count(path: Path | None, key: str) -> float | None:
    value = (_read_machine(path) or {}).get(key)
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def mfu_columns(ctx: Context, flops_per_image: float | None, metrics: dict[str, Any], tf32: bool) -> dict[str, Any]:
    """The MFU columns against this device's peak for the cell's precision (null, with a warning, without one)."""
    name = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "cpu"
    peak = flops.peak_tflops(name, ctx.cell.precision, tf32_allowed=tf32)
    if peak.tflops is None:
        print(f"nvbench: warning: mfu_pct is null: {peak.why_none}", file=sys.stderr)
    return flops.mfu_columns(flops_per_image=flops_per_image, throughput_img_per_s=metrics[col.throughput_img_per_s],
                             throughput_per_process_img_per_s=metrics[col.throughput_per_process_img_per_s], peak=peak)


def memory_columns(ctx: Context) -> dict[str, Any]:
    """Peak memory: the allocator's on CUDA, the process's resident set on CPU."""
    if ctx.device.type == "cuda":
        return {col.mem_peak_bytes: torch.cuda.max_memory_allocated(ctx.device), col.mem_kind: "device"}
    return {col.mem_peak_bytes: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, col.mem_kind: "host_rss"}
