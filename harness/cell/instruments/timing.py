"""Step clocks (CUDA events on GPU, perf_counter on CPU) and the NVTX range names, kept in one place
so Nsight filters stay stable across releases."""

from __future__ import annotations

import time
from typing import Callable, ContextManager, Protocol

import numpy as np
import torch
from harness.catalogue.steps import STEP_PHASES

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

ALLREDUCE = "allreduce"
PHASES = STEP_PHASES
"""The phases of a step whose time each measured step records (steps/*.parquet `phase_<name>_s`: declared once in
harness.catalogue.steps, in this order: data, h2d, forward, backward, optimizer, allreduce); h2d
lies inside data (the loaders copy as they hand a batch over), the others are disjoint. `allreduce` (world
size > 1): DDP launches the gradients' all-reduce from backward's hooks, overlapped with the rest of
backward; what is not hidden is the wait at backward's end, from the moment the last gradient is written to
the moment backward returns. That wait is the allreduce phase, and backward is reported without it."""

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


class _TimedRange:
    """A range that also marks its phase's start and end on a PhaseClock (which ignores them unless armed)."""

    __slots__ = ("_inner", "_enter", "_exit", "_phase")

    def __init__(self, inner, clock: "PhaseClock", phase: int) -> None:
        self._inner, self._enter, self._exit, self._phase = inner, clock.enter, clock.exit, phase

    def __enter__(self) -> None:
        self._inner.__enter__()
        self._enter(self._phase)

    def __exit__(self, *exc_info: object) -> bool:
        self._exit(self._phase)
        return self._inner.__exit__(*exc_info)


class PhaseClock:
    """Per measured step, the time spent in each of PHASES, into storage allocated before the window.

    The step's ranges (make_ranges(..., phases=clock)) mark each phase's start and end; the window arms the
    clock and names the step it is in. On CPU the marks are perf_counter readings summed per step and phase;
    on CUDA they are events on the current stream (a pool recorded once at arm time, so none is created in
    the window), read by resolve() after the window's closing fence: the time the device's stream spent
    between the marks. A phase a step never entered (h2d of synthetic data; forward, backward and optimizer
    of a captured CUDA graph, which runs them in one launch) reads NaN.
    """

    def __init__(self) -> None:
        self.armed, self.is_cuda = False, False
        self._i = 0
        self.syncing = True
        """The current micro-batch's backward all-reduces its gradients (the window sets it per micro-batch)."""
        self._hooks: list = []
        self._last_grad: torch.Tensor | None = None
        self._allreduce_open = False

    def watch_gradients(self, parameters) -> None:
        """World size > 1: time the all-reduce wait. Until the window is armed every parameter's
        post-accumulate-grad hook notes which gradient autograd writes last (a step's order is fixed by the
        graph); arm() then keeps one hook, on that parameter, so a measured backward makes one Python call for
        it rather than one per parameter."""
        def note(param: torch.Tensor) -> None:
            self._last_grad = param

        self._hooks = [p.register_post_accumulate_grad_hook(note) for p in parameters if p.requires_grad]

    def _watch_last_gradient(self) -> None:
        if not self._hooks:
            return
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        if self._last_grad is not None:  # none without a warm-up backward: the phase then stays NaN
            self._hooks = [self._last_grad.register_post_accumulate_grad_hook(self._gradients_written)]

    def _gradients_written(self, _param: torch.Tensor) -> None:
        """Autograd wrote the last gradient of a syncing backward: what remains of it is the all-reduce wait."""
        if self.armed and self.syncing and not self._allreduce_open:
            self.enter(_ALLREDUCE)
            self._allreduce_open = True

    def arm(self, num_steps: int, device: torch.device, micro_batches: int = 1, *,
            make_event: Callable[[], object] | None = None) -> None:
        """Allocate the storage of a window of `num_steps` steps of `micro_batches` micro-batches each."""
        n = len(PHASES)
        self.num_steps, self._slots = num_steps, micro_batches
        self.is_cuda = device.type == "cuda"
        self._count = np.zeros((num_steps, n), dtype=np.int64)
        self._k = [0] * n
        if self.is_cuda:
            make_event = make_event or (lambda: torch.cuda.Event(enable_timing=True))
            self._begin = [[make_event() for _ in range(num_steps * micro_batches)] for _ in range(n)]
            self._end = [[make_event() for _ in range(num_steps * micro_batches)] for _ in range(n)]
            for events in (*self._begin, *self._end):
                for event in events:
                    event.record()
        else:
            self._t0 = [0.0] * n
            self._acc = np.zeros((num_steps, n))
        self._i = 0
        self._watch_last_gradient()
        self.armed = True

    def step(self, i: int) -> None:
        """The window enters step i."""
        self._i = i
        if self.is_cuda:
            for phase in range(len(self._k)):  # in place: the window allocates nothing
                self._k[phase] = 0

    def enter(self, phase: int) -> None:
        if not self.armed:
            return
        if self.is_cuda:
            slot = self._i * self._slots + min(self._k[phase], self._slots - 1)
            self._begin[phase][slot].record()
        else:
            self._t0[phase] = time.perf_counter()

    def exit(self, phase: int) -> None:
        if not self.armed:
            return
        if phase == _BACKWARD and self._allreduce_open:  # backward returns: its all-reduce wait ends here
            self._allreduce_open = False
            self.exit(_ALLREDUCE)
        if self.is_cuda:
            k = self._k[phase]
            if k < self._slots:  # more entries than micro-batches (never in the loop): the first ones count
                self._end[phase][self._i * self._slots + k].record()
                self._k[phase] = k + 1
                self._count[self._i, phase] = k + 1
        else:
            self._acc[self._i, phase] += time.perf_counter() - self._t0[phase]
            self._count[self._i, phase] += 1

    def disarm(self) -> None:
        self.armed = False

    def resolve(self) -> np.ndarray:
        """(num_steps, len(PHASES)) seconds; NaN where a step never entered the phase. After the fence."""
        if self.is_cuda:
            out = np.zeros((self.num_steps, len(PHASES)))
            for p in range(len(PHASES)):
                for i in range(self.num_steps):
                    base = i * self._slots
                    out[i, p] = sum(self._begin[p][base + k].elapsed_time(self._end[p][base + k])
                                    for k in range(int(self._count[i, p]))) / 1e3
        else:
            out = self._acc.copy()
        out[self._count == 0] = np.nan
        waited = np.isfinite(out[:, _ALLREDUCE])
        out[waited, _BACKWARD] -= out[waited, _ALLREDUCE]  # the wait was timed inside backward: not twice
        return out


