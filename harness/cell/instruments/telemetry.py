"""NVML sampling during a measured window: a daemon thread polls one GPU's utilisation, memory,
power, clocks and clock-event (throttle) reasons; energy comes from the driver's cumulative counter.

Touches neither CUDA nor torch. Without NVML (no driver, no pynvml, no device) start/stop still work,
no thread is started, and every measured column is None.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, NamedTuple, Sequence

from harness.results.env import call_or_none, load_nvml, visible_gpu_handles
from harness.catalogue import col

# NVML clock-event reason bits (nvmlClocksEventReason* / nvmlClocksThrottleReason*), lowest first.
THROTTLE_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
BENIGN_THROTTLE_MASK = 0x001 | 0x002
"""Reasons that are not a slowdown of busy work: an idle GPU, or clocks pinned on purpose."""

# Stop waits this long for an NVML call stuck in the sampling thread, then gives up on it.
_JOIN_TIMEOUT_S = 5.0
PROCESS_READ_EVERY = 10
"""The GPU's compute processes are read at the first poll and every this many polls after (~1 s)."""
# Newest name first: the throttle spelling is deprecated and goes away with CUDA 14.
_REASON_GETTERS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


class TelemetrySample(NamedTuple):
    """One NVML poll; a field is None when that query is unsupported or failed."""

    t_s: float
    """Seconds since start(), monotonic."""
    gpu_util_pct: int | None
    """Share of the driver's last sample period in which a kernel ran (not SM occupancy)."""
    mem_used_bytes: int | None
    """Device memory in use by every process, not only this one's allocator."""
    power_w: float | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    throttle_mask: int | None
    """Clock-event reason bits, see THROTTLE_REASON_BITS."""


def throttle_reason_names(mask: int) -> tuple[str, ...]:
    """Names of the bits set in `mask`, lowest bit first; unknown bits as "bit_0x800"."""
    names = [name for bit, name in THROTTLE_REASON_BITS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASON_BITS:
        known |= bit
    unknown = mask & ~known
    names += [f"bit_{1 << i:#x}" for i in range(unknown.bit_length()) if unknown >> i & 1]
    return tuple(names)


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetrySummary:
    """What one window's samples amount to; every measured field is None when NVML was unavailable."""

    power_avg_w: float | None = None
    """Mean of the power samples."""
    energy_j: float | None = None
    """Driver energy counter at stop minus at start."""
    gpu_util_avg_pct: float | None = None
    mem_used_peak_bytes: int | None = None
    sm_clock_avg_mhz: float | None = None
    mem_clock_avg_mhz: float | None = None
    is_throttled: bool | None = None
    """Some sample carried a reason outside BENIGN_THROTTLE_MASK."""
    throttle_reasons: tuple[str, ...] | None = None
    """Every reason seen in any sample, benign ones included (gpu_idle hints at an input-bound loop)."""
    num_samples: int = 0
    samples: tuple[TelemetrySample, ...] = field(default=(), repr=False)
    """The raw polls, for plotting; not part of as_row."""

    def as_row(self, images: int | None) -> dict[str, object]:
        """Flat columns for the result record, plus img_per_joule for `images` processed in the window."""
        row: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "samples"}
        if self.throttle_reasons is not None:
            row[col.throttle_reasons] = ",".join(self.throttle_reasons)
        has_energy = images is not None and self.energy_j is not None and self.energy_j > 0
        row[col.img_per_joule] = images / self.energy_j if has_energy else None
        return row


def foreign_pids(listed: Sequence[int], own_pid: int, group_of: Callable[[int], int | None]) -> tuple[int, ...]:
    """The processes on this process's GPU that belong to no rank of its job (optimum-benchmark's device
    isolation, as a record rather than an abort). Where NVML lists this process (one pid namespace), a pid
    outside this process's group is foreign (`group_of`: a pid's process group, None when it cannot be seen:
    foreign too); where it does not (a container without the host's pids), any other process on the GPU
    means a neighbour, so every listed pid is named."""
    pids = sorted(set(listed))
    if own_pid in pids:
        mine = group_of(own_pid)
        return tuple(pid for pid in pids if pid != own_pid and group_of(pid) != mine)
    return tuple(pids) if len(pids) > 1 else ()


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def summarize(samples: Sequence[TelemetrySample], *, energy_j: float | None) -> TelemetrySummary:
    """Arithmetic means over equally spaced samples (None-valued readings skipped), peak memory,
    and the union of throttle reasons."""
    masks = [s.throttle_mask for s in samples if s.throttle_mask is not None]
    union = 0
    for mask in masks:
        union |= mask
    mem = [s.mem_used_bytes for s in samples if s.mem_used_bytes is not None]
    return TelemetrySummary(
        power_avg_w=_mean(s.power_w for s in samples),
        energy_j=energy_j,
        gpu_util_avg_pct=_mean(s.gpu_util_pct for s in samples),
        mem_used_peak_bytes=max(mem) if mem else None,
        sm_clock_avg_mhz=_mean(s.sm_clock_mhz for s in samples),
        mem_clock_avg_mhz=_mean(s.mem_clock_mhz for s in samples),
        is_throttled=any(m & ~BENIGN_THROTTLE_MASK for m in masks) if masks else None,
        throttle_reasons=throttle_reason_names(union) if masks else None,
        num_samples=len(samples),
        samples=tuple(samples),
    )


def _mean(values) -> float | None:
    present = [v for v in values if v is not None]
    return math.fsum(present) / len(present) if present else None


