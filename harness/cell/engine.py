"""One training micro-batch, one optimizer step, one validation batch: precision, memory format,
gradient accumulation, loss scaling, the LR schedule. The caller owns the loop, the data and the timing.

Nothing in forward_backward / optimizer_step / validate_batch reads a tensor value on the host: loss and
accuracy accumulate on the device and are popped as tensors, so a caller can all-reduce and read them
outside its measured window.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.cell.timing import BACKWARD, FORWARD, OPTIMIZER, Ranges, make_ranges
from harness.spec.matrix import IMAGENET_TRAIN_IMAGES

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
CAPTURE_WARMUP_ITERS = 3
"""Eager iterations on a side stream before a CUDA graph is captured (lazy state, cuDNN and allocator
settle), undone afterwards."""
STATIC_GROWTH_INTERVAL = 1_000_000_000
"""The reference's static loss scale: a GradScaler whose scale never grows (DLE passes this interval)."""
_AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_DEVICE_RE = re.compile(r"cpu|cuda(:\d+)?")
# Parameters of these layers never get weight decay unless bn_bias_weight_decay (the reference excludes BN).
_NORM_TYPES = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)
TOP_K = 5


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


class Engine:
    """Train and validate steps for one model under one EngineOptions."""

    def __init__(
        self,
        model: nn.Module,
        opts: EngineOptions,
        *,
        wrap: Callable[[nn.Module], nn.Module] | None = None,
        ranges: Ranges | None = None,
    ) -> None:
        self.opts = opts
        # forward / backward / optimizer ranges (NVTX, harness.cell.timing); none by default.
        self._ranges = ranges or make_ranges(False)
        self.device = torch.device(opts.device)
        self._channels_last = opts.memory_format == "nhwc"
        memory_format = torch.channels_last if self._channels_last else torch.contiguous_format
        model = model.to(device=self.device, memory_format=memory_format)
        # Wrapping (DDP) comes last so it sees parameters already on their device and in their format.
        self.model: nn.Module = wrap(model) if wrap is not None else model
        if opts.compile == "cudagraph" and wrap is not None:
            raise ValueError("compile: cudagraph captures a single process's step; DDP is not supported")
        self._module = self.model
        """The model as built (eager): validation runs it, so a compiled model is not recompiled for eval."""
        if self.device.type == "cuda":
            _set_tf32(opts.allow_tf32)
        self._autocast_dtype = _AUTOCAST_DTYPES.get(opts.precision)
        self._schedule = LrSchedule.from_options(opts)
        self._step = 0
        self._lr = opts.peak_lr * self._schedule(0)
        """The LR of the next step, on the host: the optimizer's copy may live on the device (a graph's)."""
        self.optimizer = self._build_optimizer()
        self.scaler = self._build_scaler()
        self._criterion = nn.CrossEntropyLoss(label_smoothing=opts.label_smoothing)
        self._train_acc = self._zeros(2)
        self._val_acc = self._zeros(4)
        # Per-step records, preallocated: the loss of each optimizer step stays on the device (the mean
        # over its micro-batches, this rank's) and its LR on the host, so recording them costs no sync.
        self._step_loss = torch.zeros(opts.total_steps, dtype=torch.float32, device=self.device)
        self._step_lr = np.full(opts.total_steps, np.nan)
        self._graph: GraphedStep | None = None
        self._micro = 0
        if opts.compile == "inductor":
            self.model = torch.compile(self.model)

    # ---- construction -------------------------------------------------------------------------------

    def _build_optimizer(self) -> torch.optim.SGD:
        opts = self.opts
        groups = param_groups(
            self.model, weight_decay=opts.weight_decay, decay_norm_and_bias=opts.bn_bias_weight_decay
        )
        optimizer = torch.optim.SGD(
            groups,
            # A captured graph reads the LR from device memory, which each step updates in place.
            lr=torch.tensor(self._lr, device=self.device) if opts.compile == "cudagraph" else self._lr,
            momentum=opts.momentum,
            nesterov=opts.nesterov,
            # Fused SGD takes the GradScaler's found_inf/scale as tensors; with the stock SGD,
            # GradScaler.step reads found_inf with .item(), a host sync on every fp16 step.
            fused=True,
        )
        if opts.momentum > 0:
            _zero_momentum_buffers(optimizer)
        return optimizer

    def _build_scaler(self) -> torch.amp.GradScaler | None:
        if self.opts.precision != "fp16":
            return None
        return torch.amp.GradScaler(
            self.device.type,
            init_scale=self.opts.init_loss_scale,
            growth_factor=2.0,
            backoff_factor=0.5,
            growth_interval=self.opts.loss_scale_growth_interval if self.opts.dynamic_loss_scale
            else STATIC_GROWTH_INTERVAL,
        )

    def _zeros(self, n: int) -> Tensor:
        # float64: sums over a whole epoch of images stay exact as counts and accurate as losses.
        return torch.zeros(n, dtype=torch.float64, device=self.device)

    # ---- training -----------------------------------------------------------------------------------

    def train(self) -> None:
        """Put the model in training mode (forward_backward also ensures it)."""
        self.model.train()

    def eval(self) -> None:
        """Put the model in eval mode (validate_batch also ensures it)."""
        self.model.eval()

    def prepare(self, images: Tensor, labels: Tensor) -> float:
        """Compile or capture the training step on a batch like the ones to come; return the seconds it took.

        Eager: nothing. inductor: one whole step (so that torch.compile compiles forward and backward);
        cudagraph: CAPTURE_WARMUP_ITERS eager steps on a side stream, then the capture. Both leave the model,
        the optimizer, the scaler and every record as they were (restored in place, so a graph's addresses stay
        valid): preparing trains nothing. Synchronises the device: call it before any window.
        """
        if self.opts.compile == "eager":
            return 0.0
        t0 = time.perf_counter()
        if self.scaler is not None:
            self.scaler.scale(torch.zeros((), device=self.device))  # creates its scale now, so it is saved too
        saved = _snapshot(self._state_tensors())
        self.train()
        if self.opts.compile == "inductor":
            for micro in range(self.opts.grad_accum):
                self._micro_step(images, labels, sync_grads=micro == self.opts.grad_accum - 1)
            self._update()
        else:
            self._graph = GraphedStep(self, images, labels)
            self._graph.capture(CAPTURE_WARMUP_ITERS)
        self.optimizer.zero_grad(set_to_none=self._graph is None)  # a graph keeps its gradient buffers
        _restore(saved)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # sync: compile_s must include the queued work
        return time.perf_counter() - t0

    def forward_backward(self, images: Tensor, labels: Tensor, *, sync_grads: bool = True) -> None:
        """One micro-batch: autocast forward, backward of loss / grad_accum; adds to the train-loss sums.

        Pass sync_grads=False on all but the last micro-batch of an accumulation so a DDP model skips
        its gradient all-reduce (model.no_sync()); without DDP the flag has no effect. A captured step only
        copies the batch into its input buffers here; the graph runs it in optimizer_step.
        """
        if self._graph is not None:
            self._graph.load(self._micro, images, labels)
            self._micro += 1
            return
        if not self.model.training:
            self.model.train()
        loss = self._micro_step(images, labels, sync_grads=sync_grads)
        if self._step < self.opts.total_steps:
            self._step_loss[self._step].add_(loss, alpha=1.0 / self.opts.grad_accum)

    def _micro_step(self, images: Tensor, labels: Tensor, *, sync_grads: bool) -> Tensor:
        """Forward and backward of one micro-batch; its loss (detached) added to the train-loss sums."""
        images = self._format(images)
        no_sync = getattr(self.model, "no_sync", None)
        grad_sync = no_sync() if (not sync_grads and no_sync is not None) else contextlib.nullcontext()
        with grad_sync:
            with self._ranges(FORWARD):
                with self._autocast():
                    loss = self._criterion(self.model(images), labels)
                scaled = loss / self.opts.grad_accum
                if self.scaler is not None:
                    scaled = self.scaler.scale(scaled)
            with self._ranges(BACKWARD):
                scaled.backward()
        batch = images.shape[0]
        detached = loss.detach()
        self._train_acc[0].add_(detached, alpha=batch)  # promoted in place: no float64 copy per micro-batch
        self._train_acc[1].add_(batch)
        return detached

    @property
    def is_graphed(self) -> bool:
        """The step runs as one captured CUDA graph (compile = cudagraph, once prepared)."""
        return self._graph is not None

    def optimizer_step(self, extra: Callable[[], None] | None = None) -> None:
        """Apply the accumulated gradients (skipped on fp16 overflow), clear them, advance the LR. A captured
        step replays its graph here: forward, backward and update in one launch. `extra` (a fire drill's
        known work) runs last, inside the optimizer range and phase."""
        if self._graph is not None:
            self._record_lr()
            self._graph.replay()
            if self._step < self.opts.total_steps:
                self._step_loss[self._step].copy_(self._graph.step_loss)
            self._micro = 0
            self._advance()
            if extra is not None:
                extra()
            return
        with self._ranges(OPTIMIZER):
            self._record_lr()
            self._update()
            self.optimizer.zero_grad(set_to_none=True)
            self._advance()
            if extra is not None:
                extra()

    def _record_lr(self) -> None:
        if self._step < self.opts.total_steps:
            self._step_lr[self._step] = self.lr()

    def _update(self) -> None:
        """The optimizer step itself, through the scaler when there is one (no host decision either way)."""
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def _advance(self) -> None:
        # The schedule advances even when the scaler skipped the step: knowing whether it did would
        # need a host read of found_inf, and the reference counts iterations, not applied updates.
        self._step += 1
        lr = self.opts.peak_lr * self._schedule(self._step)
        if lr == self._lr:
            return
        self._lr = lr
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], Tensor):
                group["lr"].fill_(lr)  # where a captured graph reads it
            else:
                group["lr"] = lr

    def step_records(self) -> tuple[np.ndarray, np.ndarray]:
        """(loss, lr) of every optimizer step taken so far, in step order; NaN where none was recorded.

        Host sync: reads the device loss record. Call outside measured windows.
        """
        losses = self._step_loss[: self._step].double().cpu().numpy()  # sync: once, after the window
        return losses, self._step_lr[: self._step].copy()

    def pop_train_loss(self) -> Tensor:
        """Device float64 tensor [loss_sum, num_samples] since the last pop (label-smoothed loss). The sums
        are zeroed in place: a captured graph keeps adding into the same memory."""
        out = self._train_acc.clone()
        self._train_acc.zero_()
        return out

    # ---- validation ---------------------------------------------------------------------------------

    @torch.no_grad()
    def validate_batch(self, images: Tensor, labels: Tensor) -> None:
        """Eval-mode forward; adds plain cross-entropy sum, top-1 and top-5 hits and the count."""
        if self.model.training:
            self.model.eval()
        with self._autocast():
            logits = self.model(self._format(images))
        logits = logits.float()
        loss_sum = F.cross_entropy(logits, labels, reduction="sum")
        top = logits.topk(min(TOP_K, logits.shape[1]), dim=1).indices
        hits = top.eq(labels.unsqueeze(1))
        sums = (loss_sum, hits[:, 0].sum(), hits.any(dim=1).sum())
        self._val_acc[:3].add_(torch.stack([s.to(torch.float64) for s in sums]))
        self._val_acc[3].add_(labels.shape[0])

    def pop_val(self) -> Tensor:
        """Device float64 tensor [loss_sum, correct1, correct5, count] since the last pop: one all_reduce."""
        out, self._val_acc = self._val_acc, self._zeros(4)
        return out

    # ---- reads for logging (outside measured windows) ----------------------------------------------

    def loss_scale(self) -> float | None:
        """Current fp16 loss scale, None without a scaler. Host sync: reads a device tensor."""
        return None if self.scaler is None else float(self.scaler.get_scale())

    def lr(self) -> float:
        """LR of the next optimizer step (a host-side float: no sync, also when the optimizer holds it on the
        device for a graph)."""
        return self._lr

    def _state_tensors(self) -> list[Tensor]:
        """Every tensor a training step changes: parameters, buffers, optimizer and scaler state, records."""
        tensors = [*self._module.parameters(), *self._module.buffers(), self._train_acc, self._step_loss]
        tensors += [t for state in self.optimizer.state.values() for t in state.values() if isinstance(t, Tensor)]
        if self.scaler is not None and self.scaler._scale is not None:
            tensors += [self.scaler._scale, self.scaler._growth_tracker]
        return tensors

    @property
    def steps_taken(self) -> int:
        """Optimizer steps taken so far (including fp16 steps the scaler skipped)."""
        return self._step

    # ---- helpers ------------------------------------------------------------------------------------

    def _autocast(self) -> torch.autocast:
        return torch.autocast(
            self.device.type,
            dtype=self._autocast_dtype or torch.float32,
            enabled=self._autocast_dtype is not None,
            # A graph replays the casts it captured; autocast's weight cache would hold stale copies.
            cache_enabled=self.opts.compile != "cudagraph",
        )

    def _format(self, images: Tensor) -> Tensor:
        # A no-op when the loader already delivers channels_last, as the data backends do.
        return images.contiguous(memory_format=torch.channels_last) if self._channels_last else images


