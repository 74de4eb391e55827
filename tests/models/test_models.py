"""The ResNet family: exact sizes, v1.5 stride placement, initialisation, and the registry."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from harness.models import MODELS, build_model, model_names
from harness.models.resnet import BasicBlock, Bottleneck

# Published parameter counts at 1000 classes (the torchvision / DLE numbers everyone quotes).
PARAM_COUNTS = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # other engineers' tests share the 2 cores


@pytest.mark.parametrize("name", sorted(PARAM_COUNTS))
def test_parameter_count_is_exact(name):
    with torch.device("meta"):  # shapes only: no memory, no init cost
        model = build_model(name, num_classes=1000)
    assert sum(p.numel() for p in model.parameters()) == PARAM_COUNTS[name]


def test_num_classes_sizes_the_classifier():
    with torch.device("meta"):
        model = build_model("resnet50", num_classes=10)
    assert model.fc.out_features == 10
    assert sum(p.numel() for p in model.parameters()) == PARAM_COUNTS["resnet50"] - 2049 * 990


def test_bottleneck_strides_on_the_3x3_v1_5():
    with torch.device("meta"):
        model = build_model("resnet50", num_classes=1000)
    first = model.layer2[0]
    assert isinstance(first, Bottleneck)
    assert first.conv1.stride == (1, 1)
    assert first.conv2.stride == (2, 2) and first.conv2.kernel_size == (3, 3)
    assert first.downsample[0].stride == (2, 2)
    # layer1 keeps resolution (the stem's max-pool already downsampled) but widens 64 -> 256.
    assert model.layer1[0].conv2.stride == (1, 1)
    assert model.layer1[0].downsample is not None


def test_basic_block_strides_on_its_first_conv():
    with torch.device("meta"):
        model = build_model("resnet18", num_classes=1000)
    first = model.layer3[0]
    assert isinstance(first, BasicBlock)
    assert first.conv1.stride == (2, 2) and first.conv2.stride == (1, 1)
    assert model.layer1[0].downsample is None


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_forward_shape_on_tiny_images(name):
    torch.manual_seed(0)
    model = build_model(name, num_classes=7).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 7)
    assert torch.isfinite(out).all()


def test_kaiming_fan_out_init_and_bn_identity():
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=10)
    conv = model.layer3[1].conv1  # 256 -> 256, 3x3: fan_out = 256 * 9
    expected_std = math.sqrt(2.0 / (256 * 9))
    assert conv.weight.std().item() == pytest.approx(expected_std, rel=0.02)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            assert torch.equal(module.weight, torch.ones_like(module.weight))
            assert torch.equal(module.bias, torch.zeros_like(module.bias))


@pytest.mark.parametrize("name, last", [("resnet18", "bn2"), ("resnet50", "bn3")])
def test_zero_init_residual_zeroes_only_the_last_bn_gamma(name, last):
    model = build_model(name, num_classes=10, zero_init_residual=True)
    blocks = [m for m in model.modules() if isinstance(m, BasicBlock | Bottleneck)]
    assert blocks
    for block in blocks:
        assert torch.count_nonzero(getattr(block, last).weight) == 0
        assert torch.equal(block.bn1.weight, torch.ones_like(block.bn1.weight))
    default = build_model(name, num_classes=10)
    assert torch.count_nonzero(getattr(default.layer1[0], last).weight) > 0


def test_zero_init_residual_makes_identity_blocks_pass_through():
    torch.manual_seed(0)
    model = build_model("resnet50", num_classes=10, zero_init_residual=True).eval()
    block = model.layer1[1]  # identity shortcut: no downsample
    x = torch.randn(1, 256, 4, 4)
    with torch.no_grad():
        assert torch.equal(block(x), torch.relu(x))


def test_unknown_model_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown model 'resnet51'.*resnet18, resnet34, resnet50, resnet101"):
        build_model("resnet51", num_classes=10)


def test_registry_names():
    assert model_names() == tuple(MODELS) == ("resnet18", "resnet34", "resnet50", "resnet101", "resnext101-32x4d",
                                              "se-resnext101-32x4d", "efficientnet-b0", "efficientnet-b4")


def test_bad_num_classes_is_rejected():
    with pytest.raises(ValueError, match="num_classes must be >= 1"):
        build_model("resnet18", num_classes=0)
