"""Small PIL image transforms for the pytorch backend (the reference's train and val geometry).

Random transforms draw from an explicit `rng` passed at call time — a `random.Random` or a
`numpy.random.Generator` — so each DataLoader worker can own a seeded stream.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence, Union

import numpy as np
from PIL import Image

from harness.data import VAL_CROP_RATIO

Rng = Union[random.Random, np.random.Generator]
"""Anything with `random()` and `uniform(lo, hi)`: both stdlib and numpy generators qualify."""

Box = tuple[int, int, int, int]
"""A crop as (left, top, width, height) in source pixels."""


def _randint(rng: Rng, lo: int, hi: int) -> int:
    """Uniform integer in [lo, hi], inclusive, from either kind of generator."""
    span = hi - lo + 1
    return lo + min(int(rng.random() * span), span - 1)


@dataclass(frozen=True, slots=True)
class RandomResizedCrop:
    """Crop a random area fraction and aspect ratio, then resize bilinearly to size x size.

    Area fraction is uniform in `scale`, aspect ratio (width / height) log-uniform in `ratio`;
    the first of `attempts` draws that fits inside the image wins. If none fits, the fallback
    is the largest centred crop whose ratio is the image's own clamped into `ratio`.
    """

    size: int
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    attempts: int = 10

    def __post_init__(self) -> None:
        if self.size < 1 or self.attempts < 0:
            raise ValueError(f"size must be >= 1 and attempts >= 0, got {self.size}, {self.attempts}")
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ValueError(f"scale must satisfy 0 < lo <= hi <= 1, got {self.scale}")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"ratio must satisfy 0 < lo <= hi, got {self.ratio}")

    def get_params(self, width: int, height: int, rng: Rng) -> Box:
        """The crop box for a width x height source."""
        area = width * height
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(self.attempts):
            target_area = area * rng.uniform(self.scale[0], self.scale[1])
            aspect = math.exp(rng.uniform(log_lo, log_hi))
            w = round(math.sqrt(target_area * aspect))
            h = round(math.sqrt(target_area / aspect))
            if 0 < w <= width and 0 < h <= height:
                return _randint(rng, 0, width - w), _randint(rng, 0, height - h), w, h
        return self._fallback(width, height)

    def _fallback(self, width: int, height: int) -> Box:
        own_ratio = width / height
        if own_ratio < self.ratio[0]:
            w, h = width, max(1, round(width / self.ratio[0]))
        elif own_ratio > self.ratio[1]:
            w, h = max(1, round(height * self.ratio[1])), height
        else:
            w, h = width, height
        return (width - w) // 2, (height - h) // 2, w, h

    def __call__(self, img: Image.Image, rng: Rng) -> Image.Image:
        left, top, w, h = self.get_params(img.width, img.height, rng)
        # resize(box=...) crops and resamples in one pass, with PIL's antialiasing filter.
        return img.resize((self.size, self.size), Image.Resampling.BILINEAR,
                          box=(left, top, left + w, top + h))


@dataclass(frozen=True, slots=True)
class RandomHorizontalFlip:
    """Mirror left-right with probability p."""

    p: float = 0.5

    def __post_init__(self) -> None:
        if not 0 <= self.p <= 1:
            raise ValueError(f"p must be in [0, 1], got {self.p}")

    def __call__(self, img: Image.Image, rng: Rng) -> Image.Image:
        if rng.random() < self.p:
            return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return img


@dataclass(frozen=True, slots=True)
class ResizeShorter:
    """Resize bilinearly so the shorter side is `size`, keeping the aspect ratio (longer side rounded)."""

    size: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        if width <= height:
            return self.size, max(1, round(height * self.size / width))
        return max(1, round(width * self.size / height)), self.size

    def __call__(self, img: Image.Image, rng: Rng | None = None) -> Image.Image:
        out = self.output_size(img.width, img.height)
        if out == img.size:
            return img
        return img.resize(out, Image.Resampling.BILINEAR)


@dataclass(frozen=True, slots=True)
class CenterCrop:
    """Crop the centred size x size square (offsets rounded half to even); the image must be at least that big."""

    size: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")

    def get_params(self, width: int, height: int) -> Box:
        if width < self.size or height < self.size:
            raise ValueError(f"cannot centre-crop {self.size}x{self.size} from a {width}x{height} image")
        return round((width - self.size) / 2), round((height - self.size) / 2), self.size, self.size

    def __call__(self, img: Image.Image, rng: Rng | None = None) -> Image.Image:
        left, top, w, h = self.get_params(img.width, img.height)
        return img.crop((left, top, left + w, top + h))


Transform = Callable[[Image.Image, Rng], Image.Image]


@dataclass(frozen=True, slots=True)
class Compose:
    """Apply transforms in order, threading the same rng through all of them."""

    transforms: Sequence[Transform]

    def __call__(self, img: Image.Image, rng: Rng) -> Image.Image:
        for t in self.transforms:
            img = t(img, rng)
        return img


def train_transform(image_size: int) -> Compose:
    """The reference training augmentation: random-resized crop, then horizontal flip."""
    return Compose((RandomResizedCrop(image_size), RandomHorizontalFlip(0.5)))


def val_transform(image_size: int) -> Compose:
    """The reference validation geometry: shorter side to image_size / VAL_CROP_RATIO, centre crop."""
    return Compose((ResizeShorter(round(image_size / VAL_CROP_RATIO)), CenterCrop(image_size)))