def _zero_momentum_buffers(optimizer: torch.optim.SGD) -> None:
    # Fused SGD creates its momentum buffers with empty_like on its first step and marks them
    # initialised even when the GradScaler skips that step; an fp16 overflow on step 0 (common at
    # scale 65536) then leaves uninitialised memory as momentum. Zeros are equivalent (dampening 0:
    # buf = momentum * 0 + grad = grad) and safe.
    for group in optimizer.param_groups:
        for param in group["params"]:
            optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param)


def _set_tf32(allow: bool) -> None:
    # Process-global, which is fine: each cell runs in its own process. The legacy flags are used
    # because reading them raises once the new fp32_precision API has set them; setting these keeps
    # both APIs readable for the environment fingerprint.
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


def _snapshot(tensors: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    return [(t, t.detach().clone()) for t in tensors]


def _restore(saved: list[tuple[Tensor, Tensor]]) -> None:
    with torch.no_grad():
        for tensor, copy in saved:
            tensor.copy_(copy)


class GraphedStep:
    """The whole training step captured as one CUDA graph: static input buffers (one per micro-batch) that
    each step's batches are copied into, then one replay runs forward, backward, the optimizer and the loss
    scaler. Everything the step reads lives at fixed addresses: the LR in a device tensor, the scaler's scale
    and its found-inf flags on the device (fused SGD takes them as tensors), the loss sums added in place."""

    def __init__(self, engine: Engine, images: Tensor, labels: Tensor) -> None:
        self.engine = engine
        images = engine._format(images)
        accum = engine.opts.grad_accum
        self.inputs = [(torch.empty_like(images), torch.empty_like(labels)) for _ in range(accum)]
        for x, y in self.inputs:
            x.copy_(images)
            y.copy_(labels)
        self.step_loss = torch.zeros((), dtype=torch.float32, device=engine.device)
        self.graph = torch.cuda.CUDAGraph()

    def _body(self) -> None:
        engine, accum = self.engine, self.engine.opts.grad_accum
        self.step_loss.zero_()
        for x, y in self.inputs:
            self.step_loss.add_(engine._micro_step(x, y, sync_grads=True), alpha=1.0 / accum)
        engine._update()

    def capture(self, warmup_iters: int) -> None:
        side = torch.cuda.Stream(self.engine.device)
        side.wait_stream(torch.cuda.current_stream(self.engine.device))
        with torch.cuda.stream(side):
            for _ in range(warmup_iters):
                self.engine.optimizer.zero_grad(set_to_none=True)
                self._body()
        torch.cuda.current_stream(self.engine.device).wait_stream(side)
        # Gradients start unallocated, so the first backward of the captured step writes them (in the graph's
        # memory pool) rather than adding to them: each replay starts from fresh gradients.
        self.engine.optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self._body()

    def load(self, micro: int, images: Tensor, labels: Tensor) -> None:
        x, y = self.inputs[micro]
        x.copy_(self.engine._format(images))
        y.copy_(labels)

    def replay(self) -> None:
        self.graph.replay()
