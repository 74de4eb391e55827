"""The pytorch backend: ImageFolder scan, batch format, normalisation, sharding and shuffling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.data import MEAN_255, STD_255, LoaderSpec, build_loader, unavailable_reason
from harness.data.pytorch import scan_image_folder

CLASSES = ("ant", "bee", "cat", "dog")  # folder order = label order
PER_CLASS = {"train": 4, "val": 2}
SOURCE_PX = 18  # val: ResizeShorter(round(16 / 0.875) = 18) is then a no-op, so pixels arrive exact
IMAGE_SIZE = 16


def _colour(label: int, index: int) -> tuple[int, int, int]:
    """A solid colour that names its sample; neighbours differ by >= 12 levels per channel."""
    return 30 + 50 * label, 20 + 12 * index, 200


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("folder")
    exts = (".png", ".PNG", ".png", ".Png")
    for split, per_class in PER_CLASS.items():
        for label, name in enumerate(CLASSES):
            class_dir = root / split / name
            class_dir.mkdir(parents=True)
            for i in range(per_class):
                img = Image.new("RGB", (SOURCE_PX, SOURCE_PX), _colour(label, i))
                img.save(class_dir / f"img{i}{exts[i % len(exts)]}", format="PNG")
            (class_dir / "notes.txt").write_text("not an image")
    return root


def _spec(root: Path, **overrides) -> LoaderSpec:
    fields = dict(root=root, split="train", batch_size=4, image_size=IMAGE_SIZE, num_classes=len(CLASSES),
                  memory_format="nchw", device="cpu", seed=0, workers=0)
    return LoaderSpec(**{**fields, **overrides})


def _identify(images: torch.Tensor) -> list[tuple[int, int, int]]:
    """Recover each image's solid colour (the sample's identity) from its normalised pixels."""
    mean = torch.tensor(MEAN_255).view(1, 3, 1, 1)
    std = torch.tensor(STD_255).view(1, 3, 1, 1)
    rgb = (images * std + mean).mean(dim=(2, 3)).round().to(torch.int64)
    known = torch.tensor([_colour(l, i) for l in range(len(CLASSES)) for i in range(PER_CLASS["train"])])
    nearest = torch.cdist(rgb.double(), known.double()).argmin(dim=1)
    return [tuple(known[n].tolist()) for n in nearest]


def _epoch(loader) -> list[tuple[int, int, int]]:
    seen = []
    for images, labels in loader:
        ids = _identify(images)
        assert [(c[0] - 30) // 50 for c in ids] == labels.tolist()  # each image carries its own label
        seen += ids
    return seen


def test_scan_sorts_classes_and_files_and_filters_extensions(root):
    samples, classes = scan_image_folder(root / "train")
    assert classes == list(CLASSES)
    assert [p.name for p, _ in samples[:4]] == ["img0.png", "img1.PNG", "img2.png", "img3.Png"]
    assert [label for _, label in samples] == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    assert all(p.suffix != ".txt" for p, _ in samples)


def test_scan_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'nope'} does not exist"):
        scan_image_folder(tmp_path / "nope")
    (tmp_path / "empty" / "c0").mkdir(parents=True)
    with pytest.raises(ValueError, match=f"{tmp_path / 'empty'} has no class directories"):
        scan_image_folder(tmp_path / "empty")


def test_val_batches_are_normalised_float32_nchw_with_folder_labels(root):
    loader = build_loader("pytorch", _spec(root, split="val", batch_size=3))
    batches = list(loader)
    images, labels = batches[0]
    assert images.shape == (3, 3, IMAGE_SIZE, IMAGE_SIZE) and images.dtype == torch.float32
    assert images.is_contiguous() and labels.dtype == torch.int64
    # Sample 0 is solid _colour(0, 0): every pixel maps to (colour - mean) / std exactly.
    expected = (torch.tensor(_colour(0, 0), dtype=torch.float32) - torch.tensor(MEAN_255)) / torch.tensor(STD_255)
    torch.testing.assert_close(images[0], expected.view(3, 1, 1).expand(3, IMAGE_SIZE, IMAGE_SIZE))
    # Validation keeps folder order and the last partial batch.
    assert torch.cat([lab for _, lab in batches]).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len(loader) == 3 and [len(lab) for _, lab in batches] == [3, 3, 2]
    loader.close()


def test_nhwc_yields_channels_last_and_same_values(root):
    nchw = next(iter(build_loader("pytorch", _spec(root, split="val"))))[0]
    nhwc = next(iter(build_loader("pytorch", _spec(root, split="val", memory_format="nhwc"))))[0]
    assert nhwc.is_contiguous(memory_format=torch.channels_last) and not nhwc.is_contiguous()
    assert torch.equal(nchw, nhwc)


def test_train_drops_the_last_partial_batch(root):
    loader = build_loader("pytorch", _spec(root, batch_size=5))
    assert len(loader) == 3  # 16 // 5
    assert [len(labels) for _, labels in loader] == [5, 5, 5]


def test_every_training_sample_once_per_epoch(root):
    loader = build_loader("pytorch", _spec(root))
    everything = sorted(_colour(l, i) for l in range(len(CLASSES)) for i in range(PER_CLASS["train"]))
    for epoch in range(2):
        loader.set_epoch(epoch)
        assert sorted(_epoch(loader)) == everything


def test_shuffle_is_deterministic_per_seed_and_epoch(root):
    a, b = build_loader("pytorch", _spec(root)), build_loader("pytorch", _spec(root))
    first = _epoch(a)
    assert _epoch(b) == first
    a.set_epoch(1)
    b.set_epoch(1)
    second = _epoch(a)
    assert _epoch(b) == second and second != first
    assert _epoch(build_loader("pytorch", _spec(root, seed=5))) != first


@pytest.mark.parametrize("split", ["train", "val"])
def test_two_ranks_get_disjoint_shards_covering_the_set(root, split):
    def shard(rank: int, epoch: int) -> list:
        # spec.seed is matrix seed (7) + rank; the shuffle must still agree across ranks.
        loader = build_loader("pytorch", _spec(root, split=split, rank=rank, world_size=2, seed=7 + rank,
                                                batch_size=2))
        loader.set_epoch(epoch)
        return _epoch(loader)

    total = len(CLASSES) * PER_CLASS[split]
    for epoch in (0, 1):
        r0, r1 = shard(0, epoch), shard(1, epoch)
        assert len(r0) == len(r1) == total // 2
        assert not set(r0) & set(r1)
        assert len(set(r0) | set(r1)) == total
    if split == "train":
        assert shard(0, 0) != shard(0, 1)


def test_workers_cover_the_epoch_and_draw_different_augmentations(tmp_path):
    # Identical non-uniform images: any difference between two samples comes from the augmentation.
    gradient = np.add.outer(np.arange(24), np.arange(24) * 5).astype(np.uint8)
    for label in range(2):
        (tmp_path / "train" / f"c{label}").mkdir(parents=True)
        for i in range(4):
            Image.fromarray(np.stack([gradient] * 3, axis=-1)).save(tmp_path / "train" / f"c{label}" / f"{i}.png")

    def run() -> list[tuple[torch.Tensor, torch.Tensor]]:
        loader = build_loader("pytorch", _spec(tmp_path, num_classes=2, batch_size=2, workers=2))
        try:
            assert len(loader) == 4
            epochs = []
            for epoch in range(2):  # persistent workers serve both epochs
                loader.set_epoch(epoch)
                epochs.append(list(loader))
        finally:
            loader.close()
        return epochs[0]

    batches = run()
    assert sorted(torch.cat([lab for _, lab in batches]).tolist()) == [0] * 4 + [1] * 4
    # Batches 0 and 1 are the first draws of workers 0 and 1: seeded differently, they differ.
    assert not torch.equal(batches[0][0], batches[1][0])
    # Same seed, same worker streams, same pictures.
    again = run()
    assert all(torch.equal(x, y) for (x, _), (y, _) in zip(batches, again))


def test_build_errors_and_availability(root, tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "train")):
        build_loader("pytorch", _spec(tmp_path))
    with pytest.raises(ValueError, match="4 classes but the model has num_classes=3"):
        build_loader("pytorch", _spec(root, num_classes=3))
    assert unavailable_reason("pytorch", "cpu") is None
    assert unavailable_reason("pytorch", "cuda") is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_prefetcher_matches_cpu(root):
    cpu = list(build_loader("pytorch", _spec(root, split="val", memory_format="nhwc")))
    cuda = list(build_loader("pytorch", _spec(root, split="val", memory_format="nhwc", device="cuda")))
    assert len(cpu) == len(cuda)
    for (xc, yc), (xg, yg) in zip(cpu, cuda):
        assert xg.is_cuda and yg.is_cuda and xg.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(xg.cpu(), xc)
        assert torch.equal(yg.cpu(), yc)


# ---------------------------------------------------------------- the endless training stream


@pytest.mark.parametrize("world_size", [1, 2])
def test_the_endless_sampler_draws_the_epochs_of_epoch_by_epoch_iteration_back_to_back(world_size):
    from torch.utils.data import DistributedSampler

    from harness.data.pytorch import EndlessShardSampler, EpochShuffleSampler

    size, seed = 10, 7
    for rank in range(world_size):
        endless = EndlessShardSampler(size, seed=seed, rank=rank, world_size=world_size)
        epochs = []
        for epoch in range(3):
            sampler = (EpochShuffleSampler(size, shuffle=True, seed=seed) if world_size == 1 else
                       DistributedSampler(range(size), num_replicas=world_size, rank=rank, seed=seed))
            sampler.set_epoch(epoch)
            epochs += list(sampler)
        stream = iter(endless)
        assert [next(stream) for _ in range(len(epochs))] == epochs
        assert endless.per_rank == len(epochs) // 3


def test_an_endless_loader_crosses_epochs_without_restarting_its_workers(root, monkeypatch):
    from torch.utils.data import dataloader

    resets = []
    original = dataloader._MultiProcessingDataLoaderIter._reset
    monkeypatch.setattr(dataloader._MultiProcessingDataLoaderIter, "_reset",
                        lambda self, *a, **k: (resets.append(1), original(self, *a, **k))[1])
    everything = sorted(_colour(l, i) for l in range(len(CLASSES)) for i in range(PER_CLASS["train"]))
    loader = build_loader("pytorch", _spec(root, workers=1, endless=True))
    try:
        assert (loader.num_images, loader.samples_per_epoch, len(loader)) == (16, 16, 4)
        stream = iter(loader)
        seen = []
        for _ in range(10):  # two and a half epochs of 4 batches
            images, labels = next(stream)
            seen += _identify(images)
        assert sorted(seen[:16]) == everything and sorted(seen[16:32]) == everything
        assert seen[:16] != seen[16:32]  # reshuffled
        assert len(resets) == 1  # the iterator started once; no epoch restarted it
    finally:
        loader.close()
    epochs = build_loader("pytorch", _spec(root, workers=1))
    try:
        for epoch in range(2):
            epochs.set_epoch(epoch)
            list(epochs)
    finally:
        epochs.close()
    assert len(resets) == 1 + 2  # epoch by epoch, each epoch restarts the workers' queue


def test_only_a_training_loader_is_endless_and_it_has_no_set_epoch(root):
    with pytest.raises(ValueError, match="only a training loader can be endless"):
        _spec(root, split="val", endless=True)
    with pytest.raises(ValueError, match="no set_epoch"):
        build_loader("pytorch", _spec(root, endless=True)).set_epoch(1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_prefetcher_batches_stay_valid_for_a_slow_consumer_that_drops_them(root):
    # The prefetcher's stream logic alone: it is fed batches pinned beforehand, so nothing in the loop
    # synchronises the host with the device (a pinned-memory allocation would, and would hide both bugs). The side stream is slowed and each batch is read at once: a consumer that did
    # not wait for the side stream (wait_stream) reads it unfinished. Then the consumer falls far behind, reads
    # the batch again and drops it: without record_stream the allocator hands its memory to a later batch,
    # which the side stream writes before that late read runs.
    loader = build_loader("pytorch", _spec(root, split="val", memory_format="nhwc", batch_size=2, device="cuda"))
    raw = [(images.pin_memory(), labels.pin_memory()) for images, labels in loader._dataloader]
    expected = [(float(loader._normalise(x.cuda()).double().sum()), int(y.sum())) for x, y in raw]
    loader._dataloader = raw  # the prefetcher iterates any iterable of (uint8 images, labels)
    normalise = loader._normalise
    loader._normalise = lambda images: (torch.cuda._sleep(50_000_000), normalise(images))[1]  # side stream
    sums = torch.zeros(len(raw), 3, dtype=torch.float64, device="cuda")

    def slow_pass() -> tuple[list, list]:
        for i, (images, labels) in enumerate(loader):
            assert images.is_cuda and images.is_contiguous(memory_format=torch.channels_last)
            sums[i, 0] = images.double().sum()  # at once
            torch.cuda._sleep(400_000_000)  # the consumer falls behind by several side-stream batches
            sums[i, 1] = images.double().sum()  # late
            sums[i, 2] = labels.sum()
            del images, labels
        torch.cuda.synchronize()
        return ([(float(a), int(c)) for a, _, c in sums.tolist()], [(float(b), int(c)) for _, b, c in sums.tolist()])

    # The first pass may still allocate device memory (cudaMalloc can synchronise); the second reuses the
    # cached blocks, so nothing in it orders the streams but the prefetcher itself.
    for _ in range(2):
        early, late = slow_pass()
        assert early == pytest.approx(expected, rel=1e-6), "read before the side stream finished: wait_stream"
        assert late == pytest.approx(expected, rel=1e-6), "memory reused while still read: record_stream"


def test_a_training_shard_smaller_than_a_batch_fails_the_cell_instead_of_spinning(root):
    for endless in (False, True):
        with pytest.raises(ValueError, match="gives this process 16 training images, fewer than one batch of 17"):
            build_loader("pytorch", _spec(root, batch_size=len(CLASSES) * PER_CLASS["train"] + 1, endless=endless))
