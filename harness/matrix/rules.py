"""The rules across a matrix's sections: what the file alone says would fail once its cells run."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from typing import Any

from harness.matrix.knobs import Problem, show
from harness.matrix.sections import (
    AXES,
    DIGITS_CLASSES,
    MODEL_OUTPUT_STRIDE,
    Axes,
    BenchmarkConfig,
    DataConfig,
    Exclude,
    GenerateConfig,
    LaunchConfig,
    RecipeConfig,
    SmokeConfig,
)
from harness.catalogue import col


def cross_problems(sections: dict[str, Any], axes: Axes, excludes: tuple[Exclude, ...], *,
                   check_paths: bool) -> list[Problem]:
    """Rules across sections: what the file alone says would fail once cells run."""
    bench, data, launch, smoke = sections["benchmark"], sections["data"], sections["launch"], sections["smoke"]
    gen, reads_data = data.generate, bool(set(axes.backend) - {"synthetic"})
    problems = []
    if data.path == "" and gen.num_classes > bench.num_classes:
        problems.append(Problem("benchmark.num_classes", f"{bench.num_classes} is fewer than data.generate.num_classes "
                        f"({gen.num_classes}); raise num_classes or generate fewer classes"))
    if reads_data and gen.kind == "digits":
        problems += _digits_problems(gen)
    if check_paths and data.path and reads_data:
        problems += _dataset_path_problems(data.path)
    problems += _batch_problems(bench, smoke, data, _data_shards(axes, excludes), launch)
    problems += _warmup_problems(bench, sections["recipe"])
    if launch.nnodes > 1 and not launch.rdzv_endpoint and sections["executor"].kind != "slurm":
        problems.append(Problem("launch.rdzv_endpoint", "required when launch.nnodes > 1 (host:port every node can reach), "
                        "unless executor.kind = \"slurm\" (the job's first node serves it)"))
    if launch.node_rank >= launch.nnodes:
        problems.append(Problem("launch.node_rank", f"{launch.node_rank} must be < launch.nnodes ({launch.nnodes})"))
    return problems


def _digits_problems(gen: GenerateConfig) -> list[Problem]:
    problems = []
    if gen.num_classes > DIGITS_CLASSES:
        problems.append(Problem("data.generate.num_classes", f"digits has {DIGITS_CLASSES} classes, asked for "
                        f"{gen.num_classes}"))
    # A read of what is installed, not a change to it: validation stays pure.
    if importlib.util.find_spec("sklearn") is None:
        problems.append(Problem("data.generate.kind", "'digits' needs scikit-learn, which is not installed: "
                        "pip install 'nvbench[digits]', or use kind = 'shapes'"))
    return problems


def _dataset_path_problems(path: str) -> list[Problem]:
    try:
        root = Path(path).expanduser()
    except RuntimeError:  # "~someone" for a user this machine does not know
        return [Problem("data.path", f"cannot expand {show(path)}: no such user's home directory")]
    missing = [s for s in ("train", "val") if not (root / s).is_dir()]
    if missing:
        return [Problem("data.path", f"dataset {show(str(root))} has no {' or '.join(s + '/' for s in missing)} "
                "directory (expected an ImageFolder root)")]
    return []


def _warmup_problems(bench: BenchmarkConfig, recipe: RecipeConfig) -> list[Problem]:
    if bench.warmup_min_steps > bench.warmup_max_steps:
        return [Problem("benchmark.warmup_min_steps", f"{bench.warmup_min_steps} is more than benchmark.warmup_max_steps "
                f"({bench.warmup_max_steps})")]
    if bench.warmup_steps == "auto" and recipe.lr_timeline == "compressed":
        return [Problem("benchmark.warmup_steps", "'auto' leaves the cell's length open, which the compressed LR timeline "
                "is fitted to; give a number of steps, or use recipe.lr_timeline = 'reference'")]
    return []


def _data_shards(axes: Axes, excludes: tuple[Exclude, ...]) -> set[tuple[str, int]]:
    """(backend, world size) of every cell that reads a dataset, excludes applied."""
    pairs = set()
    for values in itertools.product(*(getattr(axes, axis) for axis in AXES)):
        cell = dict(zip(AXES, values))
        if cell["backend"] != "synthetic" and not any(ex.matches(cell) for ex in excludes):
            pairs.add((cell["backend"], cell[col.world_size]))
    return pairs


def _batch_problems(bench: BenchmarkConfig, smoke: SmokeConfig, data: DataConfig, shards: set[tuple[str, int]],
                    launch: LaunchConfig) -> list[Problem]:
    """Batches the model or the generated dataset cannot supply, as written and under --smoke (which always
    generates its dataset), for the cells that read data (`shards`: backend and world size)."""
    gen = data.generate
    shapes = [("benchmark", bench.batch_size, bench.image_size, gen.train_per_class * gen.num_classes, data.path == ""),
              ("smoke", smoke.batch_size, smoke.image_size, smoke.dataset_train_per_class * smoke.num_classes, True)]
    problems = []
    for where, batch, image, train_images, generated in shapes:
        if batch == 1 and image <= MODEL_OUTPUT_STRIDE:
            # BatchNorm in training needs more than one value per channel; one image shrunk to 1x1 has one.
            problems.append(Problem(f"{where}.batch_size", f"one image of {image} px leaves the model's last stage 1x1, "
                            f"which BatchNorm cannot train on; use batch_size >= 2 or image_size > "
                            f"{MODEL_OUTPUT_STRIDE}"))
        # pytorch's sampler pads every rank's shard to the same length; DALI's training epoch floors it.
        short = [(images, world) for backend, ws in sorted(shards) for world in [ws * launch.nnodes]
                 for images in [train_images // world if backend.startswith("dali") else -(-train_images // world)]
                 if images < batch]
        if generated and short:
            per_rank, world = min(short)
            problems.append(Problem(f"{where}.batch_size", f"{batch} is more than the {per_rank} generated training images "
                            f"each of {world} process(es) reads; the loaders train on full batches only, so they "
                            "would yield none: generate more images or use a smaller batch"))
    return problems
