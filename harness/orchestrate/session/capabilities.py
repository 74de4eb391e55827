"""What this machine offers cells (device, GPUs, cores), probed once per session, and which cells it cannot run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.results.env import usable_cpu_count
from harness.matrix.cells import Cell


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What this machine offers cells; probed once per runner session."""

    device: str
    """cuda or cpu: where cells train."""
    gpu_count: int
    cpu_count: int
    device_name: str | None
    reason: str | None = None
    """Why the requested device is not available (every cell is then skipped with it)."""


def probe_capabilities(requested: str, env: dict[str, Any]) -> Capabilities:
    """From the environment fingerprint (NVML-based): the parent never initialises CUDA itself."""
    gpus = int(env.get("gpu_count") or 0) if env.get("device_kind") == "cuda" else 0
    cpus = usable_cpu_count()
    if requested == "cpu" or (requested == "auto" and gpus == 0):
        return Capabilities(device="cpu", gpu_count=gpus, cpu_count=cpus, device_name=env.get("cpu_model"))
    reason = None if gpus else "run.device = 'cuda' but no CUDA device is visible on this machine"
    return Capabilities(device="cuda", gpu_count=gpus, cpu_count=cpus, device_name=env.get("gpu_name"),
                        reason=reason)


def skip_reason(cell: Cell, caps: Capabilities) -> str | None:
    """Why this machine cannot run the cell, decided without launching anything heavy."""
    from harness.data import unavailable_reason

    if caps.reason:
        return caps.reason
    reason = unavailable_reason(cell.backend, caps.device)
    if reason:
        return reason
    if cell.compile == "cudagraph" and caps.device != "cuda":
        return "compile = cudagraph captures the step as a CUDA graph; this run trains on the CPU"
    if cell.compile == "cudagraph" and cell.world_size * cell.launch.nnodes > 1:
        return "compile = cudagraph captures one process's step; DDP groups (world_size > 1) are not captured"
    if caps.device == "cuda" and cell.world_size > caps.gpu_count:
        return (f"world_size {cell.world_size} needs {cell.world_size} GPUs on this node; "
                f"{caps.gpu_count} visible")
    if caps.device == "cpu" and cell.world_size > caps.cpu_count:
        return (f"world_size {cell.world_size} exceeds the {caps.cpu_count} CPU cores of this machine "
                "(without CUDA each rank is a gloo process on its own core)")
    return None