_BACKWARD, _ALLREDUCE = PHASES.index(BACKWARD), PHASES.index(ALLREDUCE)


_NULL_RANGE = _NullRange()
_NULL_TABLE = {name: _NULL_RANGE for name in RANGE_NAMES}


def nvtx_domain(name: str):
    """The nvtx package's Domain for `name` while a tool is attached, else None (ranges cost nothing then).

    nvtx >= 0.2.10 asks the tool `nvtxDomainIsEnabled` and hands out a do-nothing DummyDomain when the answer
    is no. Tools older than that NVTX 3 callback (Nsight Systems 2022.4, Debian's) never answer yes, so every
    range of the process would silently vanish from their timeline (their NVTX_EVENTS then hold only the
    domain's creation). Where a tool is attached (NVTX_INJECTION64_PATH, which nsys and injection libraries
    set) the domain is therefore built from its handle without asking; a tool that implements the callback
    answers the same way."""
    import os

    import nvtx

    domain = nvtx.get_domain(name)
    if not isinstance(domain, nvtx._lib.DummyDomain):
        return domain
    if not os.environ.get("NVTX_INJECTION64_PATH"):
        return None
    from nvtx._lib import lib

    domain = object.__new__(lib.Domain)
    domain.handle = lib.DomainHandle(name)
    lib.Domain.__init__(domain, name)
    return domain


