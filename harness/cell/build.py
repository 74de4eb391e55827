"""The cell's loaders and its engine, built as every cell process builds them: the recipe's options from the
cell, the model on its device, DDP across ranks."""

from __future__ import annotations

import torch

from harness.cell.context import Context
from harness.cell.engine import Engine
from harness.cell.recipe import EngineOptions
from harness.cell.instruments.timing import H2D, Ranges
from harness.cell.warmup import most_warmup_steps
from harness.data import LoaderSpec, build_loader
from harness.models import build_model
from harness.matrix.cells import Cell


def rank_loader(ctx: Context, split: str):
    """The split's loader for this rank; training's is endless (one stream across epochs)."""
    c = ctx.cell
    spec = LoaderSpec(endless=split == "train",
        root=ctx.data_root, split=split, batch_size=c.benchmark.batch_size, image_size=c.benchmark.image_size,
        num_classes=c.benchmark.num_classes, memory_format=c.memory_format, device=str(ctx.device),
        rank=ctx.rank, world_size=ctx.world_size, seed=c.benchmark.seed + ctx.rank,
        workers=ctx.within_slot(c.data.workers), prefetch_factor=c.data.prefetch_factor,
        dali_threads=ctx.within_slot(c.data.dali_threads),
        dali_prefetch_queue=c.data.dali_prefetch_queue)
    return build_loader(c.backend, spec, h2d=ctx.ranges(H2D))


def epoch_images(cell: Cell, dataset_images: int) -> int:
    """Images in one epoch of the cell's LR timeline: recipe.epoch_images, or else the training split's
    (`dataset_images`; ImageNet's count for synthetic data)."""
    return cell.recipe.epoch_images or dataset_images


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
        model = build_model(cell.model, num_classes=cell.benchmark.num_classes,
                            zero_init_residual=cell.recipe.zero_init_residual, search_dirs=cell.model_search_dirs)
    return Engine(model, engine_options(cell, str(device), dataset_images=dataset_images), wrap=wrap,
                  ranges=ranges)


def rank_engine(ctx: Context, *, dataset_images: int) -> Engine:
    """This rank's engine: DDP-wrapped in a torchrun group, its gradients watched for the all-reduce phase."""
    wrap = None
    if ctx.is_distributed:
        from torch.nn.parallel import DistributedDataParallel

        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        wrap = lambda m: DistributedDataParallel(m, device_ids=ids)  # noqa: E731
    engine = build_engine(ctx.cell, ctx.device, dataset_images=dataset_images, wrap=wrap, ranges=ctx.ranges)
    if ctx.is_distributed and ctx.phases is not None and not engine.is_graphed:
        ctx.phases.watch_gradients(engine.model.parameters())  # the all-reduce wait, a phase of its own
    return engine
