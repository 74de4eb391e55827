"""The machine-speed probe of CPU cells: a fixed reference computation timed between measured steps.

On a shared or virtual CPU host the speed of a core wanders by several per cent over tens of seconds
(other tenants' cache and memory traffic; on the 2-core CI box a 300-step window of resnet18 varies by
~5 % within one process, and two processes on the two vCPUs barely vary together: docs/performance.md).
That wander is most of the repeat-to-repeat noise, and it does not average out between a baseline night
and tonight. The probe measures it: after every `every`-th measured step the worker times a fixed
computation (`_work`: no torch, nothing from the code under test), and the row records the median.
Within a process it follows the step time closely; across processes how much of the spread it explains
changes by the hour (docs/performance.md). `nvbench report` compares at equal probe time
(harness.stats.inference.ancova_fit), which is only sound if the change under test cannot move the probe.

That is why every probe starts equally cold. The first version (/1) timed its computation straight after
the step, so it also timed refilling the caches from whatever state the step's tail left them in: the
detector's fire drill, whose extra matmuls run right before it, made it ~3 % slower (10 % drill; paired
check in benchmarks/speed_probe.py --drill-check). Now each probe first reads a buffer twice the size of
the last-level cache (untimed), so its data always comes from memory and the caches hold nothing of the
step. That shrinks the drill's reach without removing it entirely: in the paired check the drill moved
this probe by +1.0 % against +2.1 % without the read, and over a detector collection the 10 % drill pool's
median probe was 0.7 % above the unchanged pools' (docs/performance.md). What is left makes the adjusted
verdict conservative (part of the slowdown is taken for a slower machine), never an alarm.
Reading a fixed amount of memory between steps also means the next step starts with caches full of that
buffer: it costs models whose working set fits in the cache a little, the same on both sides of a
comparison; a resnet18 step was not measurably slower after one than after a probe without it.

The probe runs after the step's end mark and before the next step's start mark, so step times never
include it, and its duration is subtracted from the window's wall time (`speed_probe_total_s` records
how much). CUDA cells never probe: host work between steps would change how the host runs ahead of the
device, and a GPU's noise is not the host's.
"""

from __future__ import annotations

import hashlib
import math
import ssl
import time
from functools import cache
from pathlib import Path

import numpy as np
from harness.catalogue import col

_MIB = 1 << 20
_SIZE_UNITS = {"K": 1 << 10, "M": _MIB, "G": 1 << 30}


