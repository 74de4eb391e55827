"""The model registry for `benchmark.model`: one builder per name. A new model is a module, one line here
and its name in harness.spec.matrix.MODEL_NAMES (validation reads that list without torch; a test keeps both equal)."""

from __future__ import annotations

from typing import Callable

from torch import nn

from harness.models.resnet import resnet18, resnet34, resnet50, resnet101

# Builders take (*, num_classes, zero_init_residual) and return a freshly initialised model on the CPU.
MODELS: dict[str, Callable[..., nn.Module]] = {
    "resnet18": resnet18,
    "resnet34": resnet34,
    "resnet50": resnet50,
    "resnet101": resnet101,
}


def model_names() -> tuple[str, ...]:
    """Registered model names, in registry order (smallest network first)."""
    return tuple(MODELS)


def build_model(name: str, *, num_classes: int, zero_init_residual: bool = False) -> nn.Module:
    """Build the registered model `name`; unknown names raise ValueError listing the known ones."""
    try:
        builder = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(model_names())}") from None
    return builder(num_classes=num_classes, zero_init_residual=zero_init_residual)
