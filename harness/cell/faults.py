"""What a cell does to itself on purpose: test-only faults (NVBENCH_FAULT) and fire drills (known extra work
per measured step, `nvbench run --fire-drill`), the calibrations of the failure handling and of the
regression detector."""

from __future__ import annotations

import math
import os
import signal
import time

import numpy as np
import torch

from harness.cell.engine import Engine


def inject_fault(fault: str | None, rank: int, engine: Engine) -> None:
    """Test-only failure modes (NVBENCH_FAULT, matched to the cell by the runner), applied as the measured
    window opens: `kind` or `kind@rank`."""
    kind, _, only_rank = (fault or "").partition("@")
    if not kind or (only_rank and int(only_rank) != rank):
        return
    if kind == "raise":
        raise RuntimeError("injected fault: raise")
    if kind == "oom":
        raise torch.OutOfMemoryError("injected fault: out of memory")
    if kind == "exit":
        os._exit(3)
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "nan":
        with torch.no_grad():
            next(engine.model.parameters()).fill_(float("nan"))
        return
    if kind == SlowStart.KIND:  # acts inside the window: slow_start_for
        return
    raise ValueError(f"unknown injected fault {kind!r}")


def slow_start_for(fault: str | None, rank: int) -> SlowStart | None:
    """The window's SlowStart when the injected fault is `slow_start` (or `slow_start@RANK` on that rank)."""
    kind, _, only_rank = (fault or "").partition("@")
    if kind != SlowStart.KIND or (only_rank and int(only_rank) != rank):
        return None
    return SlowStart()


class SlowStart:
    """Test-only fault `slow_start`: the measured window opens in a hiccup, its first STEPS steps each taking
    RATIO times their own time (a sleep after the step's work: on CUDA the stream idles, so the step's events
    see it too). The case of issue 42, which a re-run of the repeat (nvbench ab) must absorb. Runs where a
    fire drill would (run_window's drill hooks); a cell never runs both."""

    KIND = "slow_start"
    STEPS = 3
    RATIO = 3.0

    def __init__(self) -> None:
        self._step = 0
        self._t0 = 0.0

    def describe(self) -> str:
        return f"injected fault: the window's first {self.STEPS} steps at {self.RATIO:g}x"

    def begin(self) -> None:
        self._t0 = time.perf_counter()

    def __call__(self) -> None:
        if self._step < self.STEPS:
            time.sleep((self.RATIO - 1.0) * (time.perf_counter() - self._t0))
        self._step += 1


class FireDrill:
    """Known extra work in every measured step (`nvbench run --fire-drill PCT`): a calibrated slowdown that
    proves the regression detector. Every row of a drilled run carries fire_drill_pct, so a drill can never
    pass for a real result.

    On CPU, where a step's work is synchronous, each step's own elapsed time is read as it ends and PCT %
    of it is added as a loop of small matmuls: the drill stays proportional to the step under any load (a
    calibration on warm-up steps would be off by however busy the machine was then). The last matmul of a
    step can overrun (the thread may be descheduled in it), so what each step did beyond its share is
    owed back by the next: over the window the extra time is PCT % of the steps' own time to within one
    overrun. On CUDA, where reading
    the clock inside the window would need a sync, the drill is device work calibrated before the window:
    PCT % of the fastest warm-up step after the first (device time from CUDA events), queued each step as
    torch.cuda._sleep of a matching cycle count, without a host sync.
    """

    _CPU_SIDE = 64
    """Matrix side of the CPU work unit: tens of microseconds, fine enough for a 1 % drill of a 10 ms step."""

    def __init__(self, device: torch.device, pct: float, warmup_step_times_s: np.ndarray):
        self.fraction = pct / 100.0
        self.is_cuda = device.type == "cuda"
        self._t0 = 0.0
        self._owed_s = 0.0
        if self.is_cuda:
            if len(warmup_step_times_s) == 0:
                raise ValueError("--fire-drill on CUDA needs warmup steps to calibrate on "
                                 "(benchmark.warmup_steps = 0)")
            times = warmup_step_times_s[1:] if len(warmup_step_times_s) > 1 else warmup_step_times_s
            self.cycles = max(1, round(self.fraction * float(np.min(times)) * self._sleep_cycles_per_s(device)))
        else:
            side = self._CPU_SIDE
            self._a, self._b, self._out = torch.randn(side, side), torch.randn(side, side), torch.empty(side, side)
            self._half_unit_s = self._cpu_unit_s() / 2

    def describe(self) -> str:
        if self.is_cuda:
            return f"{self.cycles} GPU sleep cycles per step (calibrated on the warm-up steps)"
        return f"{100 * self.fraction:g}% of each step's own time as extra CPU work"

    @staticmethod
    def _sleep_cycles_per_s(device: torch.device) -> float:
        probe = 1_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = math.inf
        for _ in range(3):
            start.record()
            torch.cuda._sleep(probe)
            end.record()
            torch.cuda.synchronize(device)  # sync: calibration, before the measured window opens
            best = min(best, start.elapsed_time(end) / 1e3)
        return probe / best

    def _cpu_unit_s(self) -> float:
        best = math.inf
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(20):
                torch.mm(self._a, self._b, out=self._out)
            best = min(best, (time.perf_counter() - t0) / 20)
        return best

    def begin(self) -> None:
        """The step starts (CPU: remember when)."""
        if not self.is_cuda:
            self._t0 = time.perf_counter()

    def __call__(self) -> None:
        """The step's work is queued or done: add the drill's share."""
        if self.is_cuda:
            torch.cuda._sleep(self.cycles)
            return
        now = time.perf_counter()
        target = (now - self._t0) * self.fraction + self._owed_s
        until = now + target - self._half_unit_s  # stop nearest the target
        while time.perf_counter() < until:
            torch.mm(self._a, self._b, out=self._out)
        self._owed_s = target - (time.perf_counter() - now)  # an overrun is paid back by the next step
