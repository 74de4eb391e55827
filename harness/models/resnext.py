"""ResNeXt-101 32x4d and SE-ResNeXt-101 32x4d as the reference (NVIDIA DLE ConvNets) defines them: ResNet-101's
v1.5 bottlenecks with a grouped 3x3 (32 groups of 4 channels in the first stage, doubling per stage), and for SE a
squeeze-excitation gate on each residual branch before the addition. Module names follow resnet.py's layout.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from harness.models.resnet import STAGE_STRIDES, STEM_WIDTH, _conv1x1

DEPTHS_101 = (3, 4, 23, 3)
CARDINALITY = 32
GROUP_WIDTHS = (4, 8, 16, 32)
"""Channels per group of each stage's 3x3: the 'x4d' of 32x4d, doubled per stage (DLE widths 128..1024)."""
EXPANSION = 2
"""A ResNeXt bottleneck's output is twice its grouped width (256 after the first stage, as ResNet's 64 x 4)."""
SE_HIDDEN = 16
"""DLE's SE squeezes every block to 16 hidden units (its `se_squeeze=16`), where the SENet paper squeezes by a
ratio (channels / 16): same FLOPs to 0.01 %, 3.7 M fewer parameters. `se_reduction` builds the paper's form."""


class SqueezeExcitation(nn.Module):
    """Global average -> fc -> ReLU -> fc -> sigmoid: one gate per channel (Hu et al., 2018)."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.squeeze = nn.Linear(channels, hidden)
        self.expand = nn.Linear(hidden, channels)

    def forward(self, x: Tensor) -> Tensor:
        gate = self.expand(torch.relu(self.squeeze(x.mean((2, 3)))))
        return torch.sigmoid(gate)[:, :, None, None]


class GroupedBottleneck(nn.Module):
    """1x1 reduce, grouped 3x3 (carries the stride: v1.5), 1x1 expand; optionally SE-gated before the addition."""

    def __init__(self, in_ch: int, width: int, *, stride: int, downsample: nn.Module | None,
                 se_hidden: int | None) -> None:
        super().__init__()
        out_ch = width * EXPANSION
        self.conv1 = _conv1x1(in_ch, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=stride, padding=1, groups=CARDINALITY, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, out_ch)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.se = SqueezeExcitation(out_ch, se_hidden) if se_hidden else None
        self.downsample = downsample

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn3

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.se is not None:
            out = out * self.se(out)
        return self.relu(out + identity)


class ResNeXt(nn.Module):
    """ImageNet ResNeXt: ResNet's 7x7/2 stem + 3x3/2 max-pool, four stages of grouped bottlenecks, pool, fc."""

    def __init__(self, depths: tuple[int, int, int, int], *, num_classes: int, zero_init_residual: bool = False,
                 se_reduction: int | None = None, se: bool = False) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.conv1 = nn.Conv2d(3, STEM_WIDTH, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(STEM_WIDTH)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        in_ch = STEM_WIDTH
        for index, (group_width, depth, stride) in enumerate(zip(GROUP_WIDTHS, depths, STAGE_STRIDES)):
            width = CARDINALITY * group_width
            hidden = _se_hidden(width * EXPANSION, se_reduction) if se else None
            stage = _make_stage(in_ch, width, depth, stride, se_hidden=hidden)
            self.add_module(f"layer{index + 1}", stage)
            in_ch = width * EXPANSION
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        _init_weights(self, zero_init_residual=zero_init_residual)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _se_hidden(channels: int, reduction: int | None) -> int:
    return SE_HIDDEN if reduction is None else channels // reduction


def _make_stage(in_ch: int, width: int, depth: int, stride: int, *, se_hidden: int | None) -> nn.Sequential:
    out_ch = width * EXPANSION
    downsample = None
    if stride != 1 or in_ch != out_ch:
        downsample = nn.Sequential(_conv1x1(in_ch, out_ch, stride), nn.BatchNorm2d(out_ch))
    blocks = [GroupedBottleneck(in_ch, width, stride=stride, downsample=downsample, se_hidden=se_hidden)]
    blocks += [GroupedBottleneck(out_ch, width, stride=1, downsample=None, se_hidden=se_hidden)
               for _ in range(depth - 1)]
    return nn.Sequential(*blocks)


def _init_weights(model: ResNeXt, *, zero_init_residual: bool) -> None:
    # DLE initialises these networks' convolutions fan-in (its `model_config: fanin`); linear layers keep
    # PyTorch's default, as there.
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    if zero_init_residual:
        for module in model.modules():
            if isinstance(module, GroupedBottleneck):
                nn.init.zeros_(module.last_bn.weight)


def resnext101_32x4d(*, num_classes: int = 1000, zero_init_residual: bool = False) -> ResNeXt:
    return ResNeXt(DEPTHS_101, num_classes=num_classes, zero_init_residual=zero_init_residual)


def se_resnext101_32x4d(*, num_classes: int = 1000, zero_init_residual: bool = False,
                        se_reduction: int | None = None) -> ResNeXt:
    """DLE's SE-ResNeXt (16 hidden units per gate); `se_reduction=16` gives the SENet paper's channels / 16."""
    return ResNeXt(DEPTHS_101, num_classes=num_classes, zero_init_residual=zero_init_residual, se=True,
                   se_reduction=se_reduction)
