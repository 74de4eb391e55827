"""What slots are cut from, read from the system: the cores this process may use with their hyperthread
siblings (/sys), and the visible GPUs through NVML, each found by its UUID, with the cores NVML places near it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.orchestrate.placement.slots import Gpu, Machine
from harness.results.env import call_or_none, load_nvml, visible_gpu_handles
from harness.matrix.job import parse_cpu_list

_SYS_CPU = Path("/sys/devices/system/cpu")
_ULONG_BITS = 64
"""NVML returns a CPU set as an array of unsigned longs (64 bits each on the 64-bit Linux nvbench runs on)."""


def probe_machine(device: str, *, environ: Mapping[str, str] | None = None, nvml: Any | None = None,
                  sys_cpu: Path = _SYS_CPU) -> Machine:
    """This machine as slots see it; GPUs only for CUDA runs (a CPU run's slots are cores alone)."""
    cpus = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else \
        tuple(range(os.cpu_count() or 1))
    gpus = visible_gpus(nvml if nvml is not None else load_nvml(), environ) if device == "cuda" else ()
    return Machine(cpus=cpus, siblings=sibling_groups(cpus, sys_cpu), gpus=gpus)


def sibling_groups(cpus: tuple[int, ...], sys_cpu: Path = _SYS_CPU) -> tuple[tuple[int, ...], ...]:
    """The hyperthread siblings of each CPU in `cpus` (thread_siblings_list), one group per physical core."""
    groups = set()
    for cpu in cpus:
        text = call_or_none((sys_cpu / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text)
        siblings = call_or_none(parse_cpu_list, text) if text else None
        groups.add(tuple(siblings) if siblings else (cpu,))
    return tuple(sorted(groups))


def visible_gpus(nvml: Any | None, environ: Mapping[str, str] | None = None) -> tuple[Gpu, ...]:
    """The GPUs this process's CUDA sees, in CUDA order, with NVML's facts; () without NVML."""
    if nvml is None:
        return ()
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - pynvml's errors are its own classes; any of them means no GPU facts
        return ()
    try:
        handles = call_or_none(visible_gpu_handles, nvml, environ) or []
        return tuple(_gpu(nvml, handle, i) for i, handle in enumerate(handles))
    finally:
        call_or_none(nvml.nvmlShutdown)


def _gpu(nvml: Any, handle: Any, ordinal: int) -> Gpu:
    index = call_or_none(nvml.nvmlDeviceGetIndex, handle)
    pci = call_or_none(lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId))
    return Gpu(index=ordinal if index is None else int(index), uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
               pci_bus_id=pci, cpus=call_or_none(near_cpus, nvml, handle))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)  # older pynvml releases return bytes


def near_cpus(nvml: Any, handle: Any) -> tuple[int, ...] | None:
    """NVML's ideal CPU affinity of the GPU as CPU ids; None when it says nothing."""
    words = max(1, -(-(os.cpu_count() or 1) // _ULONG_BITS))
    mask = nvml.nvmlDeviceGetCpuAffinity(handle, words)
    cpus = tuple(w * _ULONG_BITS + bit for w, value in enumerate(mask) for bit in range(_ULONG_BITS)
                 if int(value) >> bit & 1)
    return cpus or None
