"""The `pytorch` backend: ImageFolder + PIL transforms in DataLoader workers, uint8 "fast collate",
and on CUDA a side-stream prefetcher that copies and normalises batch N+1 while batch N trains. An
endless (training) loader draws epoch after epoch from one sampler, so its persistent workers never
restart at an epoch boundary.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import math
import random
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from harness.data import MEAN_255, STD_255, LoaderSpec
from harness.data.transforms import Compose, train_transform, val_transform

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")

Sample = tuple[Path, int]


def scan_image_folder(split_dir: Path) -> tuple[list[Sample], list[str]]:
    """(path, label) pairs and class names of an ImageFolder split.

    Labels index the class directories sorted by name; files are sorted within each class.
    """
    split_dir = Path(split_dir)
    if not split_dir.is_dir():
        raise FileNotFoundError(f"image folder {split_dir} does not exist or is not a directory")
    classes = sorted(d.name for d in split_dir.iterdir() if d.is_dir())
    samples = [
        (path, label)
        for label, name in enumerate(classes)
        for path in sorted((split_dir / name).iterdir())
        if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()
    ]
    if not samples:
        raise ValueError(f"image folder {split_dir} has no class directories with "
                         f"{'/'.join(IMAGE_EXTENSIONS)} images")
    return samples, classes


class ImageFolderDataset(Dataset):
    """Decodes one sample to (uint8 HWC array, label) with this process's augmentation stream."""

    def __init__(self, samples: list[Sample], transform: Compose, seed: int) -> None:
        self.samples = samples
        self.transform = transform
        self.rng = random.Random(seed)
        """Replaced in each worker by _seed_worker, so workers draw different augmentations."""

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        path, label = self.samples[index]
        with Image.open(path) as img:
            img = self.transform(img.convert("RGB"), self.rng)
        return np.asarray(img, dtype=np.uint8), label


def _seed_worker(base_seed: int, worker_id: int) -> None:
    # A worker collects its own garbage whatever its parent's collector was doing when it forked (a cell's
    # process starts its loader's workers with the collector still off, before building its model).
    gc.enable()
    seed = base_seed + worker_id
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = random.Random(seed)


