"""One training micro-batch, one optimizer step, one validation batch: precision, memory format,
gradient accumulation, loss scaling, the LR schedule. The caller owns the loop, the data and the timing.

Nothing in forward_backward / optimizer_step / validate_batch reads a tensor value on the host: loss and
accuracy accumulate on the device and are popped as tensors, so a caller can all-reduce and read them
outside its measured window.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.cell.graphs import CAPTURE_WARMUP_ITERS, GraphedStep, restore, snapshot
from harness.cell.recipe import (
    AUTOCAST_DTYPES,
    STATIC_GROWTH_INTERVAL,
    EngineOptions,
    LrSchedule,
    param_groups,
    set_tf32,
)
from harness.cell.instruments.timing import BACKWARD, FORWARD, OPTIMIZER, Ranges, make_ranges

TOP_K = 5


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
        # forward / backward / optimizer ranges (NVTX, harness.cell.instruments.timing); none by default.
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
            set_tf32(opts.allow_tf32)
        self._autocast_dtype = AUTOCAST_DTYPES.get(opts.precision)
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

    def autotune(self, images: Tensor, labels: Tensor) -> float:
        """One eager training step on a batch like the ones to come, undone; return the seconds it took.

        On CUDA the first step of a shape is not a training step like the others: with cudnn.benchmark, cuDNN
        times every algorithm of each new convolution shape and keeps the fastest (autotuning), and each kernel
        is loaded on its first launch. Run here, apart, that cost is named (autotune_s) instead of hiding in
        warmup or compile. Trains nothing (prepare's undo). Off CUDA nothing autotunes: 0.0, nothing runs.
        Synchronises the device: call it before any window.
        """
        if self.device.type != "cuda":
            return 0.0
        compiled, self.model = self.model, self._module  # the eager module: compiling is prepare's to time
        try:
            return self._undone(lambda: self._one_step(images, labels))
        finally:
            self.model = compiled

    def prepare(self, images: Tensor, labels: Tensor) -> float:
        """Compile or capture the training step on a batch like the ones to come; return the seconds it took.

        Eager: nothing. inductor: one whole step (so that torch.compile compiles forward and backward);
        cudagraph: CAPTURE_WARMUP_ITERS eager steps on a side stream, then the capture. Both leave the model,
        the optimizer, the scaler and every record as they were (restored in place, so a graph's addresses stay
        valid): preparing trains nothing. Synchronises the device: call it before any window.
        """
        if self.opts.compile == "eager":
            return 0.0
        if self.opts.compile == "inductor":
            return self._undone(lambda: self._one_step(images, labels))
        return self._undone(lambda: self._capture(images, labels))

    def _one_step(self, images: Tensor, labels: Tensor) -> None:
        for micro in range(self.opts.grad_accum):
            self.micro_step(images, labels, sync_grads=micro == self.opts.grad_accum - 1)
        self.update()

    def _capture(self, images: Tensor, labels: Tensor) -> None:
        self._graph = GraphedStep(self, images, labels)
        self._graph.capture(CAPTURE_WARMUP_ITERS)

    def _undone(self, work: Callable[[], None]) -> float:
        """Seconds `work` took, device work included, with every tensor a step changes restored after it."""
        t0 = time.perf_counter()
        if self.scaler is not None:
            self.scaler.scale(torch.zeros((), device=self.device))  # creates its scale now, so it is saved too
        saved = snapshot(self._state_tensors())
        self.train()
        work()
        self.optimizer.zero_grad(set_to_none=self._graph is None)  # a graph keeps its gradient buffers
        restore(saved)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # sync: the time must include the queued work
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
        loss = self.micro_step(images, labels, sync_grads=sync_grads)
        if self._step < self.opts.total_steps:
            self._step_loss[self._step].add_(loss, alpha=1.0 / self.opts.grad_accum)

    def micro_step(self, images: Tensor, labels: Tensor, *, sync_grads: bool) -> Tensor:
        """Forward and backward of one micro-batch; its loss (detached) added to the train-loss sums."""
        images = self.format(images)
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
            self.update()
            self.optimizer.zero_grad(set_to_none=True)
            self._advance()
            if extra is not None:
                extra()

    def _record_lr(self) -> None:
        if self._step < self.opts.total_steps:
            self._step_lr[self._step] = self.lr()

    def update(self) -> None:
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
            logits = self.model(self.format(images))
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

    def format(self, images: Tensor) -> Tensor:
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
