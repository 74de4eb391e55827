"""The one FLOP counter: a model's FLOPs per image, forward or forward + backward, counted on the meta device.
The registry's figures (harness/models/registry.py) and the MFU column (harness/cell/instruments/flops.py) both come from here.

FLOPs count a multiply-add as 2, as datasheet peaks do (torch.utils.flop_counter). Only matrix multiplications and
convolutions are counted; normalisation, activations, the loss and the optimizer are not (the MFU convention).
"""

from __future__ import annotations

from math import prod
from typing import Any, Callable

import torch


def count_flops(model: str, *, num_classes: int, image_size: int, training: bool, batch_size: int = 2,
                builder: Callable[..., torch.nn.Module] | None = None) -> float:
    """FLOPs of one image: the forward pass, or (training) forward + backward of a training step.

    A fresh model is built on the meta device (no memory, no kernels, no RNG draws), so a real run's weights,
    BN statistics, optimizer state and random streams are untouched. The input does not require grad, as in
    training, so the first layer computes no input gradient. `batch_size` only needs to be >= 2 (BatchNorm in
    training mode needs two values per channel); the count is per image. `builder(model, num_classes=...)`
    defaults to harness.models.build_model.
    """
    from torch.utils.flop_counter import FlopCounterMode

    if builder is None:
        from harness.models.build import build_model as builder
    with torch.device("meta"):
        net = builder(model, num_classes=num_classes)
    net.train()
    images = torch.empty(batch_size, 3, image_size, image_size, device="meta")
    labels = torch.zeros(batch_size, dtype=torch.int64, device="meta")
    backward = {torch.ops.aten.convolution_backward: conv_backward_flops}
    with FlopCounterMode(display=False, custom_mapping=backward) as counter, torch.set_grad_enabled(training):
        loss = torch.nn.functional.cross_entropy(net(images), labels)
        if training:
            loss.backward()
    return counter.get_total_flops() / batch_size


def conv_backward_flops(grad_out_shape: Any, x_shape: Any, w_shape: Any, _bias: Any, _stride: Any, _padding: Any,
                        _dilation: Any, transposed: bool, _output_padding: Any, _groups: int, output_mask: Any,
                        out_shape: Any = None, **_: Any) -> int:
    """FLOPs of a convolution's backward: each gradient asked for (input, weight) costs what the forward did.

    Replaces torch.utils.flop_counter's formula, which counts a grouped convolution's weight gradient `groups`
    times over (torch 2.13: 32x for ResNeXt's 3x3s, up to 1,152x for EfficientNet's depthwise ones; a fix was
    proposed in pytorch/pytorch#183405). For groups = 1 the two agree exactly."""
    spatial = x_shape[2:] if transposed else grad_out_shape[2:]  # where each weight meets the image
    forward = 2 * x_shape[0] * prod(spatial) * prod(w_shape)  # w_shape = (out, in / groups, *kernel)
    return forward * (int(output_mask[0]) + int(output_mask[1]))
