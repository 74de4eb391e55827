"""Telemetry, MFU and the environment fingerprint in a real run: on this machine (no NVML, no GPU) every
telemetry column is null and nothing fails, FLOPs are counted, MFU is null with a warning in the log, and
the manifest and rows carry the fingerprint. The row mapping of NVML summaries runs on known samples."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from harness.cell.instruments.telemetry import TelemetrySample, summarize
from harness.cell.metrics import telemetry_columns
from harness.results.env import collect_env, env_key

TELEMETRY = ("power_avg_w", "energy_j", "img_per_joule", "gpu_util_avg_pct", "sm_clock_avg_mhz",
             "mem_clock_avg_mhz", "gpu_mem_used_peak_bytes", "is_throttled", "throttle_reasons")


def test_cpu_run_has_null_telemetry_flops_and_the_fingerprint(shared_cpu_run):
    out = shared_cpu_run
    (row,) = [r for r in pq.read_table(out / "cells").to_pylist() if r["status"] == "ok"]
    assert {k: row[k] for k in TELEMETRY} == dict.fromkeys(TELEMETRY)
    assert row["num_telemetry_samples"] == 0
    # resnet18 at 16 px: about 92 MFLOP per training image; MFU needs a GPU peak.
    assert row["flops_per_image"] == pytest.approx(92.1e6, rel=0.01)
    assert row["achieved_tflops"] == pytest.approx(row["flops_per_image"] * row["throughput_img_per_s"] / 1e12)
    assert row["mfu_pct"] is None and row["mfu_peak_tflops"] is None
    assert "warning: mfu_pct is null: no peak TFLOP/s known for device 'cpu'" in (out / row["log_path"]).read_text()
    assert row["profile_tool"] is None
    environment = json.loads((out / "manifest.json").read_text())["environment"]
    # the fingerprint describes the machine (a GPU box stays "cuda"); the row says where the cell trained
    assert environment["device_kind"] == collect_env()["device_kind"] and environment["torch_version"]
    assert row["device"] == "cpu"
    assert row["env_key"] == env_key(environment)


def test_a_summary_becomes_the_row_columns():
    samples = [TelemetrySample(t_s=i / 10, gpu_util_pct=u, mem_used_bytes=m, power_w=p, sm_clock_mhz=1980,
                               mem_clock_mhz=2619, throttle_mask=mask)
               for i, (u, m, p, mask) in enumerate([(90, 10, 600.0, 0x0), (100, 30, 700.0, 0x4 | 0x1)])]
    ctx = SimpleNamespace(is_distributed=False, world_size=1)
    cols = telemetry_columns(ctx, summarize(samples, energy_j=130.0), images=2600)
    assert cols == {
        "power_avg_w": 650.0, "energy_j": 130.0, "img_per_joule": 20.0, "gpu_util_avg_pct": 95.0,
        "sm_clock_avg_mhz": 1980.0, "mem_clock_avg_mhz": 2619.0, "gpu_mem_used_peak_bytes": 30,
        "is_throttled": True, "throttle_reasons": "gpu_idle,sw_power_cap", "num_telemetry_samples": 2,
        "gpu_shared": None, "gpu_foreign_pids": None,  # no foreign-process watch in this summary
    }
    watched = telemetry_columns(ctx, summarize(samples, energy_j=130.0), images=2600, foreign=(4243, 4242))
    assert (watched["gpu_shared"], watched["gpu_foreign_pids"]) == (True, [4242, 4243])  # integers, never joined
    alone = telemetry_columns(ctx, summarize(samples, energy_j=130.0), images=2600, foreign=())
    assert (alone["gpu_shared"], alone["gpu_foreign_pids"]) == (False, [])
    nothing = telemetry_columns(ctx, summarize([], energy_j=None), images=2600)
    assert nothing == dict.fromkeys(cols) | {"num_telemetry_samples": 0}
