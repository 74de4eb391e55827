"""A foreign process on the job's GPU while its window runs (NVML's compute processes): named, whatever pid
namespace NVML reports in; the job's own processes never are."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

from test_telemetry import FakeNvml, run_window

from harness.cell.instruments.telemetry import foreign_pids, process_group


class Shared(FakeNvml):
    """The GPU also holds `others` (pids) beside this process."""

    def __init__(self, others, *, list_self=True, **kw):
        super().__init__(**kw)
        self.listed = ([os.getpid()] if list_self else []) + list(others)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=1 << 30) for pid in self.listed]


def test_a_process_outside_the_job_is_foreign_and_the_jobs_own_are_not(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # a process of another session (another job's cell, another user's training) and a rank of this job's group
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = run_window_sampler(Shared([stranger.pid, sibling.pid]))
        assert sampler.foreign_pids == (stranger.pid,)
        assert run_window_sampler(Shared([sibling.pid])).foreign_pids == ()
    finally:
        for proc in (stranger, sibling):
            proc.kill()
            proc.wait()
    assert run_window_sampler(FakeNvml()).foreign_pids is None  # NVML that cannot list processes: unknown


def run_window_sampler(nvml):
    from harness.cell.instruments.telemetry import TelemetrySampler

    sampler = TelemetrySampler(0, interval_s=0.005, nvml=nvml).start()
    assert nvml.polled.wait(10), "sampler never polled"
    sampler.stop()
    return sampler


def test_in_another_pid_namespace_any_second_process_means_a_neighbour():
    group = {10: 1, 11: 1, 99: 2}.get
    assert foreign_pids([10, 11, 99], own_pid=10, group_of=group) == (99,)
    assert foreign_pids([5001, 5002], own_pid=10, group_of=group) == (5001, 5002)  # NVML's pids are the host's
    assert foreign_pids([5001], own_pid=10, group_of=group) == ()  # this process alone, under its host pid
    assert foreign_pids([10, 404], own_pid=10, group_of=group) == (404,)  # a pid this namespace cannot see
    assert process_group(os.getpid()) == os.getpgid(0)
    assert run_window(Shared([])).num_samples >= 1  # the summary itself is untouched by the process reads
