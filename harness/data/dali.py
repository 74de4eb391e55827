"""DALI backends "dali-cpu" and "dali-gpu": the reference's DALI pipelines behind the Loader protocol.

DALI (and torch) are imported inside build() only, so listing or checking backends stays cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import math
import os
import shutil
import tempfile
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from harness.data import MEAN_255, STD_255, VAL_CROP_RATIO, LoaderSpec

if TYPE_CHECKING:
    import torch

BACKEND_NAMES = ("dali-cpu", "dali-gpu")
INSTALL_HINT = "nvidia-dali is not installed: pip install 'nvbench[dali]' (CUDA 12) or 'nvbench[dali-cuda13]'"
NO_GPU_REASON = "dali-gpu needs a CUDA GPU; none is visible on this machine"
IMAGE_FILE_FILTERS = ("*.jpg", "*.jpeg", "*.png")
"""The pytorch backend's image extensions (matched case-insensitively), so both read the same files."""
READER_NAME = "Reader"
"""Name of the file reader; DALI's iterator reads shard sizes and padding from it."""

RRC_AREA = (0.08, 1.0)
RRC_ASPECT = (3 / 4, 4 / 3)
RRC_ATTEMPTS = 100
"""DLE's DALI pipe tries 100 area/aspect draws (torchvision: 10) before falling back."""

# DLE's nvJPEG preallocation, sized for every full-size ImageNet image, so the mixed decoder
# never reallocates (and synchronises) mid-run.
NVJPEG_DEVICE_PADDING_BYTES = 211_025_920
NVJPEG_HOST_PADDING_BYTES = 140_544_512


def _dali_installed() -> bool:
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:  # no `nvidia` namespace package at all
        return False


def _check_backend(backend: str) -> None:
    if backend not in BACKEND_NAMES:
        raise ValueError(f"harness.data.dali serves {', '.join(BACKEND_NAMES)}, not {backend!r}")


def unavailable_reason(device: str, *, backend: str) -> str | None:
    """Why `backend` cannot run on `device` ("cpu" or "cuda"), or None. Does not import DALI."""
    _check_backend(backend)
    if backend == "dali-gpu" and device != "cuda":
        return NO_GPU_REASON
    if not _dali_installed():
        return INSTALL_HINT
    return None


CODEC_EXTENSIONS_ENV = "NVIMGCODEC_EXTENSIONS_PATH"
"""Folder nvImageCodec (DALI's decoders) loads its codec extensions from; unset, the one beside the library."""
UNUSED_CODECS = ("nvjpeg2k", "nvtiff")
"""Extensions for JPEG 2000 and TIFF, formats nvbench never reads (IMAGE_FILE_FILTERS). Where their libraries
are not installed (DALI for CUDA 13 without the nvjpeg2k / nvtiff wheels), each prints two load errors into
every cell's log as DALI starts; quiet_codec_extensions leaves them out."""


def quiet_codec_extensions(environ=os.environ, cache: Path | None = None) -> str | None:
    """Point nvImageCodec at a view of its extensions folder without UNUSED_CODECS; return that folder, or
    None where nothing changes (no nvImageCodec wheel, none of them installed, or the variable already set:
    the user's choice stands). Called in the cell process before DALI is imported."""
    if CODEC_EXTENSIONS_ENV in environ:
        return None
    package = _nvimgcodec_dir()
    if package is None or not any(_is_unused(f.name) for f in (package / "extensions").iterdir()):
        return None
    cache = cache or Path(environ.get("NVBENCH_CACHE") or Path.home() / ".cache" / "nvbench")
    view = _extension_view(package, cache / "nvimgcodec")
    environ[CODEC_EXTENSIONS_ENV] = str(view)
    return str(view)


def _is_unused(name: str) -> bool:
    return any(name.startswith(f"lib{codec}_ext.") for codec in UNUSED_CODECS)


def _nvimgcodec_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("nvidia.nvimgcodec")
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    return package if (package / "extensions").is_dir() else None


