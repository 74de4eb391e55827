"""Step clocks (CUDA events on GPU, perf_counter on CPU) and the NVTX range names, kept in one place
so Nsight filters stay stable across releases."""

from __future__ import annotations

import time
from typing import Callable, ContextManager, Protocol

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
"""`ranges(NAME)` returns a context manager for one of RANGE_NAMES; unknown names raise KeyError."""


class _NullRange:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> bool:
        return False


class _NvtxRange:
    """Push/pop of one preallocated event attribute: entering allocates nothing per step."""

    __slots__ = ("_push", "_pop", "_attributes")

    def __init__(self, domain, name: str) -> None:
        self._push, self._pop = domain.push_range, domain.pop_range
        self._attributes = domain.get_event_attributes(message=name)

    def __enter__(self) -> None:
        self._push(self._attributes)

    def __exit__(self, *exc_info: object) -> bool:
        self._pop()
        return False


class _ProfilerRange:
    """A torch.profiler record_function range (profiling only: it allocates), plus the NVTX range if any."""

    __slots__ = ("_name", "_inner", "_open")

    def __init__(self, name: str, inner) -> None:
        self._name, self._inner, self._open = name, inner, []

    def __enter__(self) -> None:
        self._inner.__enter__()
        record = torch.profiler.record_function(self._name)
        record.__enter__()
        self._open.append(record)

    def __exit__(self, *exc_info: object) -> bool:
        self._open.pop().__exit__(*exc_info)
        self._inner.__exit__(*exc_info)
        return False


_NULL_RANGE = _NullRange()
_NULL_TABLE = {name: _NULL_RANGE for name in RANGE_NAMES}


def make_ranges(enabled: bool, *, profiler: bool = False) -> Ranges:
    """A `ranges(name)` factory: NVTX push/pop in the nvbench domain (enabled), a no-op otherwise.

    The context managers are built once here, so a range in the step loop costs two calls into NVTX and
    no allocation. Without an attached tool (Nsight, an injection library) the nvtx package hands out a
    dummy domain whose push/pop do nothing. `profiler` also opens torch.profiler record_function ranges
    of the same names (for `nvbench profile --tool torch`).
    """
    table = _NULL_TABLE
    if enabled:
        import nvtx

        domain = nvtx.get_domain(NVTX_DOMAIN)
        table = {name: _NvtxRange(domain, name) for name in RANGE_NAMES}
    if profiler:
        table = {name: _ProfilerRange(name, table[name]) for name in RANGE_NAMES}
    return table.__getitem__


class Instrument(Protocol):
    """Something a window starts right after its opening fence and stops right after its closing one
    (NVML telemetry, a profiler capture): outside the timed interval, bracketing exactly its work."""

    def start(self) -> object: ...

    def stop(self) -> object: ...


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
