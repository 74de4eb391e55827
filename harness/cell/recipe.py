"""How one cell trains, as the engine takes it: its options and their problems, the LR schedule, the SGD
parameter groups, and the precision settings (autocast dtypes, TF32)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from harness.matrix.sections import IMAGENET_TRAIN_IMAGES

Precision = Literal["fp32", "fp16", "bf16"]
CompileMode = Literal["eager", "inductor", "cudagraph"]
MemoryFormat = Literal["nchw", "nhwc"]
Schedule = Literal["cosine", "linear", "step", "constant"]
Timeline = Literal["reference", "compressed"]

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")
MEMORY_FORMATS: tuple[str, ...] = ("nchw", "nhwc")
SCHEDULES: tuple[str, ...] = ("cosine", "linear", "step", "constant")
TIMELINES: tuple[str, ...] = ("reference", "compressed")
COMPILE_MODES: tuple[str, ...] = ("eager", "inductor", "cudagraph")
STATIC_GROWTH_INTERVAL = 1_000_000_000
"""The reference's static loss scale: a GradScaler whose scale never grows (DLE passes this interval)."""
AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_DEVICE_RE = re.compile(r"cpu|cuda(:\d+)?")
# Parameters of these layers never get weight decay unless bn_bias_weight_decay (the reference excludes BN).
_NORM_TYPES = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    """How one cell trains: numerics, accumulation and the optimisation recipe (reference defaults)."""

    precision: Precision
    """fp32 (TF32 per allow_tf32 on CUDA), fp16 (autocast + GradScaler) or bf16 (autocast, no scaler)."""
    memory_format: MemoryFormat
    """nhwc puts the model's 4-D weights and the input images in channels_last."""
    grad_accum: int
    """Micro-batches per optimizer step."""
    device: str
    """'cpu' or 'cuda:N'."""
    global_batch: int
    """Images per optimizer step over all ranks (batch * grad_accum * world_size); the LR scales with it."""
    total_steps: int
    """Optimizer steps this engine will take (warmup + measured): the compressed schedule's length and the
    size of the per-step loss record."""
    lr_per_256: float = 0.256
    """Peak LR per 256 images of global batch."""
    momentum: float = 0.875
    """SGD momentum."""
    nesterov: bool = False
    """Nesterov momentum."""
    weight_decay: float = 3.0517578125e-05
    """L2 weight decay of the decay group."""
    bn_bias_weight_decay: bool = False
    """Also decay norm-layer parameters and biases (the reference does not)."""
    label_smoothing: float = 0.1
    """Label smoothing of the training loss (validation loss is plain cross-entropy)."""
    schedule: Schedule = "cosine"
    """LR decay after warmup."""
    lr_timeline: Timeline = "reference"
    """reference: step k trains at the LR the reference run gives it (epoch-granular, epochs counted in
    epoch_images); compressed: warmup and decay squeezed into total_steps (convergence runs)."""
    epochs: int = 90
    """Length of the reference run in epochs: the span of the decay."""
    lr_warmup_epochs: int = 8
    """Warmup epochs: lr = peak * (epoch + 1) / lr_warmup_epochs while warming up (compressed: the same
    share of total_steps, step by step)."""
    epoch_images: int = IMAGENET_TRAIN_IMAGES
    """Images in one epoch of the reference timeline (all ranks)."""
    step_milestones: tuple[float, ...] = (1 / 3, 2 / 3, 8 / 9)
    """Fractions of training where the 'step' schedule multiplies the LR by step_gamma."""
    step_gamma: float = 0.1
    """LR factor applied at each milestone of the 'step' schedule."""
    init_loss_scale: float = 128.0
    """Initial fp16 loss scale (the reference's static 128)."""
    dynamic_loss_scale: bool = False
    """fp16: double the scale after loss_scale_growth_interval overflow-free steps; off = static, as the
    reference (an overflowing step is skipped and halves the scale either way)."""
    loss_scale_growth_interval: int = 100
    """Overflow-free steps before a dynamic fp16 scale doubles (growth 2 and backoff 0.5 are fixed)."""
    allow_tf32: bool = True
    """Let fp32 matmuls and convolutions use TF32 on CUDA."""
    compile: CompileMode = "eager"
    """eager PyTorch; inductor: the model's forward and backward under torch.compile; cudagraph: the whole
    step (forward, backward, optimizer, loss scaler) captured once as a CUDA graph and replayed."""

    def __post_init__(self) -> None:
        problems = _option_problems(self)
        if problems:
            raise ValueError("invalid engine options:\n  " + "\n  ".join(problems))

    @property
    def peak_lr(self) -> float:
        """lr_per_256 scaled linearly by global_batch."""
        return self.lr_per_256 * self.global_batch / 256


