"""Data backends for the `backend` axis: one module each, registered in BACKENDS (harness.data.registry).

Every backend turns a LoaderSpec into a Loader that yields (images, labels) already on the
cell's device: images float32, normalised with the reference mean/std, in the cell's memory
format; labels int64. The training loop times `next()` on it as data-wait.

The measured loop reads an `endless` training loader: one stream of batches across epochs, so an epoch
boundary never restarts workers or pipelines inside a window (it would measure the restart).
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Iterator, Literal, Protocol

from harness.data.registry import AVAILABILITY, BACKENDS

# Reference normalisation (ImageNet statistics on the 0..255 scale).
MEAN_255 = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD_255 = (0.229 * 255, 0.224 * 255, 0.225 * 255)
# Validation resizes the shorter side to image_size / CROP_RATIO (256 for 224) then centre-crops.
VAL_CROP_RATIO = 0.875


@dataclass(frozen=True, slots=True, kw_only=True)
class LoaderSpec:
    """Everything a backend needs to build one split's loader for one process."""

    root: Path | None
    """ImageFolder root holding train/ and val/ (None for synthetic)."""
    split: Literal["train", "val"]
    batch_size: int
    """Images per batch for this process."""
    image_size: int
    """Side of the square crop fed to the model, in pixels."""
    num_classes: int
    memory_format: Literal["nchw", "nhwc"]
    device: str
    """torch device string: "cpu" or "cuda:N"."""
    rank: int = 0
    world_size: int = 1
    seed: int = 0
    """Per-process seed (matrix seed + rank); workers add their worker id."""
    workers: int = 2
    """DataLoader worker processes (pytorch backend)."""
    prefetch_factor: int = 2
    dali_threads: int = 2
    dali_prefetch_queue: int = 2
    endless: bool = False
    """Training only: iterate forever, epoch after epoch in one stream (no restart at a boundary)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.image_size < 1 or self.num_classes < 1:
            raise ValueError("batch_size, image_size and num_classes must be positive")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world of {self.world_size}")
        if self.endless and self.split != "train":
            raise ValueError("only a training loader can be endless")


class Loader(Protocol):
    num_images: int
    """Images in the whole split (all ranks)."""
    samples_per_epoch: int | None
    """Images one epoch gives this rank; None where data has no epochs (synthetic)."""

    def __iter__(self) -> Iterator[tuple["torch.Tensor", "torch.Tensor"]]:  # noqa: F821
        """One epoch of this rank's shard; an endless loader never stops."""

    def __len__(self) -> int:
        """Batches per epoch for this rank."""

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle deterministically for `epoch` (same on every rank)."""

    def close(self) -> None:
        """Release workers, pipelines and pinned buffers."""




def backend_module(name: str):
    try:
        return importlib.import_module(BACKENDS[name])
    except KeyError:
        raise ValueError(f"unknown data backend {name!r}; known: {', '.join(BACKENDS)}") from None


def build_loader(backend: str, spec: LoaderSpec, *, h2d: ContextManager[None] | None = None) -> Loader:
    """`h2d`, a reusable context manager (the cell's `h2d` NVTX range), brackets each host-to-device
    hand-over of a batch; none by default. Data code knows no timing or profiling of its own."""
    return backend_module(backend).build(spec, backend=backend, h2d=h2d or contextlib.nullcontext())


def unavailable_reason(backend: str, device: str) -> str | None:
    """Why `backend` cannot run on `device` ("cpu" or "cuda"), or None. Cheap: imports no heavy library
    (harness.data.registry.AVAILABILITY)."""
    if backend not in AVAILABILITY:
        backend_module(backend)  # the unknown backend's error
    module = AVAILABILITY[backend]
    return importlib.import_module(module).unavailable_reason(device, backend=backend) if module else None
