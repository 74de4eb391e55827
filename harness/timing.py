"""Step clocks (CUDA events on GPU, perf_counter on CPU) and the NVTX range names, kept in one place
so Nsight filters stay stable across releases."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, ContextManager

import numpy as np
import torch

NVTX_DOMAIN = "nvbench"
# Range names: a timeline reads cell > warmup|measure > step > data, h2d, forward, backward, optimizer.
CELL = "cell"
WARMUP = "warmup"
MEASURE = "measure"
STEP = "step"
DATA = "data"
H2D = "h2d"
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
VALIDATION = "validation"
RANGE_NAMES = (CELL, WARMUP, MEASURE, STEP, DATA, H2D, FORWARD, BACKWARD, OPTIMIZER, VALIDATION)

Ranges = Callable[[str], ContextManager[None]]


def _no_range(name: str) -> ContextManager[None]:
    return contextlib.nullcontext()


def make_ranges(enabled: bool) -> Ranges:
    """A `ranges(name)` context-manager factory: NVTX push/pop in the nvbench domain, or a no-op."""
    if not enabled:
        return _no_range
    import nvtx

    domain = nvtx.get_domain(NVTX_DOMAIN)
    attributes = {name: domain.get_event_attributes(message=name) for name in RANGE_NAMES}

    @contextlib.contextmanager
    def ranges(name: str):
        domain.push_range(attributes[name])
        try:
            yield
        finally:
            domain.pop_range()

    return ranges


class StepClock:
    """Per-step start/end marks into preallocated storage; read only by `resolve()` after the window.

    On CUDA the marks are events on the current stream, so recording them never waits for the device;
    on CPU the work is synchronous and perf_counter brackets it.
    """

    def __init__(self, num_steps: int, device: torch.device):
        self.num_steps = num_steps
        self.is_cuda = device.type == "cuda"
        if self.is_cuda:
            self._start = [torch.cuda.Event(enable_timing=True) for _ in range(num_steps)]
            self._end = [torch.cuda.Event(enable_timing=True) for _ in range(num_steps)]
        else:
            self._t = np.zeros((num_steps, 2))
        self.data_wait_s = np.zeros(num_steps)

    def begin(self, i: int) -> None:
        if self.is_cuda:
            self._start[i].record()
        else:
            self._t[i, 0] = time.perf_counter()

    def end(self, i: int) -> None:
        if self.is_cuda:
            self._end[i].record()
        else:
            self._t[i, 1] = time.perf_counter()

    def resolve(self) -> np.ndarray:
        """Step times in seconds. Call after the window's closing synchronisation."""
        if self.is_cuda:
            return np.array([s.elapsed_time(e) / 1e3 for s, e in zip(self._start, self._end)])
        return self._t[:, 1] - self._t[:, 0]