def _option_problems(o: EngineOptions) -> list[str]:
    checks = [
        (o.precision in PRECISIONS, f"precision: {o.precision!r} is not one of {PRECISIONS}"),
        (o.memory_format in MEMORY_FORMATS, f"memory_format: {o.memory_format!r} is not one of {MEMORY_FORMATS}"),
        (o.schedule in SCHEDULES, f"schedule: {o.schedule!r} is not one of {SCHEDULES}"),
        (_DEVICE_RE.fullmatch(o.device) is not None, f"device: {o.device!r} is not 'cpu' or 'cuda:N'"),
        (o.grad_accum >= 1, f"grad_accum: must be >= 1, got {o.grad_accum}"),
        (o.global_batch >= 1, f"global_batch: must be >= 1, got {o.global_batch}"),
        (o.total_steps >= 1, f"total_steps: must be >= 1, got {o.total_steps}"),
        (o.lr_per_256 > 0, f"lr_per_256: must be > 0, got {o.lr_per_256}"),
        (0 <= o.momentum < 1, f"momentum: must be in [0, 1), got {o.momentum}"),
        (not o.nesterov or o.momentum > 0, "nesterov: needs momentum > 0"),
        (o.weight_decay >= 0, f"weight_decay: must be >= 0, got {o.weight_decay}"),
        (0 <= o.label_smoothing < 1, f"label_smoothing: must be in [0, 1), got {o.label_smoothing}"),
        (o.lr_timeline in TIMELINES, f"lr_timeline: {o.lr_timeline!r} is not one of {TIMELINES}"),
        (o.compile in COMPILE_MODES, f"compile: {o.compile!r} is not one of {COMPILE_MODES}"),
        (o.compile != "cudagraph" or o.device.startswith("cuda"), "compile: cudagraph needs a CUDA device"),
        (o.epochs >= 1, f"epochs: must be >= 1, got {o.epochs}"),
        (0 <= o.lr_warmup_epochs < o.epochs,
         f"lr_warmup_epochs: must be in [0, epochs={o.epochs}), got {o.lr_warmup_epochs}"),
        (o.epoch_images >= 1, f"epoch_images: must be >= 1, got {o.epoch_images}"),
        (all(0 < m < 1 for m in o.step_milestones),
         f"step_milestones: each must be in (0, 1), got {o.step_milestones}"),
        (list(o.step_milestones) == sorted(set(o.step_milestones)),
         f"step_milestones: must be strictly increasing, got {o.step_milestones}"),
        (0 < o.step_gamma <= 1, f"step_gamma: must be in (0, 1], got {o.step_gamma}"),
        (o.init_loss_scale > 0, f"init_loss_scale: must be > 0, got {o.init_loss_scale}"),
        (o.loss_scale_growth_interval >= 1,
         f"loss_scale_growth_interval: must be >= 1, got {o.loss_scale_growth_interval}"),
    ]
    problems = [message for ok, message in checks if not ok]
    if o.grad_accum >= 1 and o.global_batch % o.grad_accum:
        problems.append(
            f"global_batch: {o.global_batch} is not a multiple of grad_accum={o.grad_accum} "
            "(global_batch = batch * grad_accum * world_size)"
        )
    return problems


@dataclass(frozen=True, slots=True, kw_only=True)
class LrSchedule:
    """LR factor (of the peak LR) for optimizer step k: warmup, then the decay.

    reference: the reference's policies (DLE lr_cosine/linear/step_policy), which are epoch-granular: step k
    falls in epoch e = floor(k * global_batch / epoch_images); while e < W (warmup epochs) the factor is
    (e + 1) / W, then cosine 0.5 (1 + cos(pi (e - W) / (E - W))), linear 1 - (e - W) / (E - W), step
    gamma ** (milestones passed, in epochs of E), or 1. A benchmark of a few hundred steps of ImageNet
    therefore trains at peak / W throughout, as the reference's first steps do.
    compressed: the same shape over total_steps, step by step: warmup over round(W / E * total_steps) steps.
    """

    kind: Schedule
    timeline: Timeline
    total_steps: int
    epochs: int
    warmup_epochs: int
    global_batch: int
    epoch_images: int
    milestones: tuple[float, ...]
    gamma: float

    @classmethod
    def from_options(cls, opts: EngineOptions) -> LrSchedule:
        return cls(kind=opts.schedule, timeline=opts.lr_timeline, total_steps=opts.total_steps, epochs=opts.epochs,
                   warmup_epochs=opts.lr_warmup_epochs, global_batch=opts.global_batch,
                   epoch_images=opts.epoch_images, milestones=opts.step_milestones, gamma=opts.step_gamma)

    def epoch(self, step: int) -> int:
        """The reference epoch step `step` falls in (its first image's)."""
        return step * self.global_batch // self.epoch_images

    @property
    def warmup_steps(self) -> int:
        """Compressed timeline: steps of linear warmup."""
        return round(self.warmup_epochs / self.epochs * self.total_steps)

    def __call__(self, step: int) -> float:
        if self.timeline == "reference":
            return self._factor(self.epoch(step), self.warmup_epochs, self.epochs)
        return self._factor(step, self.warmup_steps, self.total_steps)

    def _factor(self, t: int, warmup: int, end: int) -> float:
        """The policy at position t (an epoch, or a step when compressed) of a run of `end` positions."""
        if t < warmup:
            # The first position already trains at 1/warmup of the peak, as the reference does (never 0).
            return (t + 1) / warmup
        if self.kind == "constant":
            return 1.0
        if self.kind == "step":
            return self.gamma ** sum(t >= round(m * end) for m in self.milestones)
        span = max(1, end - warmup)
        progress = min(t - warmup, span) / span  # clamped: positions past the end stay at 0
        if self.kind == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))


def param_groups(model: nn.Module, *, weight_decay: float, decay_norm_and_bias: bool) -> list[dict]:
    """Two SGD groups: decayed weights, and norm-layer parameters plus every bias (no decay)."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    for module in model.modules():
        is_norm = isinstance(module, _NORM_TYPES)
        for name, param in module.named_parameters(recurse=False):
            if id(param) in seen or not param.requires_grad:
                continue
            seen.add(id(param))
            exempt = (is_norm or name == "bias") and not decay_norm_and_bias
            (no_decay if exempt else decay).append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def set_tf32(allow: bool) -> None:
    # Process-global, which is fine: each cell runs in its own process. The legacy flags are used
    # because reading them raises once the new fp32_precision API has set them; setting these keeps
    # both APIs readable for the environment fingerprint.
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
