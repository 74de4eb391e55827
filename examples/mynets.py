"""A model of your own for nvbench: any importable module whose builder takes `num_classes` and returns a
torch.nn.Module. A matrix beside this file names it as `model = "mynets:build"` (module `mynets`, function
`build`); nvbench builds it with the matrix's recipe, and the cell id carries a short hash of that import path.
"""

from __future__ import annotations

from torch import nn


def _conv_bn_relu(in_ch: int, out_ch: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(out_ch),
                         nn.ReLU(inplace=True))


def build(num_classes: int) -> nn.Module:
    """A small VGG-style network: four 3x3 conv-BN-ReLU stages, each halving the image and doubling the width,
    then global average pooling and a linear classifier (645,896 parameters at 1000 classes)."""
    widths = (32, 64, 128, 256)
    stages, in_ch = [], 3
    for width in widths:
        stages.append(_conv_bn_relu(in_ch, width, stride=2))
        in_ch = width
    return nn.Sequential(*stages, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes))
