"""The harness's own micro-costs as pytest-benchmark benchmarks: what one NVTX range, one step-clock mark pair,
one data-wait mark pair and one atomic row write cost. Not in the default suite (pytest's testpaths is tests/):

    python -m pytest benchmarks/test_micro.py --benchmark-only --benchmark-autosave --benchmark-storage reports/micro
    python -m pytest benchmarks/test_micro.py --benchmark-only --benchmark-storage reports/micro \
        --benchmark-compare --benchmark-compare-fail=median:50%      # tonight against the last saved run

On a machine without CUDA the clocks are the CPU path (perf_counter); on a GPU the same benchmarks time
CUDA event records (`--device cuda`, below)."""

from __future__ import annotations

import pytest
import torch

from harness.cell.instruments.timing import RANGE_NAMES, StepClock, make_ranges
from harness.results import store
from harness.results.schema import cell_table

STEPS = 1000


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("enabled", [False, True], ids=["nvtx-off", "nvtx-on"])
def test_nvtx_range(benchmark, enabled):
    ranges = make_ranges(enabled)
    name = RANGE_NAMES[0]

    def one_range():
        with ranges(name):
            pass

    benchmark(one_range)


def test_step_clock_marks(benchmark):
    clock = StepClock(STEPS, _device())
    state = {"i": 0}

    def one_step():
        i = state["i"] = (state["i"] + 1) % STEPS
        clock.begin(i)
        clock.end(i)

    benchmark(one_step)


def test_data_wait_event_pair(benchmark):
    clock = StepClock(STEPS, _device())
    state = {"i": 0}

    def one_fetch():
        i = state["i"] = (state["i"] + 1) % STEPS
        clock.fetch_begin(i, 0)
        clock.fetch_end(i, 0)

    benchmark(one_fetch)


def test_atomic_row_write(benchmark, tmp_path):
    row = {"run_id": "micro", "cell_id": "synthetic_nchw_fp32_ws1_ga1_x", "repeat": 0, "status": "ok", "reason": "",
           "throughput_img_per_s": 1000.0}
    table = cell_table([row])
    benchmark(store.write_table, tmp_path / "cells" / "row.parquet", table)