def _last_level_cache_bytes() -> int | None:
    """Size of the largest CPU cache instance CPU 0 uses (Linux sysfs), or None where it cannot be read."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        if text and text[-1] in _SIZE_UNITS and text[:-1].isdigit():
            sizes.append(int(text[:-1]) * _SIZE_UNITS[text[-1]])
        elif text.isdigit():
            sizes.append(int(text))
    return max(sizes) if sizes else None


FLUSH_CAP = 128 * _MIB
"""The most a flush reads. The flush was designed and checked (docs/performance.md, "Probe /2") at 64 MiB, twice a
32 MiB cache. A virtual machine may report its host's whole last-level cache (480 MiB on the 2-core CI box in
November 2026, the host's cache as the VM shows it): twice that, capped at 512 MiB as it was, cost
every CPU cell 0.2-1.4 s to allocate (the kernel compacting memory for huge pages) and 35-70 ms a probe to read,
up to a probe a step, against a probe's 0.25-0.36 ms of timed work. 128 MiB is a bit more than the largest cache
a core of a current server part shares with its neighbours (96 MiB), and reads in ~8 ms; on that box the drill
moves the probe after it by +0.75 % (docs/performance.md)."""


def flush_bytes(last_level_cache: int | None) -> int:
    """Bytes read before every probe: twice the last-level cache (64 MiB where it cannot be read), within
    16 MiB-FLUSH_CAP."""
    return min(max(2 * (last_level_cache or 32 * _MIB), 16 * _MIB), FLUSH_CAP)


FLUSH_BYTES = flush_bytes(_last_level_cache_bytes())

PROBE_KIND = (f"flush-{FLUSH_BYTES // _MIB}MiB+sha256-256KiB+fma-3x64KiB/2 numpy {np.__version__}; "
              f"{ssl.OPENSSL_VERSION}")
"""What the probe computes and the libraries that compute it: comparisons adjust only between rows with
the same kind, so an A/B of two environments with another numpy or OpenSSL, or two machines with other
caches, is compared unadjusted. Bump the /2 when _work or the flush changes."""

OVERHEAD = 0.01
"""Probe cost (flush included) per measured step as a fraction of the step's time, at most: it is not in
any step time or in window_s, but it still lengthens the job."""

MIN_PROBES = 30
"""Probe at least this often per window, overhead permitting: a median of fewer is itself noisy."""

_RNG = np.random.default_rng(20261122)
_BYTES = _RNG.integers(0, 256, 256 * 1024, dtype=np.uint8).tobytes()
_X = _RNG.standard_normal(16 * 1024, dtype=np.float32)
_Y = _RNG.standard_normal(16 * 1024, dtype=np.float32)
_Z = np.empty_like(_X)


def _work() -> None:
    # Two kinds of core work, both sized to stay in L2 and both single-threaded: integer hashing
    # (stdlib/OpenSSL) and float multiply-adds over arrays (numpy's own loops). Not a BLAS call: numpy's
    # OpenBLAS keeps a second thread spinning after a matmul, which would load the other core.
    hashlib.sha256(_BYTES).digest()
    for _ in range(8):
        np.multiply(_X, _Y, out=_Z)
        np.add(_Z, _X, out=_Z)


@cache
def _flush_buffer() -> np.ndarray:
    # Written, not np.zeros: pages of a calloc'd buffer that were never written all map the kernel's one
    # zero page, and reading them would flush nothing.
    return np.ones(FLUSH_BYTES // 4, dtype=np.float32)


def run_once() -> tuple[float, float]:
    """Run one probe now: (seconds its timed computation took, seconds it cost in all, flush included)."""
    t0 = time.perf_counter()
    _flush_buffer().sum()  # numpy's own reduction, one thread; the result is not needed
    t1 = time.perf_counter()
    _work()
    t2 = time.perf_counter()
    return t2 - t1, t2 - t0


def probe_every(step_s: float, probe_s: float, measure_steps: int) -> int:
    """Probe after every k-th step: as often as OVERHEAD allows, and no more often than needed for
    MIN_PROBES in the window (every step when the window is short)."""
    if not (step_s > 0 and probe_s > 0):
        return 1
    return max(1, min(math.ceil(probe_s / (OVERHEAD * step_s)), measure_steps // MIN_PROBES))


class SpeedProbe:
    """Probe times of one window, in preallocated storage: `after_step(i)` runs and times the probe when i
    is a multiple of `every`; read `total_s` and `summary()` after the window."""

    __slots__ = ("every", "_times", "_costs")

    def __init__(self, num_steps: int, every: int):
        if every < 1:
            raise ValueError(f"every={every}: must be >= 1")
        self.every = every
        self._times = np.full(num_steps, np.nan)
        self._costs = np.full(num_steps, np.nan)
        _flush_buffer()  # allocated and written now, not in the first probe

    def after_step(self, i: int) -> None:
        if i % self.every == 0:
            self._times[i], self._costs[i] = run_once()

    @property
    def per_step(self) -> np.ndarray:
        """Probe seconds after each step, NaN where none ran."""
        return self._times

    @property
    def total_s(self) -> float:
        """Seconds all probes of the window took, flushes included: what the window's wall time loses."""
        return float(np.nansum(self._costs))

    def summary(self) -> dict[str, object]:
        """The row's probe columns. The median, not the mean: one probe preempted by the host would move a mean."""
        done = self._times[~np.isnan(self._times)]
        return {col.speed_probe_kind: PROBE_KIND, col.speed_probe_s: float(np.median(done)) if done.size else None,
                col.speed_probe_count: int(done.size), col.speed_probe_every: self.every,
                col.speed_probe_total_s: self.total_s}
