"""harness.cell.instruments.flops: the FLOP count of a training step against the textbook ResNet-50 figure, the peak table
and its name matching, and MFU arithmetic on known numbers."""

from __future__ import annotations

import pytest
import torch

from harness.cell.instruments.flops import (
    GPU_PATTERNS,
    PEAK_TFLOPS,
    Peak,
    gpu_model,
    mfu_columns,
    peak_tflops,
    training_flops_per_image,
)

RESNET50_GMAC = 4.1  # multiply-adds of one 224x224 forward (He et al.; torchvision lists 4.09)


def test_resnet50_training_flops_are_three_forwards_of_2x4_1_gmac():
    rng = torch.random.get_rng_state()
    flops = training_flops_per_image("resnet50", num_classes=1000, image_size=224)
    # 2 FLOPs per multiply-add, backward ~ 2x forward: 3 x 8.2 GFLOP. The first convolution computes
    # no input gradient (images need none), so the count sits a little under the full 3x.
    assert flops == pytest.approx(3 * 2 * RESNET50_GMAC * 1e9, rel=0.03)
    assert 24.0e9 < flops < 3 * 8.18e9
    assert torch.equal(torch.random.get_rng_state(), rng)  # the meta build draws no random numbers


def test_count_is_per_image_and_scales_with_pixels():
    small = training_flops_per_image("resnet18", num_classes=10, image_size=64)
    assert training_flops_per_image("resnet18", num_classes=10, image_size=64, batch_size=8) == \
        pytest.approx(small)
    assert training_flops_per_image("resnet18", num_classes=10, image_size=128) == pytest.approx(4 * small, rel=0.01)


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
    ("NVIDIA L40S", "L40S"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
    ("NVIDIA GH200 480GB", None),
    ("NVIDIA L40", None),
    ("cpu", None),
    (None, None),
])
def test_device_names_map_to_table_entries(name, key):
    assert gpu_model(name) == key


def test_the_table_covers_every_precision_and_every_pattern_has_an_entry():
    assert {key for _, key in GPU_PATTERNS} == set(PEAK_TFLOPS)
    for key, peaks in PEAK_TFLOPS.items():
        assert set(peaks) == {"fp32", "tf32", "fp16", "bf16"}, key
        assert peaks["fp16"] > peaks["fp32"] > 0, key


def test_peak_follows_the_math_the_cell_runs():
    h100 = "NVIDIA H100 80GB HBM3"
    assert peak_tflops(h100, "fp32", tf32_allowed=True).tflops == 494.5
    assert peak_tflops(h100, "fp32", tf32_allowed=False).tflops == 67.0
    assert peak_tflops(h100, "bf16", tf32_allowed=True).tflops == 989.5
    assert peak_tflops("Tesla V100-SXM2-16GB", "fp32", tf32_allowed=True).tflops == 15.7  # no TF32 on Volta
    v100_bf16 = peak_tflops("Tesla V100-SXM2-16GB", "bf16", tf32_allowed=True)
    assert v100_bf16.tflops is None and "no bf16 Tensor Cores" in v100_bf16.why_none
    cpu = peak_tflops("cpu", "fp32", tf32_allowed=False)
    assert cpu.tflops is None and "no peak TFLOP/s known for device 'cpu'" in cpu.why_none


def test_mfu_arithmetic():
    cols = mfu_columns(flops_per_image=24e9, throughput_img_per_s=8000.0, throughput_per_process_img_per_s=1000.0,
                       peak=Peak(100.0))
    assert cols == pytest.approx({"flops_per_image": 24e9, "achieved_tflops": 192.0, "mfu_peak_tflops": 100.0,
                                  "mfu_pct": 24.0})
    unknown = mfu_columns(flops_per_image=24e9, throughput_img_per_s=10.0, throughput_per_process_img_per_s=10.0,
                          peak=Peak(None, "cpu"))
    assert unknown["mfu_pct"] is None and unknown["achieved_tflops"] == pytest.approx(24e9 * 10 / 1e12)