def make_ranges(enabled: bool, *, profiler: bool = False, phases: PhaseClock | None = None) -> Ranges:
    """A `ranges(name)` factory: NVTX push/pop in the nvbench domain (enabled), a no-op otherwise.

    The context managers are built once here, so a range in the step loop costs two calls into NVTX and
    no allocation. Without an attached tool (Nsight, an injection library) the nvtx package hands out a
    dummy domain whose push/pop do nothing. `profiler` also opens torch.profiler record_function ranges
    of the same names (for `nvbench profile --tool torch`). `phases`: the data, h2d, forward, backward and
    optimizer ranges also mark their phase on this clock (per-phase step timing).
    """
    table = _NULL_TABLE
    if enabled:
        domain = nvtx_domain(NVTX_DOMAIN)
        if domain is not None:
            table = {name: _NvtxRange(domain, name) for name in RANGE_NAMES}
    if profiler:
        table = {name: _ProfilerRange(name, table[name]) for name in RANGE_NAMES}
    if phases is not None:
        table = {name: _TimedRange(r, phases, PHASES.index(name)) if name in PHASES else r
                 for name, r in table.items()}
    return table.__getitem__


class Instrument(Protocol):
    """Something a window starts right after its opening fence and stops right after its closing one
    (NVML telemetry, a profiler capture): outside the timed interval, bracketing exactly its work."""

    def start(self) -> object: ...

    def stop(self) -> object: ...


class StepClock:
    """Per-step marks into preallocated storage, read only by the resolve methods after the window.

    Two clocks per step: the step itself (begin/end) and each micro-batch's fetch from the loader
    (fetch_begin/fetch_end). On CUDA the marks are events on the current stream, so recording them never
    waits for the device, and a fetch's events measure what the GPU saw: the time its stream sat idle
    between the work queued before the request and the hand-over of the batch (the exposed data wait). The
    host's own time blocked in the fetch (perf_counter) is kept apart as the host data wait: on CUDA it
    overlaps GPU work already queued, so it overstates the stall. On CPU the work is synchronous and both
    are the same perf_counter measurement.
    """

    def __init__(self, num_steps: int, device: torch.device, micro_batches: int = 1, *,
                 make_event: Callable[[], object] | None = None):
        """`make_event` replaces torch.cuda.Event(enable_timing=True) (tests pass a fake device)."""
        self.num_steps = num_steps
        self.micro_batches = micro_batches
        self.is_cuda = device.type == "cuda"
        if self.is_cuda:
            make_event = make_event or (lambda: torch.cuda.Event(enable_timing=True))

            def events(n: int) -> list:
                return [make_event() for _ in range(n)]

            self._start, self._end = events(num_steps), events(num_steps)
            self._fetch_start, self._fetch_end = events(num_steps * micro_batches), events(num_steps * micro_batches)
            # torch creates a CUDA event on its first record: record each one now, so that no event is
            # created inside the window.
            for event in (*self._start, *self._end, *self._fetch_start, *self._fetch_end):
                event.record()
        else:
            self._t = np.zeros((num_steps, 2))
        self.host_data_wait_s = np.zeros(num_steps)
        self._fetch_t0 = 0.0

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

    def fetch_begin(self, i: int, micro: int) -> None:
        """The loop is about to ask the loader for step i's micro-batch `micro`."""
        if self.is_cuda:
            self._fetch_start[i * self.micro_batches + micro].record()
        self._fetch_t0 = time.perf_counter()

    def fetch_end(self, i: int, micro: int) -> None:
        """The loader has handed the batch over."""
        self.host_data_wait_s[i] += time.perf_counter() - self._fetch_t0
        if self.is_cuda:
            self._fetch_end[i * self.micro_batches + micro].record()

    def resolve(self) -> np.ndarray:
        """Step times in seconds. Call after the window's closing synchronisation."""
        if self.is_cuda:
            return np.array([s.elapsed_time(e) / 1e3 for s, e in zip(self._start, self._end)])
        return self._t[:, 1] - self._t[:, 0]

    def resolve_exposed_data_wait(self) -> np.ndarray:
        """Per step, the time the device's stream waited for that step's batches (seconds); on CPU the host
        wait. Call after the window's closing synchronisation."""
        if not self.is_cuda:
            return self.host_data_wait_s.copy()
        gaps = np.array([s.elapsed_time(e) / 1e3 for s, e in zip(self._fetch_start, self._fetch_end)])
        return gaps.reshape(self.num_steps, self.micro_batches).sum(axis=1) if gaps.size else np.zeros(0)
