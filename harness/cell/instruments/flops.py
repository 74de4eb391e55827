"""Model FLOPs utilisation: the FLOPs of one training image (counted once per cell on the meta device by
harness.models.flops, the registry's counter) and the dense peak TFLOP/s of each GPU model and precision, from
the vendor datasheets.

FLOPs count a multiply-add as 2, as the datasheet peaks do (torch.utils.flop_counter). Only matrix
multiplications and convolutions are counted (forward and backward); normalisation, activations, the
loss and the optimizer are not, which is the usual MFU convention.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import torch

from harness.models import build_model
from harness.models.flops import count_flops
from harness.catalogue import col

# Dense peaks (no structured sparsity) in TFLOP/s. Datasheets print sparse figures with an asterisk:
# the dense figure is half of it. fp32 is the CUDA-core (non-tensor) rate; tf32, fp16 and bf16 are
# Tensor Core rates (fp16 with fp32 accumulate, what autocast uses). None: the GPU has no such unit.
PEAK_TFLOPS: dict[str, dict[str, float | None]] = {
    # NVIDIA A100 Tensor Core GPU datasheet (A100 40GB/80GB, SXM and PCIe columns list the same peaks):
    # https://www.nvidia.com/en-us/data-center/a100/ — FP32 19.5, TF32 156 (312*), BF16 312 (624*),
    # FP16 312 (624*).
    "A100 SXM": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
    "A100 PCIe": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
    # NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/ —
    # H100 SXM: FP32 67, TF32 989*, BF16 1,979*, FP16 1,979*.
    "H100 SXM": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    # Same datasheet, H100 PCIe: FP32 51, TF32 756*, BF16 1,513*, FP16 1,513*.
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5},
    # Same datasheet, H100 NVL: FP32 60, TF32 835*, BF16 1,671*, FP16 1,671*.
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
    # NVIDIA H200 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h200/ —
    # H200 SXM: FP32 67, TF32 989*, BF16 1,979*, FP16 1,979* (the H100 SXM compute with more memory).
    "H200": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    # Same datasheet, H200 NVL: FP32 60, TF32 835*, BF16 1,671*, FP16 1,671*.
    "H200 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
    # NVIDIA L40S datasheet, https://www.nvidia.com/en-us/data-center/l40s/ — FP32 91.6,
    # TF32 183 (366*), BF16 362.05 (733*), FP16 362.05 (733*).
    "L40S": {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05},
    # NVIDIA V100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/v100/ —
    # V100 SXM2: FP32 15.7, Tensor (FP16) 125. Volta has no TF32 or BF16 Tensor Cores.
    "V100 SXM2": {"fp32": 15.7, "tf32": None, "bf16": None, "fp16": 125.0},
    # Same datasheet, V100 PCIe: FP32 14, Tensor 112; V100S PCIe: FP32 16.4, Tensor 130.
    "V100 PCIe": {"fp32": 14.0, "tf32": None, "bf16": None, "fp16": 112.0},
    "V100S PCIe": {"fp32": 16.4, "tf32": None, "bf16": None, "fp16": 130.0},
}

# Device names (NVML / torch.cuda.get_device_name, e.g. "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
# "Tesla V100-PCIE-32GB") -> PEAK_TFLOPS key; first match wins, so variants come before their family.
# Word boundaries keep "GH200" (a Grace Hopper superchip, not in the table) from matching H200.
GPU_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bH100\b.*\bNVL\b", "H100 NVL"),
    (r"\bH100\b.*\bPCIe\b", "H100 PCIe"),
    (r"\bH100\b", "H100 SXM"),
    (r"\bH200\b.*\bNVL\b", "H200 NVL"),
    (r"\bH200\b", "H200"),
    (r"\bA100\b.*\bPCIe\b", "A100 PCIe"),
    (r"\bA100\b", "A100 SXM"),
    (r"\bL40S\b", "L40S"),
    (r"\bV100S\b", "V100S PCIe"),
    (r"\bV100\b.*\bPCIe\b", "V100 PCIe"),
    (r"\bV100\b", "V100 SXM2"),
)


def gpu_model(device_name: str | None) -> str | None:
    """The PEAK_TFLOPS key of a device name, or None when the GPU (or a CPU) is not in the table."""
    for pattern, key in GPU_PATTERNS:
        if device_name and re.search(pattern, device_name, flags=re.IGNORECASE):
            return key
    return None


def math_precision(precision: str, *, tf32_allowed: bool) -> str:
    """Which peak applies: fp16 / bf16 autocast use those Tensor Cores; fp32 runs as TF32 when allowed."""
    if precision in ("fp16", "bf16"):
        return precision
    return "tf32" if tf32_allowed else "fp32"


@dataclass(frozen=True, slots=True)
class Peak:
    tflops: float | None
    """Dense peak of one GPU, None when unknown."""
    why_none: str | None = None
    """Why tflops is None (for the cell's log)."""


def peak_tflops(device_name: str | None, precision: str, *, tf32_allowed: bool) -> Peak:
    """Dense peak of one `device_name` GPU for a cell of `precision`."""
    key = gpu_model(device_name)
    math = math_precision(precision, tf32_allowed=tf32_allowed)
    if key is None:
        return Peak(None, f"no peak TFLOP/s known for device {device_name!r} (see harness/cell/instruments/flops.py)")
    peaks = PEAK_TFLOPS[key]
    if math == "tf32" and peaks["tf32"] is None:
        math = "fp32"  # no TF32 units (Volta): fp32 matmuls run on the CUDA cores
    value = peaks.get(math)
    if value is None:
        return Peak(None, f"{key} has no {math} Tensor Cores; no peak to compare with")
    return Peak(value)


def training_flops_per_image(model: str, *, num_classes: int, image_size: int, batch_size: int = 2,
                             builder: Callable[..., torch.nn.Module] = build_model) -> float:
    """FLOPs of forward + backward of one image of a training step: harness.models.flops.count_flops, the
    counter the registry's figures come from (see there for how it counts)."""
    return count_flops(model, num_classes=num_classes, image_size=image_size, training=True,
                       batch_size=batch_size, builder=builder)


def mfu_columns(*, flops_per_image: float | None, throughput_img_per_s: float,
                throughput_per_process_img_per_s: float, peak: Peak) -> dict[str, float | None]:
    """flops_per_image, achieved_tflops (all processes), mfu_peak_tflops and mfu_pct (per process)."""
    if flops_per_image is None:
        return {col.flops_per_image: None, col.achieved_tflops: None, col.mfu_peak_tflops: peak.tflops,
                col.mfu_pct: None}
    per_process = flops_per_image * throughput_per_process_img_per_s / 1e12
    return {
        col.flops_per_image: flops_per_image,
        col.achieved_tflops: flops_per_image * throughput_img_per_s / 1e12,
        col.mfu_peak_tflops: peak.tflops,
        col.mfu_pct: 100 * per_process / peak.tflops if peak.tflops else None,
    }
