"""Each PIL transform against its specification (geometry, probabilities, determinism)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from PIL import Image

from harness.data import VAL_CROP_RATIO
from harness.data.transforms import (
    CenterCrop,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    ResizeShorter,
    train_transform,
    val_transform,
)


def _gradient_image(width: int, height: int) -> Image.Image:
    """Every pixel distinct enough to tell a mirror or an offset apart."""
    x = np.arange(width, dtype=np.uint16)[None, :].repeat(height, 0)
    y = np.arange(height, dtype=np.uint16)[:, None].repeat(width, 1)
    rgb = np.stack([x % 256, y % 256, (x * 7 + y * 3) % 256], axis=-1).astype(np.uint8)
    return Image.fromarray(rgb)


def test_rrc_boxes_respect_scale_and_ratio_bounds():
    rrc = RandomResizedCrop(32)
    rng = random.Random(0)
    width, height = 400, 300
    areas, ratios = [], []
    for _ in range(3000):
        left, top, w, h = rrc.get_params(width, height, rng)
        assert 0 <= left and left + w <= width and 0 <= top and top + h <= height
        areas.append(w * h / (width * height))
        ratios.append(w / h)
    # Rounding w and h to whole pixels moves area and ratio by well under 2 % at this size.
    assert min(areas) >= 0.08 * 0.98 and max(areas) <= 1.0
    assert min(ratios) >= 0.75 * 0.98 and max(ratios) <= 4 / 3 * 1.02
    # Uniform in area: the mean fraction of accepted draws sits near the middle of [0.08, 1]
    # (large draws are rejected more often, pulling it a little below 0.54).
    assert 0.40 < np.mean(areas) < 0.56
    # Log-uniform in ratio: as many crops wider than tall as taller than wide.
    wider = np.mean(np.array(ratios) > 1)
    assert 0.4 < wider < 0.6


def test_rrc_output_is_exactly_size_square():
    rrc = RandomResizedCrop(24)
    rng = random.Random(1)
    for w, h in [(100, 60), (17, 90), (24, 24), (5, 5)]:
        assert rrc(_gradient_image(w, h), rng).size == (24, 24)


@pytest.mark.parametrize(
    ("width", "height", "expected"),
    [
        (1000, 10, (493, 0, 13, 10)),  # far too wide: ratio clamped to 4/3, full height, centred
        (10, 1000, (0, 493, 10, 13)),  # far too tall: ratio clamped to 3/4, full width, centred
    ],
)
def test_rrc_falls_back_to_centre_crop_with_clamped_ratio(width, height, expected):
    # With scale (0.9, 1) no draw can fit inside such an elongated image.
    rrc = RandomResizedCrop(16, scale=(0.9, 1.0))
    assert rrc.get_params(width, height, random.Random(0)) == expected


def test_rrc_fallback_keeps_whole_image_when_its_ratio_is_in_bounds():
    rrc = RandomResizedCrop(16, attempts=0)
    assert rrc.get_params(40, 36, random.Random(0)) == (0, 0, 40, 36)


def test_rrc_is_deterministic_for_a_seed_with_either_generator():
    img = _gradient_image(80, 60)
    rrc = RandomResizedCrop(20)
    for make in (random.Random, np.random.default_rng):
        a = [np.asarray(rrc(img, rng)) for rng in [make(5)] for _ in range(5)]
        b = [np.asarray(rrc(img, rng)) for rng in [make(5)] for _ in range(5)]
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
    boxes = {rrc.get_params(80, 60, random.Random(s)) for s in range(20)}
    assert len(boxes) > 15


def test_rrc_full_crop_is_a_plain_resize():
    img = _gradient_image(40, 40)
    rrc = RandomResizedCrop(20, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    out = rrc(img, random.Random(0))
    assert np.array_equal(np.asarray(out), np.asarray(img.resize((20, 20), Image.Resampling.BILINEAR)))


def test_rrc_rejects_bad_arguments():
    with pytest.raises(ValueError, match="scale"):
        RandomResizedCrop(8, scale=(0.5, 0.1))
    with pytest.raises(ValueError, match="ratio"):
        RandomResizedCrop(8, ratio=(0.0, 1.0))


def test_flip_mirrors_exactly_with_probability_p():
    img = _gradient_image(9, 4)
    mirrored = np.asarray(img)[:, ::-1]
    rng = random.Random(3)
    flips = 0
    for _ in range(4000):
        out = np.asarray(RandomHorizontalFlip(0.3)(img, rng))
        if np.array_equal(out, mirrored):
            flips += 1
        else:
            assert np.array_equal(out, np.asarray(img))
    # Binomial(4000, 0.3): sd ~ 29, so +-120 is about 4 sd.
    assert abs(flips - 1200) < 120
    assert np.array_equal(np.asarray(RandomHorizontalFlip(1.0)(img, rng)), mirrored)
    assert np.array_equal(np.asarray(RandomHorizontalFlip(0.0)(img, rng)), np.asarray(img))


@pytest.mark.parametrize(
    ("size", "src", "expected"),
    [(37, (64, 64), (37, 37)), (37, (80, 40), (74, 37)), (10, (30, 45), (10, 15)), (10, (33, 100), (10, 30))],
)
def test_resize_shorter_sets_shorter_side_and_keeps_aspect(size, src, expected):
    assert ResizeShorter(size)(_gradient_image(*src)).size == expected


def test_center_crop_takes_the_centre():
    img = _gradient_image(10, 8)
    out = CenterCrop(4)(img)
    assert out.size == (4, 4)
    # Offsets (10 - 4) / 2 = 3 and (8 - 4) / 2 = 2.
    assert np.array_equal(np.asarray(out), np.asarray(img)[2:6, 3:7])
    with pytest.raises(ValueError, match="cannot centre-crop 12x12 from a 10x8 image"):
        CenterCrop(12)(img)


def test_compose_threads_one_rng_and_applies_in_order():
    img = _gradient_image(50, 30)
    pipeline = Compose((RandomResizedCrop(16), RandomHorizontalFlip()))
    a = np.asarray(pipeline(img, random.Random(9)))
    rng = random.Random(9)
    b = np.asarray(RandomHorizontalFlip()(RandomResizedCrop(16)(img, rng), rng))
    assert np.array_equal(a, b)


def test_train_and_val_pipelines_produce_the_model_size():
    img = _gradient_image(64, 48)
    assert train_transform(32)(img, random.Random(0)).size == (32, 32)
    assert val_transform(32)(img, random.Random(0)).size == (32, 32)
    # Val resizes the shorter side to round(32 / 0.875) = 37 before cropping.
    assert round(32 / VAL_CROP_RATIO) == 37
    assert math.isclose(224 / VAL_CROP_RATIO, 256)
