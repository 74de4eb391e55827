"""EfficientNet-B0 and -B4 (Tan & Le, 2019) as the reference (NVIDIA DLE ConvNets) defines them: MBConv blocks
(1x1 expand, depthwise kxk, squeeze-excitation, 1x1 project) with SiLU, BN momentum 0.01 / eps 1e-3, dropout
before the classifier and stochastic depth on the residual blocks; B4 is B0 scaled in width 1.4 and depth 1.8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

BN_MOMENTUM = 0.01
"""PyTorch's convention (1 - TensorFlow's 0.99 decay), DLE's EfficientNet value."""
BN_EPS = 1e-3
SE_RATIO = 0.25
"""SE hidden units = SE_RATIO x the block's input channels (not its expanded width: DLE's non-'widese' models)."""

# The B0 baseline, stage by stage (the paper's Table 1): kernel, stride, repeats, expansion, output channels.
B0_STAGES = ((3, 1, 1, 1, 16), (3, 2, 2, 6, 24), (5, 2, 2, 6, 40), (3, 2, 3, 6, 80), (5, 1, 3, 6, 112),
             (5, 2, 4, 6, 192), (3, 1, 1, 6, 320))
B0_STEM = 32
B0_HEAD = 1280


@dataclass(frozen=True, slots=True, kw_only=True)
class Scaling:
    width: float
    """Channel multiplier, each width rounded to a multiple of 8 and never more than 10 % down."""
    depth: float
    """Repeat multiplier, rounded up."""
    dropout: float
    """Dropout before the classifier."""
    drop_path: float
    """Stochastic-depth drop rate of the last block; block i of n drops with drop_path x i / n."""


# DLE's efficientnet.py: B0 dropout 0.2 and survival_prob 1 (no stochastic depth); B4 dropout 0.4, survival 0.8.
B0 = Scaling(width=1.0, depth=1.0, dropout=0.2, drop_path=0.0)
B4 = Scaling(width=1.4, depth=1.8, dropout=0.4, drop_path=0.2)


def scale_width(channels: int, factor: float, divisor: int = 8) -> int:
    scaled = channels * factor
    rounded = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * scaled else rounded


def _conv_bn(in_ch: int, out_ch: int, kernel: int, *, stride: int = 1, groups: int = 1,
             act: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(in_ch, out_ch, kernel, stride=stride, padding=(kernel - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(out_ch, eps=BN_EPS, momentum=BN_MOMENTUM)]
    return nn.Sequential(*layers, nn.SiLU(inplace=True)) if act else nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    """x * sigmoid(fc(SiLU(fc(mean(x))))): the gate applied to the depthwise output."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.squeeze = nn.Linear(channels, hidden)
        self.expand = nn.Linear(hidden, channels)

    def forward(self, x: Tensor) -> Tensor:
        gate = self.expand(F.silu(self.squeeze(x.mean((2, 3)))))
        return x * torch.sigmoid(gate)[:, :, None, None]


class MBConv(nn.Module):
    """Inverted residual: 1x1 expand (absent when the ratio is 1), depthwise kxk, SE, 1x1 project (no activation)."""

    def __init__(self, in_ch: int, out_ch: int, *, kernel: int, stride: int, expansion: int, drop_path: float) -> None:
        super().__init__()
        hidden = in_ch * expansion
        self.expand = _conv_bn(in_ch, hidden, 1) if expansion != 1 else None
        self.depthwise = _conv_bn(hidden, hidden, kernel, stride=stride, groups=hidden)
        self.se = SqueezeExcitation(hidden, max(1, int(in_ch * SE_RATIO)))
        self.project = _conv_bn(hidden, out_ch, 1, act=False)
        self.has_skip = stride == 1 and in_ch == out_ch
        self.drop_path = drop_path if self.has_skip else 0.0

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        return self.project[1]

    def forward(self, x: Tensor) -> Tensor:
        out = self.project(self.se(self.depthwise(x if self.expand is None else self.expand(x))))
        if not self.has_skip:
            return out
        if self.training and self.drop_path > 0:
            out = out * _keep_mask(out, 1.0 - self.drop_path)
        return x + out


def _keep_mask(x: Tensor, survival: float) -> Tensor:
    # As DLE: one draw per step for the whole batch (0 or 1/survival), drawn on the device: no host sync.
    return (torch.rand((), device=x.device) < survival).to(torch.float32) / survival


class EfficientNet(nn.Module):
    """Stem 3x3/2, seven MBConv stages, 1x1 head, global average pool, dropout, fc."""

    def __init__(self, scaling: Scaling, *, num_classes: int, zero_init_residual: bool = False) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        stem = scale_width(B0_STEM, scaling.width)
        self.stem = _conv_bn(3, stem, 3, stride=2)
        self.layers, in_ch = _make_stages(stem, scaling)
        head = scale_width(B0_HEAD, scaling.width)
        self.head = _conv_bn(in_ch, head, 1)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(head, num_classes)
        self.dropout = scaling.dropout  # functional, so that the trunk is every child but the last two
        _init_weights(self, zero_init_residual=zero_init_residual)

    def forward(self, x: Tensor) -> Tensor:
        x = self.head(self.layers(self.stem(x)))
        x = F.dropout(torch.flatten(self.avgpool(x), 1), p=self.dropout, training=self.training)
        return self.fc(x)


def _make_stages(in_ch: int, scaling: Scaling) -> tuple[nn.Sequential, int]:
    repeats = [math.ceil(r * scaling.depth) for _, _, r, _, _ in B0_STAGES]
    total, index, stages = sum(repeats), 0, []
    for (kernel, stride, _, expansion, channels), repeat in zip(B0_STAGES, repeats):
        out_ch = scale_width(channels, scaling.width)
        blocks = []
        for i in range(repeat):
            blocks.append(MBConv(in_ch, out_ch, kernel=kernel, stride=stride if i == 0 else 1, expansion=expansion,
                                 drop_path=scaling.drop_path * index / total))
            in_ch, index = out_ch, index + 1
        stages.append(nn.Sequential(*blocks))
    return nn.Sequential(*stages), in_ch


def _init_weights(model: EfficientNet, *, zero_init_residual: bool) -> None:
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")  # DLE's conv_init
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    if zero_init_residual:
        # Only blocks with a skip connection: zeroing a block without one would cut the signal.
        for module in model.modules():
            if isinstance(module, MBConv) and module.has_skip:
                nn.init.zeros_(module.last_bn.weight)


def efficientnet_b0(*, num_classes: int = 1000, zero_init_residual: bool = False) -> EfficientNet:
    return EfficientNet(B0, num_classes=num_classes, zero_init_residual=zero_init_residual)


def efficientnet_b4(*, num_classes: int = 1000, zero_init_residual: bool = False) -> EfficientNet:
    return EfficientNet(B4, num_classes=num_classes, zero_init_residual=zero_init_residual)
