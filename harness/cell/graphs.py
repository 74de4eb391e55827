"""The training step as one CUDA graph (GraphedStep), and the snapshot and restore of the state a step
changes, so that compiling or capturing a step trains nothing."""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from harness.cell.recipe import EngineOptions

CAPTURE_WARMUP_ITERS = 3
"""Eager iterations on a side stream before a CUDA graph is captured (lazy state, cuDNN and allocator
settle), undone afterwards."""


class CapturedEngine(Protocol):
    """What a captured step uses of its engine (harness.cell.engine.Engine)."""

    opts: EngineOptions
    device: torch.device
    optimizer: torch.optim.Optimizer

    def format(self, images: Tensor) -> Tensor: ...

    def micro_step(self, images: Tensor, labels: Tensor, *, sync_grads: bool) -> Tensor: ...

    def update(self) -> None: ...


def snapshot(tensors: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    return [(t, t.detach().clone()) for t in tensors]


def restore(saved: list[tuple[Tensor, Tensor]]) -> None:
    with torch.no_grad():
        for tensor, copy in saved:
            tensor.copy_(copy)


class GraphedStep:
    """The whole training step captured as one CUDA graph: static input buffers (one per micro-batch) that
    each step's batches are copied into, then one replay runs forward, backward, the optimizer and the loss
    scaler. Everything the step reads lives at fixed addresses: the LR in a device tensor, the scaler's scale
    and its found-inf flags on the device (fused SGD takes them as tensors), the loss sums added in place."""

    def __init__(self, engine: CapturedEngine, images: Tensor, labels: Tensor) -> None:
        self.engine = engine
        images = engine.format(images)
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
            self.step_loss.add_(engine.micro_step(x, y, sync_grads=True), alpha=1.0 / accum)
        engine.update()

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
        x.copy_(self.engine.format(images))
        y.copy_(labels)

    def replay(self) -> None:
        self.graph.replay()
