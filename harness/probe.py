"""The machine-speed probe of CPU cells: a fixed reference computation timed between measured steps.

On a shared or virtual CPU host the speed of a core wanders by several per cent over tens of seconds
(other tenants' cache and memory traffic; on the 2-core CI box a 300-step window of resnet18 varies by
~5 % within one process, and two processes on the two vCPUs barely vary together: docs/performance.md).
That wander is most of the repeat-to-repeat noise, and it does not average out between a baseline night
and tonight. The probe measures it: after every `every`-th measured step the worker times a fixed
computation (`_work`: no torch, nothing from the code under test), and the row records the median.
Within a process it follows the step time closely; across processes how much of the spread it explains
changes by the hour (correlation with throughput -0.7 to -0.9 over one detector collection, leaving
2-3 % of a 4-7 % spread; far less in another hour: docs/performance.md). `nvbench report --speed-adjust` compares at
equal probe time (stats.ancova_fit). That is experimental, not the default: it is only sound if the
change under test cannot move the probe, and the detector's fire drill, which runs right before it, did
(10 % of extra work made the probe 2.7 % slower).

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

import numpy as np

PROBE_KIND = f"sha256-256KiB+fma-3x64KiB/1 numpy {np.__version__}; {ssl.OPENSSL_VERSION}"
"""What the probe computes and the libraries that compute it: comparisons adjust only between rows with
the same kind, so an A/B of two environments with another numpy or OpenSSL is compared unadjusted. Bump
the /1 when _work changes."""

OVERHEAD = 0.01
"""Probe time per measured step as a fraction of the step's time, at most (the probe's own time is not
measured, but it still lengthens the job and touches the caches)."""

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


def time_once() -> float:
    """Seconds one probe takes, now."""
    t0 = time.perf_counter()
    _work()
    return time.perf_counter() - t0


def probe_every(step_s: float, probe_s: float, measure_steps: int) -> int:
    """Probe after every k-th step: as often as OVERHEAD allows, and no more often than needed for
    MIN_PROBES in the window (every step when the window is short)."""
    if not (step_s > 0 and probe_s > 0):
        return 1
    return max(1, min(math.ceil(probe_s / (OVERHEAD * step_s)), measure_steps // MIN_PROBES))


class SpeedProbe:
    """Probe times of one window, in preallocated storage: `after_step(i)` runs and times the probe when i
    is a multiple of `every`; read `total_s` and `summary()` after the window."""

    __slots__ = ("every", "_times")

    def __init__(self, num_steps: int, every: int):
        if every < 1:
            raise ValueError(f"every={every}: must be >= 1")
        self.every = every
        self._times = np.full(num_steps, np.nan)

    def after_step(self, i: int) -> None:
        if i % self.every == 0:
            self._times[i] = time_once()

    @property
    def per_step(self) -> np.ndarray:
        """Probe seconds after each step, NaN where none ran."""
        return self._times

    @property
    def total_s(self) -> float:
        """Seconds all probes of the window took."""
        return float(np.nansum(self._times))

    def summary(self) -> dict[str, object]:
        """The row's probe columns. The median, not the mean: one probe preempted by the host would move a mean."""
        done = self._times[~np.isnan(self._times)]
        return {"speed_probe_kind": PROBE_KIND, "speed_probe_s": float(np.median(done)) if done.size else None,
                "speed_probe_count": int(done.size), "speed_probe_every": self.every,
                "speed_probe_total_s": self.total_s}
