"""The ResNet family, defined here as the reference (NVIDIA DLE) does rather than imported.

Bottleneck networks are v1.5: a downsampling bottleneck strides on its 3x3 convolution, not its first
1x1. Module names follow the common layout (conv1/bn1/layer1../fc) so state dicts are interchangeable.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

STEM_WIDTH = 64
STAGE_WIDTHS = (64, 128, 256, 512)
STAGE_STRIDES = (1, 2, 2, 2)


def _conv3x3(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    # No bias: every conv is followed by BN, whose beta makes a conv bias redundant.
    return nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions (resnet18/34)."""

    expansion: ClassVar[int] = 1

    def __init__(self, in_ch: int, width: int, *, stride: int, downsample: nn.Module | None) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_ch, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn2

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carries the stride: v1.5), 1x1 expand by 4 (resnet50/101)."""

    expansion: ClassVar[int] = 4

    def __init__(self, in_ch: int, width: int, *, stride: int, downsample: nn.Module | None) -> None:
        super().__init__()
        self.conv1 = _conv1x1(in_ch, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, width * self.expansion)
        self.bn3 = nn.BatchNorm2d(width * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn3

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


Block = type[BasicBlock] | type[Bottleneck]


class ResNet(nn.Module):
    """ImageNet ResNet: 7x7/2 stem + 3x3/2 max-pool, four stages, global average pool, fc."""

    def __init__(
        self,
        block: Block,
        depths: tuple[int, int, int, int],
        *,
        num_classes: int,
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.conv1 = nn.Conv2d(3, STEM_WIDTH, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(STEM_WIDTH)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        in_ch = STEM_WIDTH
        for index, (width, depth, stride) in enumerate(zip(STAGE_WIDTHS, depths, STAGE_STRIDES)):
            stage, in_ch = _make_stage(block, in_ch, width, depth, stride)
            self.add_module(f"layer{index + 1}", stage)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        _init_weights(self, zero_init_residual=zero_init_residual)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _make_stage(block: Block, in_ch: int, width: int, depth: int, stride: int) -> tuple[nn.Sequential, int]:
    out_ch = width * block.expansion
    downsample = None
    if stride != 1 or in_ch != out_ch:
        # Projection shortcut (option B): the identity must match the branch's shape.
        downsample = nn.Sequential(_conv1x1(in_ch, out_ch, stride), nn.BatchNorm2d(out_ch))
    blocks = [block(in_ch, width, stride=stride, downsample=downsample)]
    blocks += [block(out_ch, width, stride=1, downsample=None) for _ in range(depth - 1)]
    return nn.Sequential(*blocks), out_ch


def _init_weights(model: ResNet, *, zero_init_residual: bool) -> None:
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    if zero_init_residual:
        # Each residual block then starts as the identity, which helps large-batch training early on.
        for module in model.modules():
            if isinstance(module, BasicBlock | Bottleneck):
                nn.init.zeros_(module.last_bn.weight)


def resnet18(*, num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes=num_classes, zero_init_residual=zero_init_residual)


def resnet34(*, num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    return ResNet(BasicBlock, (3, 4, 6, 3), num_classes=num_classes, zero_init_residual=zero_init_residual)


def resnet50(*, num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes=num_classes, zero_init_residual=zero_init_residual)


def resnet101(*, num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    return ResNet(Bottleneck, (3, 4, 23, 3), num_classes=num_classes, zero_init_residual=zero_init_residual)