def fast_collate(batch: list[tuple[np.ndarray, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack to a uint8 tensor of shape NCHW and int64 labels; no float conversion on the host.

    The pixels stay in PIL's HWC order, so the tensor is NCHW-shaped with channels_last strides:
    no host transpose, and already the layout an NHWC model wants.
    """
    images = torch.from_numpy(np.stack([image for image, _ in batch])).permute(0, 3, 1, 2)
    labels = torch.tensor([label for _, label in batch], dtype=torch.int64)
    return images, labels


class EpochShuffleSampler(Sampler[int]):
    """Single-process sampler: a fresh permutation per epoch from (seed, epoch), or the identity."""

    def __init__(self, size: int, *, shuffle: bool, seed: int) -> None:
        self.size, self.shuffle, self.seed, self.epoch = size, shuffle, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(range(self.size))
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.size, generator=g).tolist())


class EndlessShardSampler(Sampler[int]):
    """This rank's training indices for epoch 0, 1, 2, ... back to back, never stopping.

    Epoch e is the permutation of (seed, e) that EpochShuffleSampler (one process) or DistributedSampler
    (padded to a multiple of the world size, rank::world) would draw for it, so the stream holds the same
    samples per epoch as epoch-by-epoch iteration; only the restart between epochs is gone.
    """

    def __init__(self, size: int, *, seed: int, rank: int = 0, world_size: int = 1) -> None:
        self.size, self.seed, self.rank, self.world_size = size, seed, rank, world_size
        self.per_rank = math.ceil(size / world_size)
        """Samples this rank draws per epoch."""

    def __iter__(self) -> Iterator[int]:
        for epoch in itertools.count():
            order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + epoch)).tolist()
            padded = (order * math.ceil(self.per_rank * self.world_size / self.size))[: self.per_rank * self.world_size]
            yield from padded[self.rank::self.world_size]


def _memory_format(name: str) -> torch.memory_format:
    return torch.channels_last if name == "nhwc" else torch.contiguous_format


class PytorchLoader:
    """Loader protocol over a DataLoader; yields normalised float32 images and int64 labels on the device."""

    def __init__(self, spec: LoaderSpec, dataloader: DataLoader, sampler: Sampler, h2d=None, *,
                 num_images: int, samples_per_epoch: int) -> None:
        self.num_images = num_images
        self.samples_per_epoch = samples_per_epoch
        self.device = torch.device(spec.device)
        self._h2d = h2d or contextlib.nullcontext()
        self.memory_format = _memory_format(spec.memory_format)
        self._dataloader = dataloader
        self._sampler = sampler
        self._mean = torch.tensor(MEAN_255, dtype=torch.float32, device=self.device).view(1, 3, 1, 1)
        self._std = torch.tensor(STD_255, dtype=torch.float32, device=self.device).view(1, 3, 1, 1)
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def __len__(self) -> int:
        return self.samples_per_epoch // self._dataloader.batch_size if self._is_endless else len(self._dataloader)

    @property
    def _is_endless(self) -> bool:
        return isinstance(self._sampler, EndlessShardSampler)

    def set_epoch(self, epoch: int) -> None:
        if self._is_endless:
            raise ValueError("an endless loader runs its epochs in one stream; it has no set_epoch")
        self._sampler.set_epoch(epoch)

    def close(self) -> None:
        # A persistent-workers DataLoader keeps its iterator (and worker processes) alive; stop them now
        # rather than whenever the garbage collector gets to it.
        iterator = getattr(self._dataloader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        self._dataloader._iterator = None

    def _normalise(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 NCHW-shaped (any layout) on the device -> float32 (x - mean) / std in the target layout."""
        # One kernel casts and lays out; the arithmetic then runs in place.
        x = images.to(dtype=torch.float32, memory_format=self.memory_format)
        return x.sub_(self._mean).div_(self._std)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # The DataLoader's iterator now, not at the first batch: its workers start loading at once, so a
        # caller that takes the iterator before building its model overlaps the two (as DALI's pipeline,
        # started when its loader is built, already does).
        batches = iter(self._dataloader)
        if self._stream is None:
            return self._iter_inline(batches)
        return self._iter_prefetch(batches)

    def _iter_inline(self, batches: Iterator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for images, labels in batches:
            yield self._normalise(images.to(self.device)), labels.to(self.device)

    def _iter_prefetch(self, batches: Iterator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # Order the side stream after everything already queued on the consumer stream (the mean/std
        # constants included); a device-side dependency, once per epoch, not a host sync.
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        pending = self._enqueue(batches)
        while pending is not None:
            consumer = torch.cuda.current_stream(self.device)
            # The consumer stream must not read the batch before the side stream finishes its copy
            # and normalisation: an on-device dependency, not a host sync.
            consumer.wait_stream(self._stream)
            images, labels = pending
            # These tensors were allocated on the side stream; tell the caching allocator they are also
            # used on the consumer stream, so their memory is not recycled before that work completes.
            images.record_stream(consumer)
            labels.record_stream(consumer)
            pending = self._enqueue(batches)  # copy of N+1 overlaps the caller's compute on N
            yield images, labels

    def _enqueue(self, batches: Iterator) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Start the host-to-device copy and normalisation of the next batch on the side stream."""
        try:
            images, labels = next(batches)
        except StopIteration:
            return None
        with self._h2d, torch.cuda.stream(self._stream):
            # non_blocking from pinned memory: the copy is asynchronous to the host; the pinned-memory
            # allocator records the stream, so the host buffer outlives the copy.
            images = images.to(self.device, non_blocking=True)
            labels = labels.to(self.device, non_blocking=True)
            return self._normalise(images), labels


def _sampler(spec: LoaderSpec, size: int, train: bool) -> Sampler:
    # spec.seed is matrix seed + rank; every rank must draw the same permutation to shard it.
    shuffle_seed = spec.seed - spec.rank
    if spec.endless:
        return EndlessShardSampler(size, seed=shuffle_seed, rank=spec.rank, world_size=spec.world_size)
    if spec.world_size > 1:
        # Pads the shard with repeated samples so every rank runs the same number of steps.
        return DistributedSampler(range(size), num_replicas=spec.world_size, rank=spec.rank,
                                  shuffle=train, seed=shuffle_seed, drop_last=False)
    return EpochShuffleSampler(size, shuffle=train, seed=shuffle_seed)


def build(spec: LoaderSpec, *, backend: str = "pytorch", h2d=None) -> PytorchLoader:
    if spec.root is None:
        raise ValueError("the pytorch backend needs a dataset root")
    train = spec.split == "train"
    samples, classes = scan_image_folder(Path(spec.root) / spec.split)
    if len(classes) > spec.num_classes:
        raise ValueError(f"{Path(spec.root) / spec.split} has {len(classes)} classes but the model has "
                         f"num_classes={spec.num_classes}; raise num_classes or use another dataset")
    transform = train_transform(spec.image_size) if train else val_transform(spec.image_size)
    dataset = ImageFolderDataset(samples, transform, spec.seed)
    sampler = _sampler(spec, len(dataset), train)
    has_workers = spec.workers > 0
    dataloader = DataLoader(
        dataset,
        batch_size=spec.batch_size,
        sampler=sampler,
        num_workers=spec.workers,
        collate_fn=fast_collate,
        pin_memory=torch.device(spec.device).type == "cuda",
        drop_last=train,
        persistent_workers=has_workers,
        prefetch_factor=spec.prefetch_factor if has_workers else None,
        worker_init_fn=functools.partial(_seed_worker, spec.seed) if has_workers else None,
    )
    per_rank = math.ceil(len(dataset) / spec.world_size) if spec.world_size > 1 or spec.endless else len(dataset)
    if train and per_rank < spec.batch_size:  # an epoch-by-epoch loader would yield nothing, forever
        raise ValueError(f"{Path(spec.root) / spec.split} gives this process {per_rank} training images, fewer "
                         f"than one batch of {spec.batch_size}; lower batch_size or generate more images")
    return PytorchLoader(spec, dataloader, sampler, h2d, num_images=len(dataset), samples_per_epoch=per_rank)


