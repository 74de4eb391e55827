"""The mission matrix trains as the reference does: the LR of its first steps, on every world size and
accumulation, is the reference's epoch-granular warmup (DLE's lr_cosine_policy), and fp16 scales the loss
by the reference's static 128."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import ROOT
from torch import nn

from harness.cell.engine import Engine
from harness.cell.build import engine_options, epoch_images
from harness.matrix.cells import expand
from harness.matrix.sections import IMAGENET_TRAIN_IMAGES
from harness.matrix.parse import load_matrix

MISSION = ROOT / "matrices" / "resnet50.toml"
GENERATED_IMAGES = 6400
"""The mission's generated dataset: the epoch the timeline would use if the matrix did not name one."""


def reference_lr(step: int, *, global_batch: int, epoch_images: int) -> float:
    """DLE: lr = base * (epoch + 1) / warmup while warming up; base = 0.256 per 256 images."""
    base = 0.256 * global_batch / 256
    epoch = step * global_batch // epoch_images
    assert epoch < 8, "these steps are all in the warmup epochs"
    return base * (epoch + 1) / 8


def mission_cells():
    cells = [c for c in expand(load_matrix(MISSION, check_paths=False))
             if c.backend == "pytorch" and c.memory_format == "nhwc" and c.precision == "fp16"]
    assert {(c.world_size, c.grad_accum) for c in cells} == {(1, 1), (1, 2), (8, 1), (8, 2)}
    return cells


@pytest.mark.parametrize("cell", mission_cells(), ids=lambda c: f"ws{c.world_size}-ga{c.grad_accum}")
def test_the_first_200_steps_train_at_the_reference_lr(cell):
    opts = engine_options(cell, "cpu", dataset_images=GENERATED_IMAGES)
    opts = dataclasses.replace(opts, total_steps=200, precision="fp32")  # the LR does not depend on it
    engine = Engine(nn.Linear(2, 2), opts)
    seen = []
    for _ in range(200):
        seen.append(engine.lr())
        engine.optimizer_step()  # no gradients: only the schedule moves
    expected = [reference_lr(k, global_batch=cell.images_per_step, epoch_images=IMAGENET_TRAIN_IMAGES)
                for k in range(200)]
    assert seen == pytest.approx(expected, rel=1e-12)
    assert max(seen) <= 0.256 * cell.images_per_step / 256 / 8 * 2  # nowhere near the peak


def test_the_mission_scales_fp16_losses_by_a_static_128():
    (cell, *_) = mission_cells()
    opts = engine_options(cell, "cpu", dataset_images=GENERATED_IMAGES)
    assert (opts.init_loss_scale, opts.dynamic_loss_scale) == (128.0, False)


def test_the_epoch_is_the_training_splits_unless_the_matrix_names_one():
    (cell,) = [c for c in mission_cells() if (c.world_size, c.grad_accum) == (1, 2)]
    assert epoch_images(cell, GENERATED_IMAGES) == IMAGENET_TRAIN_IMAGES  # the mission names ImageNet's
    auto = dataclasses.replace(cell, recipe=dataclasses.replace(cell.recipe, epoch_images=0))
    assert epoch_images(auto, GENERATED_IMAGES) == GENERATED_IMAGES
    # Counted in the generated dataset's 6,400 images, accumulation 2 (512 a step) would be at the peak LR
    # by step 100, the schedule that diverged on the H100.
    opts = engine_options(auto, "cpu", dataset_images=GENERATED_IMAGES)
    engine = Engine(nn.Linear(2, 2), dataclasses.replace(opts, total_steps=101, precision="fp32"))
    for _ in range(100):
        engine.optimizer_step()
    assert engine.lr() == pytest.approx(0.512)


def test_the_convergence_matrix_says_it_compresses_the_schedule():
    matrix = load_matrix(ROOT / "matrices" / "convergence-cpu.toml", check_paths=False)
    assert matrix.recipe.lr_timeline == "compressed"
