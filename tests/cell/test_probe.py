"""The machine-speed probe: how often it runs, what it records, and that it stays on one core."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from harness.cell.instruments import probe


@pytest.mark.parametrize(("step_s", "probe_s", "steps", "every"), [
    (0.080, 0.0004, 300, 1),   # a slow CPU step: 0.5 % overhead at every step
    (0.004, 0.0004, 300, 10),  # 10 % of a fast step: every 10th step keeps it at 1 %
    (0.001, 0.0004, 300, 10),  # 40 steps would be 1 %, but then fewer than MIN_PROBES: every 300 // 30
    (0.001, 0.0004, 20, 1),    # a short window probes every step whatever it costs
    (0.0, 0.0004, 300, 1),     # no warmup timing: every step
])
def test_probe_every_keeps_overhead_and_count(step_s, probe_s, steps, every):
    assert probe.probe_every(step_s, probe_s, steps) == every


@pytest.mark.parametrize("steps", [1, 3, 30, 2 * probe.MIN_PROBES - 1])
def test_a_window_under_two_minimum_counts_probes_every_step_whatever_a_probe_costs(steps):
    """Why the cell does not time probes before such a window (harness/cell/measure.py: _speed_probe)."""
    assert {probe.probe_every(step_s, probe_s, steps) for step_s in (0.0, 1e-4, 0.08, 5.0)
            for probe_s in (1e-5, 4e-4, 0.5)} == {1}


def test_speed_probe_times_every_kth_step_and_sums_what_it_took():
    p = probe.SpeedProbe(10, every=3)
    for i in range(10):
        p.after_step(i)
    done = ~np.isnan(p.per_step)
    assert list(np.flatnonzero(done)) == [0, 3, 6, 9]
    # the window loses what the probes cost, flushes included, more than their timed part
    assert p.total_s > float(p.per_step[done].sum()) > 0
    summary = p.summary()
    assert summary["speed_probe_kind"] == probe.PROBE_KIND and summary["speed_probe_count"] == 4
    assert summary["speed_probe_s"] == pytest.approx(float(np.median(p.per_step[done])), rel=1e-12)
    assert summary["speed_probe_every"] == 3
    with pytest.raises(ValueError, match="every=0"):
        probe.SpeedProbe(10, every=0)


def test_probe_is_short_and_uses_one_core():
    # numpy's BLAS would leave a second thread spinning after a matmul: the probe must not load the other core
    start_cpu, start = time.process_time(), time.perf_counter()
    runs = [probe.run_once() for _ in range(100)]
    cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start
    assert all(0 < timed < cost and math.isfinite(cost) for timed, cost in runs)
    assert cpu < 1.3 * wall + 0.05, f"probe used {cpu / wall:.2f} cores"


def test_flush_buffer_is_real_memory_larger_than_the_caches():
    # a never-written buffer maps the zero page: reading it would flush nothing
    buf = probe._flush_buffer()
    assert buf.nbytes == probe.FLUSH_BYTES and float(buf[:: 1 << 14].min()) == 1.0
    llc = probe._last_level_cache_bytes()
    if llc is not None:
        assert probe.FLUSH_BYTES == min(max(2 * llc, 16 << 20), 128 << 20)
    assert f"flush-{probe.FLUSH_BYTES >> 20}MiB" in probe.PROBE_KIND


def test_the_flush_reads_twice_the_cache_within_16_to_128_mib():
    assert probe.flush_bytes(32 << 20) == 64 << 20 and probe.flush_bytes(None) == 64 << 20
    assert probe.flush_bytes(2 << 20) == 16 << 20
    # a VM that reports its host's whole cache (480 MiB on the CI box): not a gigabyte a probe
    assert probe.flush_bytes(480 << 20) == 128 << 20
