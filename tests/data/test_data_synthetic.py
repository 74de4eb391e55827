"""The synthetic backend: one fixed on-device batch in the requested format."""

from __future__ import annotations

import pytest
import torch

from harness.data import LoaderSpec, build_loader, unavailable_reason
from harness.data.synthetic import BATCHES_PER_EPOCH


def _spec(**overrides) -> LoaderSpec:
    fields = dict(root=None, split="train", batch_size=4, image_size=8, num_classes=5,
                  memory_format="nchw", device="cpu", seed=3)
    return LoaderSpec(**{**fields, **overrides})


@pytest.mark.parametrize(("fmt", "layout"), [("nchw", torch.contiguous_format), ("nhwc", torch.channels_last)])
def test_batch_shape_dtype_and_memory_format(fmt, layout):
    images, labels = next(iter(build_loader("synthetic", _spec(memory_format=fmt))))
    assert images.shape == (4, 3, 8, 8) and images.dtype == torch.float32
    assert images.is_contiguous(memory_format=layout) and images.device.type == "cpu"
    assert labels.shape == (4,) and labels.dtype == torch.int64
    assert 0 <= labels.min() and labels.max() < 5
    # Normalised range: roughly zero-mean, unit-variance values.
    assert abs(images.mean().item()) < 0.5 and 0.5 < images.std().item() < 1.5


def test_every_step_yields_the_same_tensors_for_a_fixed_epoch_length():
    loader = build_loader("synthetic", _spec())
    loader.set_epoch(4)
    batches = list(loader)
    assert len(loader) == len(batches) == BATCHES_PER_EPOCH
    assert all(x is batches[0][0] and y is batches[0][1] for x, y in batches)
    loader.close()


def test_seeded_determinism():
    a = next(iter(build_loader("synthetic", _spec())))
    b = next(iter(build_loader("synthetic", _spec())))
    c = next(iter(build_loader("synthetic", _spec(seed=4))))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_available_everywhere():
    assert unavailable_reason("synthetic", "cpu") is None
    assert unavailable_reason("synthetic", "cuda") is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_batch_lives_on_the_device_and_matches_cpu_values():
    cpu = next(iter(build_loader("synthetic", _spec(memory_format="nhwc"))))
    gpu = next(iter(build_loader("synthetic", _spec(memory_format="nhwc", device="cuda"))))
    assert gpu[0].is_cuda and gpu[1].is_cuda and gpu[0].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(gpu[0].cpu(), cpu[0]) and torch.equal(gpu[1].cpu(), cpu[1])