def _extension_view(package: Path, root: Path) -> Path:
    """`root`/<key>/nvidia/nvimgcodec/extensions: links to every extension but the unused ones, in a mirror of
    the wheel's `nvidia/` tree. The mirror matters: an extension finds its library through RUNPATH entries
    relative to the folder it was loaded from ($ORIGIN/../../nvjpeg/lib). Built once under a fresh name and
    renamed into place, so concurrent cells share one complete copy."""
    nvidia = package.parent
    names = sorted(f.name for f in (package / "extensions").iterdir())
    key = hashlib.sha256("\n".join([str(package), *names]).encode()).hexdigest()[:12]
    view = root / key
    extensions = view / "nvidia" / package.name / "extensions"
    if view.is_dir():
        return extensions
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        _link_all(nvidia, tmp / "nvidia", skip=package.name)
        _link_all(package, tmp / "nvidia" / package.name, skip="extensions")
        _link_all(package / "extensions", tmp / "nvidia" / package.name / "extensions", skip=None)
        os.rename(tmp, view)
    except OSError:
        if not view.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return extensions


def _link_all(source: Path, target: Path, *, skip: str | None) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.name != skip and not _is_unused(entry.name):
            (target / entry.name).symlink_to(entry)


def build(spec: LoaderSpec, *, backend: str, h2d=None) -> DaliLoader:
    """A DALI loader for one split of one rank's shard, yielding batches on spec.device."""
    import torch

    _check_backend(backend)
    device = torch.device(spec.device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"{backend}: device {spec.device!r} is neither cpu nor cuda")
    reason = unavailable_reason(device.type, backend=backend)
    if reason is not None:
        raise RuntimeError(reason)
    quiet_codec_extensions()  # before the pipelines below import DALI
    if spec.root is None:
        raise ValueError(f"{backend} reads an ImageFolder: set the dataset root (LoaderSpec.root)")
    split_dir = Path(spec.root) / spec.split
    if not split_dir.is_dir():
        raise FileNotFoundError(f"{backend}: no {spec.split}/ split under {spec.root}")
    num_dirs = sum(1 for entry in split_dir.iterdir() if entry.is_dir())
    if num_dirs > spec.num_classes:
        raise ValueError(f"{split_dir} has {num_dirs} class directories but num_classes is "
                         f"{spec.num_classes}: labels would overflow the model head")
    device_id = None if device.type == "cpu" else (
        device.index if device.index is not None else torch.cuda.current_device())
    return DaliLoader(spec, backend=backend, split_dir=split_dir, device_id=device_id, h2d=h2d)


def _decode_args(backend: str) -> dict:
    if backend == "dali-gpu":
        return {"device": "mixed", "device_memory_padding": NVJPEG_DEVICE_PADDING_BYTES,
                "host_memory_padding": NVJPEG_HOST_PADDING_BYTES}
    return {"device": "cpu"}


def _train_images(jpegs, spec: LoaderSpec, backend: str):
    """Random-resized crop fused into the decode (only the crop is decoded), then resize."""
    from nvidia.dali import fn, types

    images = fn.decoders.image_random_crop(
        jpegs, output_type=types.RGB, random_area=RRC_AREA, random_aspect_ratio=RRC_ASPECT,
        num_attempts=RRC_ATTEMPTS, **_decode_args(backend))
    # Linear with antialiasing (DALI's default) is DLE's INTERP_TRIANGULAR and PIL's BILINEAR.
    return fn.resize(images, resize_x=spec.image_size, resize_y=spec.image_size)


def _val_images(jpegs, spec: LoaderSpec, backend: str):
    """Shorter side to image_size / VAL_CROP_RATIO; crop_mirror_normalize takes the centre crop."""
    from nvidia.dali import fn, types

    images = fn.decoders.image(jpegs, output_type=types.RGB, **_decode_args(backend))
    return fn.resize(images, resize_shorter=round(spec.image_size / VAL_CROP_RATIO))


