"""Images/s of the `pytorch` and `dali-cpu` loaders decoding and augmenting the same JPEGs on CPU.

    python -m pytest benchmarks/bench_loaders.py --benchmark-only

One round = one training epoch (random-resized crop, flip, normalise) of this process's loader;
both backends get the same batch size and the same number of workers / DALI threads.
"""

from __future__ import annotations

import pytest

from harness.data import LoaderSpec, build_loader, unavailable_reason

STORED_SIZE_PX = 128
CROP_SIZE_PX = 112
NUM_CLASSES = 8
TRAIN_PER_CLASS = 48  # 384 images, 12 batches of 32
BATCH_SIZE = 32
NUM_WORKERS = 2
"""DataLoader worker processes for `pytorch`, pipeline threads for `dali-cpu`."""
ROUNDS = 5


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from harness.data.generate import make_dataset

    return make_dataset(tmp_path_factory.mktemp("bench") / "ds", image_size=STORED_SIZE_PX,
                        num_classes=NUM_CLASSES, train_per_class=TRAIN_PER_CLASS, val_per_class=1)


def _one_epoch(loader) -> int:
    num_images = 0
    for images, _ in loader:
        num_images += images.shape[0]
    return num_images


@pytest.mark.parametrize("backend", ["pytorch", "dali-cpu"])
def test_train_epoch_images_per_s(benchmark, dataset, backend, capsys):
    reason = unavailable_reason(backend, "cpu")
    if reason is not None:
        pytest.skip(reason)
    spec = LoaderSpec(root=dataset, split="train", batch_size=BATCH_SIZE, image_size=CROP_SIZE_PX,
                      num_classes=NUM_CLASSES, memory_format="nchw", device="cpu",
                      workers=NUM_WORKERS, dali_threads=NUM_WORKERS)
    loader = build_loader(backend, spec)
    epochs = iter(range(ROUNDS + 1))
    try:
        # The warmup round absorbs worker start-up and DALI's first prefetch.
        num_images = benchmark.pedantic(lambda: (loader.set_epoch(next(epochs)), _one_epoch(loader))[1],
                                        rounds=ROUNDS, warmup_rounds=1, iterations=1)
    finally:
        loader.close()
    assert num_images == len(loader) * BATCH_SIZE
    throughput = {stat: num_images / getattr(benchmark.stats.stats, stat) for stat in ("median", "min")}
    benchmark.extra_info["throughput_img_per_s_median"] = throughput["median"]
    benchmark.extra_info["throughput_img_per_s_best"] = throughput["min"]
    with capsys.disabled():
        print(f"\n{backend}: {throughput['median']:.0f} images/s median, {throughput['min']:.0f} best "
              f"({num_images} images/epoch, {STORED_SIZE_PX}px JPEG -> {CROP_SIZE_PX}px crop, "
              f"batch {BATCH_SIZE}, {NUM_WORKERS} workers/threads)")
