"""The `synthetic` backend: one fixed random batch already on the device — the compute ceiling, no I/O."""

from __future__ import annotations

import itertools
from typing import Iterator

import torch

from harness.data import LoaderSpec
from harness.matrix.sections import IMAGENET_TRAIN_IMAGES

BATCHES_PER_EPOCH = 1000
"""Nominal epoch length; iteration stops after this many batches."""


class SyntheticLoader:
    """Yields the same (images, labels) tensors every step: no copy, no host work."""

    num_images = IMAGENET_TRAIN_IMAGES
    """What the LR timeline counts an epoch as (synthetic data stands in for ImageNet)."""
    samples_per_epoch = None

    def __init__(self, spec: LoaderSpec) -> None:
        self._endless = spec.endless
        # Drawn on the host from a seeded CPU generator so the values are the same on every device,
        # then moved once.
        g = torch.Generator().manual_seed(spec.seed)
        shape = (spec.batch_size, 3, spec.image_size, spec.image_size)
        memory_format = torch.channels_last if spec.memory_format == "nhwc" else torch.contiguous_format
        # Standard-normal values: the range of images after mean/std normalisation.
        images = torch.randn(shape, generator=g, dtype=torch.float32)
        labels = torch.randint(0, spec.num_classes, (spec.batch_size,), generator=g, dtype=torch.int64)
        self.images = images.to(spec.device).contiguous(memory_format=memory_format)
        self.labels = labels.to(spec.device)

    def __len__(self) -> int:
        return BATCHES_PER_EPOCH

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._endless:
            return itertools.repeat((self.images, self.labels))
        return itertools.repeat((self.images, self.labels), BATCHES_PER_EPOCH)

    def set_epoch(self, epoch: int) -> None:
        pass

    def close(self) -> None:
        pass


def build(spec: LoaderSpec, *, backend: str = "synthetic", h2d=None) -> SyntheticLoader:
    return SyntheticLoader(spec)