def _pipeline(spec: LoaderSpec, backend: str, split_dir: Path, device_id: int | None):
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    is_train = spec.split == "train"
    # exec_dynamic (DALI's default since 1.44, explicit here) allocates every output afresh and
    # never reuses one while a DLPack consumer holds it: the zero-copy hand-over relies on it.
    pipe = Pipeline(batch_size=spec.batch_size, num_threads=spec.dali_threads, device_id=device_id,
                    seed=spec.seed, prefetch_queue_depth=spec.dali_prefetch_queue, exec_dynamic=True)
    with pipe:
        # Validation sticks to its shard (fixed, unshuffled): the rank's share of val is the same
        # every epoch. Training rotates shards each epoch, as DALI (and DLE) does by default.
        # An endless loader lets the reader run on into the next epoch within a batch (no padding, no
        # end of epoch): one stream of batches, as the reference trains for many epochs.
        jpegs, labels = fn.readers.file(
            file_root=str(split_dir), shard_id=spec.rank, num_shards=spec.world_size,
            random_shuffle=is_train, stick_to_shard=not is_train, pad_last_batch=not spec.endless,
            seed=spec.seed, file_filters=list(IMAGE_FILE_FILTERS), name=READER_NAME)
        images = (_train_images if is_train else _val_images)(jpegs, spec, backend)
        if device_id is not None:
            labels = labels.gpu()
            if backend == "dali-cpu":
                images = images.gpu()
        crop = {} if is_train else {"crop": (spec.image_size, spec.image_size)}
        mirror = fn.random.coin_flip(probability=0.5) if is_train else 0
        images = fn.crop_mirror_normalize(
            images, mirror=mirror, mean=list(MEAN_255), std=list(STD_255), dtype=types.FLOAT,
            output_layout="CHW" if spec.memory_format == "nchw" else "HWC", **crop)
        pipe.set_outputs(images, labels)
    return pipe


def _shard_size(num_samples: int, shard_id: int, num_shards: int) -> int:
    """Samples in one shard, as DALI's readers split a dataset (contiguous, floor boundaries)."""
    return (num_samples * (shard_id + 1)) // num_shards - (num_samples * shard_id) // num_shards


HELD_BATCHES = 8
"""Batches a DALI loader can keep alive for the GPU at once; beyond this the host waits for the oldest."""


class HeldBatches:
    """Keeps each zero-copy batch alive until the consumer stream has finished with it.

    A batch handed to torch is DALI's own buffer, recycled as soon as the last torch reference goes. The
    host drops its references long before the GPU is done: autograd frees the input after queuing conv1's
    weight-gradient kernel, which still reads it. So each batch is held until an event, recorded on the
    consumer stream once all the work that reads it is queued (when the next batch is asked for), has
    completed. Events come from a fixed pool (nothing is allocated per batch); `query()` never blocks, and
    only when every slot is still in flight does the host wait for the oldest.
    """

    def __init__(self, make_event: Callable[[], Any], depth: int = HELD_BATCHES) -> None:
        self._free = [make_event() for _ in range(depth)]
        self._held: deque[tuple[Any, Any]] = deque()
        self._last: Any = None

    def hand_over(self, batch: Any) -> Any:
        """Call as `batch` is handed out: the previous batch's work is all queued now."""
        if self._last is not None:
            event = self._free.pop() if self._free else self._wait_for_oldest()
            event.record()
            self._held.append((self._last, event))
        while self._held and self._held[0][1].query():
            self._free.append(self._held.popleft()[1])
        self._last = batch
        return batch

    def _wait_for_oldest(self) -> Any:
        _, event = self._held.popleft()
        event.synchronize()  # sync: all slots in flight, the host is HELD_BATCHES batches ahead of the GPU
        return event

    @property
    def num_held(self) -> int:
        """Batches held back for the GPU (the one last handed out not counted)."""
        return len(self._held)

    def release(self) -> None:
        """Wait for the GPU to finish with every batch, then drop them (on close, outside any window)."""
        for _, event in self._held:
            event.synchronize()  # sync: close() must not free buffers that queued kernels still read
        self._held.clear()
        self._last = None


