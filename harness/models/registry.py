"""The model registry as plain data: one frozen entry per name with its builder's import path, the recipe the
reference trains it with (DLE ConvNets configs.yml, DGXA100), and its size and FLOPs. Imports no torch, so the
matrix validator can read it; harness/models/build.py builds from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from harness.catalogue import col


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe:
    """A model's training defaults as DLE's configs.yml sets them for DGXA100 (90-epoch scripts for the ResNets),
    in the matrix's units: learning rate per 256 images of global batch, batch per GPU."""

    batch_size: int
    """Images per GPU per step in the AMP config (what the matrix's benchmark.batch_size defaults to)."""
    batch_size_tf32: int
    """Images per GPU in the TF32 config (differs for efficientnet-b4 only)."""
    image_size: int
    """Training crop side in pixels."""
    optimizer: Literal["sgd", "rmsprop"]
    lr_per_256: float
    """configs.yml's lr x 256 / its optimizer_batch_size (DLE reaches that global batch by accumulation)."""
    optimizer_batch_size: int
    """The global batch configs.yml's lr is given for."""
    momentum: float
    weight_decay: float
    """Not applied to BN parameters and biases (DLE's default `bn_weight_decay = False`)."""
    label_smoothing: float
    lr_warmup_epochs: int
    epochs: int
    rmsprop_alpha: float | None = None
    rmsprop_eps: float | None = None
    mixup: float = 0.0
    augmentation: Literal["basic", "autoaugment"] = "basic"
    interpolation: Literal["bilinear", "bicubic"] = "bilinear"

    def matrix_defaults(self) -> dict[str, dict[str, Any]]:
        """The defaults the matrix's sections can take today, by section and key."""
        return {"benchmark": {col.batch_size: self.batch_size, col.image_size: self.image_size},
                "recipe": {"lr_per_256": self.lr_per_256, "momentum": self.momentum,
                           "weight_decay": self.weight_decay, "label_smoothing": self.label_smoothing,
                           "lr_warmup_epochs": self.lr_warmup_epochs, "epochs": self.epochs}}

    def not_honoured(self) -> tuple[str, ...]:
        """What the reference's recipe sets that nvbench's engine and data pipelines do not do (yet)."""
        out = []
        if self.optimizer != "sgd":
            out.append(f"optimizer {self.optimizer} (alpha {self.rmsprop_alpha}, eps {self.rmsprop_eps}); "
                       "nvbench trains with SGD")
        if self.mixup:
            out.append(f"mixup {self.mixup}")
        if self.augmentation != "basic":
            out.append(f"{self.augmentation} augmentation")
        if self.interpolation != "bilinear":
            out.append(f"{self.interpolation} resizing (nvbench resizes bilinearly)")
        return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelEntry:
    name: str
    """Registry name, as `benchmark.model` and the model axis spell it."""
    builder: str
    """Import path `module:function` of the builder, called as builder(num_classes=, zero_init_residual=)."""
    recipe: Recipe
    num_params: int
    """Parameters at 1000 classes, counted from the definition (tests/models check it against the papers)."""
    forward_flops: int
    """FLOPs (multiply-add = 2) of one forward image at recipe.image_size and 1000 classes, by
    harness.models.flops.count_flops, the MFU column's counter (a test keeps the two equal)."""
    reference_tf32_img_per_s: float | None = None
    """DLE README's 1-GPU TF32 training throughput on DGX A100 (A100 80GB, PyTorch 21.03 container); None where
    DLE publishes none."""
    reference_amp_img_per_s: float | None = None
    """The same for AMP (fp16, NHWC, at recipe.batch_size)."""


# DLE configs.yml resnet_params + 90-epoch scripts (--epochs 90 --mixup 0.0): SGD, momentum 0.875, label
# smoothing 0.1, warmup 8, bilinear. resnet50: resnet_params_2k (lr 2.048 / 2048 images, wd 1/32768).
_RESNET50 = Recipe(batch_size=256, batch_size_tf32=256, image_size=224, optimizer="sgd", lr_per_256=0.256,
                   optimizer_batch_size=2048, momentum=0.875, weight_decay=3.0517578125e-05, label_smoothing=0.1,
                   lr_warmup_epochs=8, epochs=90)