class TelemetrySampler:
    """Samples one GPU every `interval_s` between start() and stop().

    `device_index` is the CUDA ordinal as this process sees it (cuda:N), mapped to NVML through
    CUDA_VISIBLE_DEVICES; None disables sampling. `nvml` replaces pynvml (tests pass a fake);
    `clock` supplies monotonic seconds for sample timestamps. One sampler per window:

        with TelemetrySampler(0) as telemetry:
            run_window()
        row = telemetry.summary.as_row(images)
    """

    def __init__(
        self,
        device_index: int | None,
        *,
        interval_s: float = 0.1,
        nvml: Any | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"TelemetrySampler: interval_s must be > 0, got {interval_s}")
        if device_index is not None and device_index < 0:
            raise ValueError(f"TelemetrySampler: device_index must be >= 0 or None, got {device_index}")
        self._device_index = device_index
        self._interval_s = interval_s
        self._nvml = nvml
        self._clock = clock
        self._handle: Any | None = None
        self._read_reasons: Callable[[Any], int] | None = None
        self._energy_start_mj: int | None = None
        self._t0 = 0.0
        self._samples: list[TelemetrySample] = []
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._is_started = False
        self._summary: TelemetrySummary | None = None
        self._foreign: set[int] | None = None

    @property
    def summary(self) -> TelemetrySummary | None:
        """The result of stop(); None while running."""
        return self._summary

    @property
    def foreign_pids(self) -> tuple[int, ...] | None:
        """Processes of no rank of this job seen on the GPU while sampling; None when NVML could not list them."""
        return None if self._foreign is None else tuple(sorted(self._foreign))

    @property
    def samples(self) -> tuple[TelemetrySample, ...]:
        """Raw samples so far (safe to read while running)."""
        return tuple(self._samples)

    def start(self) -> TelemetrySampler:
        if self._is_started:
            raise RuntimeError("TelemetrySampler.start(): already started; use one sampler per window")
        self._is_started = True
        if not self._open():
            return self
        self._energy_start_mj = call_or_none(self._nvml.nvmlDeviceGetTotalEnergyConsumption, self._handle)
        self._t0 = self._clock()
        self._thread = threading.Thread(target=self._run, name="nvbench-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> TelemetrySummary:
        """Stop sampling and summarise; calling it again returns the same summary."""
        if not self._is_started:
            raise RuntimeError("TelemetrySampler.stop(): call start() first")
        if self._summary is not None:
            return self._summary
        energy_j = None
        if self._thread is not None:
            self._stop_event.set()
            self._thread.join(timeout=max(_JOIN_TIMEOUT_S, 2 * self._interval_s))
            energy_stop_mj = call_or_none(self._nvml.nvmlDeviceGetTotalEnergyConsumption, self._handle)
            energy_j = _energy_delta_j(self._energy_start_mj, energy_stop_mj)
            if not self._thread.is_alive():
                # A thread stuck inside NVML still holds the library; leave it initialised then.
                call_or_none(self._nvml.nvmlShutdown)
        self._summary = summarize(tuple(self._samples), energy_j=energy_j)
        return self._summary

    def __enter__(self) -> TelemetrySampler:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _open(self) -> bool:
        """Initialise NVML and find the device; False (and NVML left closed) when either fails."""
        if self._device_index is None:
            return False
        if self._nvml is None:
            self._nvml = load_nvml()
            if self._nvml is None:
                return False
        try:
            self._nvml.nvmlInit()
        except Exception:
            return False
        self._handle = call_or_none(lambda: visible_gpu_handles(self._nvml)[self._device_index])
        if self._handle is None:
            call_or_none(self._nvml.nvmlShutdown)
            return False
        self._read_reasons = self._reason_getter()
        return True

    def _reason_getter(self) -> Callable[[Any], int] | None:
        for name in _REASON_GETTERS:
            getter = getattr(self._nvml, name, None)
            if getter is not None and call_or_none(getter, self._handle) is not None:
                return getter
        return None

    def _run(self) -> None:
        # Event.wait blocks between polls and returns at once when stop() sets it.
        self._samples.append(self._read_sample())
        self._read_processes()
        while not self._stop_event.wait(self._interval_s):
            self._samples.append(self._read_sample())
            if len(self._samples) % PROCESS_READ_EVERY == 0:
                self._read_processes()

    def _read_processes(self) -> None:
        read = getattr(self._nvml, "nvmlDeviceGetComputeRunningProcesses", None)
        listed = call_or_none(read, self._handle) if read else None
        if listed is None:  # an NVML that cannot list them: whether the GPU was shared stays unknown
            return
        found = foreign_pids([int(p.pid) for p in listed], os.getpid(), process_group)
        self._foreign = (self._foreign or set()) | set(found)

    def _read_sample(self) -> TelemetrySample:
        nvml, h = self._nvml, self._handle
        t_s = self._clock() - self._t0
        return TelemetrySample(
            t_s=t_s,
            gpu_util_pct=call_or_none(lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
            mem_used_bytes=call_or_none(lambda: nvml.nvmlDeviceGetMemoryInfo(h).used),
            power_w=call_or_none(lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000),
            sm_clock_mhz=call_or_none(lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
            mem_clock_mhz=call_or_none(lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
            throttle_mask=call_or_none(self._read_reasons, h) if self._read_reasons else None,
        )


def _energy_delta_j(start_mj: int | None, stop_mj: int | None) -> float | None:
    # A negative delta means the counter was reset (driver reload): no energy figure rather than a wrong one.
    if start_mj is None or stop_mj is None or stop_mj < start_mj:
        return None
    return (stop_mj - start_mj) / 1000