class DaliLoader:
    """One split of one rank's shard through a DALI pipeline and DALI's PyTorch iterator.

    Train drops the last partial batch; every rank runs floor(floor(N / world) / batch) steps,
    so DDP ranks stay in step. Val keeps every sample once (DALI's padding is trimmed); a rank
    runs ceil(its shard / batch) batches, which can differ by one between ranks.

    Each iteration is a whole epoch: an epoch abandoned mid-way is finished (decoded and
    dropped) when the next one starts, because DALI's reader cannot rewind without a rebuild. An
    endless loader (training in the measured loop) is one iteration that never ends: the reader runs
    from epoch to epoch unpadded, shard by shard, as DALI does by default.
    """

    def __init__(self, spec: LoaderSpec, *, backend: str, split_dir: Path, device_id: int | None, h2d=None):
        import torch
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        self._h2d = h2d or contextlib.nullcontext()
        self.spec = spec
        self._is_train = spec.split == "train"
        self._pipe = _pipeline(spec, backend, split_dir, device_id)
        self._pipe.build()  # lists the files; nothing runs yet
        self.num_samples = int(self._pipe.reader_meta(READER_NAME)["epoch_size"])
        """Images in the whole split (all shards)."""
        self.num_images = self.num_samples
        self.samples_per_epoch = (self.num_samples // spec.world_size if self._is_train
                                  else _shard_size(self.num_samples, spec.rank, spec.world_size))
        self._held = HeldBatches(lambda: torch.cuda.Event()) if device_id is not None else None
        self._len = self._batches_per_epoch()
        if self._len == 0:
            raise ValueError(f"{split_dir} has {self.num_samples} images: a shard of "
                             f"{self.num_samples // spec.world_size} cannot fill one batch of "
                             f"{spec.batch_size}; lower batch_size or generate more images")
        policy = LastBatchPolicy.DROP if self._is_train else LastBatchPolicy.PARTIAL
        # Starts the pipeline: the first prefetch_queue_depth batches are decoded from here on. Without a
        # reader name and size, DALI's iterator never ends an epoch.
        shard = {} if spec.endless else {"reader_name": READER_NAME, "last_batch_policy": policy,
                                         "auto_reset": True}
        self._it = DALIGenericIterator([self._pipe], ["images", "labels"], **shard)
        self._epochs_started = 0
        self._in_epoch = False
        self._generation = 0

    def _batches_per_epoch(self) -> int:
        spec = self.spec
        if self._is_train:
            return (self.num_samples // spec.world_size) // spec.batch_size
        return math.ceil(_shard_size(self.num_samples, spec.rank, spec.world_size) / spec.batch_size)

    def __len__(self) -> int:
        return self._len

    def set_epoch(self, epoch: int) -> None:
        """Check `epoch` is the one the reader produces next; DALI reshuffles by itself.

        The file reader draws each epoch's order from its seed and moves to the next shard at
        each epoch boundary, so epoch e is fixed by (seed, e) when epochs run in order; it
        cannot jump to another epoch without replaying the ones before.
        """
        if self.spec.endless:
            raise ValueError("an endless loader runs its epochs in one stream; it has no set_epoch")
        if self._is_train and epoch != self._epochs_started:
            raise ValueError(f"set_epoch({epoch}): the DALI reader's next epoch is "
                             f"{self._epochs_started}; it reshuffles itself once per epoch and "
                             f"cannot skip or repeat one, so run epochs in order from 0")

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._it is None:
            raise RuntimeError("DALI loader used after close()")
        if self.spec.endless:
            return self._stream()
        if self._in_epoch:
            self._drain()
        self._generation += 1  # retires any earlier generator still holding the reader
        return self._epoch(self._generation)

    def _drain(self) -> None:
        try:
            while True:
                next(self._it)  # not `for`: iter() on DALI's iterator attempts a reset
        except StopIteration:
            self._in_epoch = False

    def _epoch(self, generation: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if generation != self._generation:
            return
        self._in_epoch = True
        self._epochs_started += 1
        while generation == self._generation:
            try:
                with self._h2d:  # the hand-over: DALI's outputs become torch tensors
                    out = next(self._it)[0]
            except StopIteration:  # auto_reset has already re-armed DALI's iterator
                self._in_epoch = False
                return
            if out["images"].shape[0] == 0:  # this rank's shard is a whole batch shorter than the padded one
                continue
            yield self._hand_over(out)

    def _stream(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            with self._h2d:
                out = next(self._it)[0]
            yield self._hand_over(out)

    def _hand_over(self, out: dict) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        # Zero-copy (DLPack) views of DALI's outputs; exec_dynamic never recycles a buffer that is still
        # referenced (see _pipeline), and HeldBatches keeps it referenced until the GPU is done with it.
        images, labels = out["images"], out["labels"]
        if self.spec.memory_format == "nhwc":
            images = images.permute(0, 3, 1, 2)  # logical NCHW over NHWC storage: channels_last
        if self._held is not None:
            self._held.hand_over(out)
        return images, labels.view(-1).to(torch.int64)

    def close(self) -> None:
        if self._held is not None:
            self._held.release()
        self._it = None
        self._pipe = None  # the pipeline's threads stop when it is collected