# resnext101-32x4d and se-resnext101-32x4d: resnet_params_1k (lr 1.024 / 1024 images, wd 1/16384), batch 128.
_RESNEXT = Recipe(batch_size=128, batch_size_tf32=128, image_size=224, optimizer="sgd", lr_per_256=0.256,
                  optimizer_batch_size=1024, momentum=0.875, weight_decay=6.103515625e-05, label_smoothing=0.1,
                  lr_warmup_epochs=8, epochs=90)
# efficientnet_params: RMSprop (alpha 0.9, eps 0.01, momentum 0.9), warmup 16 of 400 epochs, mixup 0.2,
# AutoAugment, bicubic; b0: lr 0.08 / 4096 images, wd 1e-5, 224 px; b4: lr 0.16 / 4096, wd 5e-6, 380 px.
_EFFNET = dict(optimizer="rmsprop", optimizer_batch_size=4096, momentum=0.9, label_smoothing=0.1,
               lr_warmup_epochs=16, epochs=400, rmsprop_alpha=0.9, rmsprop_eps=0.01, mixup=0.2,
               augmentation="autoaugment", interpolation="bicubic")

ENTRIES: tuple[ModelEntry, ...] = (
    # DLE's configs.yml has no resnet18/34/101: they train with resnet50's recipe (the matrix's own defaults).
    ModelEntry(name="resnet18", builder="harness.models.resnet:resnet18", recipe=_RESNET50,
               num_params=11_689_512, forward_flops=3_628_146_688),
    ModelEntry(name="resnet34", builder="harness.models.resnet:resnet34", recipe=_RESNET50,
               num_params=21_797_672, forward_flops=7_327_522_816),
    ModelEntry(name="resnet50", builder="harness.models.resnet:resnet50", recipe=_RESNET50,
               num_params=25_557_032, forward_flops=8_178_368_512,
               reference_tf32_img_per_s=938.0, reference_amp_img_per_s=2470.0),
    ModelEntry(name="resnet101", builder="harness.models.resnet:resnet101", recipe=_RESNET50,
               num_params=44_549_160, forward_flops=15_602_810_880),
    ModelEntry(name="resnext101-32x4d", builder="harness.models.resnext:resnext101_32x4d", recipe=_RESNEXT,
               num_params=44_177_704, forward_flops=15_939_993_600,
               reference_tf32_img_per_s=456.0, reference_amp_img_per_s=1211.0),
    ModelEntry(name="se-resnext101-32x4d", builder="harness.models.resnext:se_resnext101_32x4d", recipe=_RESNEXT,
               num_params=45_251_128, forward_flops=15_942_074_368,
               reference_tf32_img_per_s=395.0, reference_amp_img_per_s=855.0),
    ModelEntry(name="efficientnet-b0", builder="harness.models.efficientnet:efficientnet_b0",
               recipe=Recipe(batch_size=256, batch_size_tf32=256, image_size=224, lr_per_256=0.08 * 256 / 4096,
                             weight_decay=1e-05, **_EFFNET),
               num_params=5_288_548, forward_flops=771_629_504,
               reference_tf32_img_per_s=1078.0, reference_amp_img_per_s=2489.0),
    ModelEntry(name="efficientnet-b4", builder="harness.models.efficientnet:efficientnet_b4",
               recipe=Recipe(batch_size=128, batch_size_tf32=64, image_size=380, lr_per_256=0.16 * 256 / 4096,
                             weight_decay=5e-06, **_EFFNET),
               num_params=19_341_616, forward_flops=8_787_542_048,
               reference_tf32_img_per_s=157.0, reference_amp_img_per_s=331.0),
)

MODELS: dict[str, ModelEntry] = {e.name: e for e in ENTRIES}


def model_names() -> tuple[str, ...]:
    """Registered model names, in registry order (the ResNets smallest first, then the rest of DLE's family)."""
    return tuple(MODELS)


def entry(name: str) -> ModelEntry:
    """The registry entry of `name`; ValueError listing the known names when there is none."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(model_names())}") from None
