"""harness.cell.instruments.telemetry: summaries from known samples, the sampling thread driven by a fake NVML, and
the all-None summary where there is no NVML (this machine)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from conftest import ROOT

from harness.cell.instruments import telemetry as telemetry_mod
from harness.cell.instruments.telemetry import (
    TelemetrySample,
    TelemetrySampler,
    TelemetrySummary,
    summarize,
    throttle_reason_names,
)

GIB = 1 << 30
SW_POWER_CAP = 0x4
GPU_IDLE = 0x1
APP_CLOCKS = 0x2

ROW_COLUMNS = {
    "power_avg_w", "energy_j", "gpu_util_avg_pct", "mem_used_peak_bytes", "sm_clock_avg_mhz",
    "mem_clock_avg_mhz", "is_throttled", "throttle_reasons", "num_samples", "img_per_joule",
}  # fmt: skip


class NVMLError(Exception):
    pass


class FakeNvml:
    """One H100-like GPU with constant readings, except memory (one more GiB per poll), a scripted
    energy counter, and a fixed clock-event mask. `polled` is set once `want_polls` polls happened."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, *, mask=SW_POWER_CAP, energy_mj=(1_000_000, 1_250_500), want_polls=3, fail_init=False):
        self.mask = mask
        self.energy_mj = list(energy_mj)
        self.want_polls = want_polls
        self.fail_init = fail_init
        self.polls = 0
        self.polled = threading.Event()
        self.energy_calls = 0
        self.init_calls = 0
        self.shutdown_calls = 0

    def nvmlInit(self):
        if self.fail_init:
            raise NVMLError("Driver Not Loaded")
        self.init_calls += 1

    def nvmlShutdown(self):
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        if index != 0:
            raise NVMLError("Invalid Argument")
        return "gpu0"

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=80, memory=35)

    def nvmlDeviceGetMemoryInfo(self, h):
        self.polls += 1
        if self.polls >= self.want_polls:
            self.polled.set()
        return SimpleNamespace(total=80 * GIB, used=self.polls * GIB, free=0)

    def nvmlDeviceGetPowerUsage(self, h):
        return 250_500  # mW

    def nvmlDeviceGetClockInfo(self, h, clock_type):
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 2619}[clock_type]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self.mask

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.energy_calls += 1
        return self.energy_mj.pop(0)


@pytest.fixture(autouse=True)
def _all_gpus_visible(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nvbench-telemetry"]


def run_window(nvml: FakeNvml, *, interval_s: float = 0.005) -> TelemetrySummary:
    sampler = TelemetrySampler(0, interval_s=interval_s, nvml=nvml).start()
    assert nvml.polled.wait(10), "sampler never polled"
    return sampler.stop()


# --- summarize: known samples, exact answers -------------------------------------------------


def sample(t_s, util, mem, power, sm, memclk, mask) -> TelemetrySample:
    return TelemetrySample(t_s, util, mem, power, sm, memclk, mask)


def test_summarize_known_samples():
    samples = [
        sample(0.0, 50, 1 * GIB, 200.0, 1500, 2619, GPU_IDLE),
        sample(0.1, 100, 3 * GIB, 300.0, 1800, 2619, SW_POWER_CAP | APP_CLOCKS),
        sample(0.2, None, 2 * GIB, 250.0, 2100, 2619, 0),  # a failed utilisation read is skipped
    ]
    got = summarize(samples, energy_j=75.0)
    assert got == TelemetrySummary(
        power_avg_w=250.0,
        energy_j=75.0,
        gpu_util_avg_pct=75.0,
        mem_used_peak_bytes=3 * GIB,
        sm_clock_avg_mhz=1800.0,
        mem_clock_avg_mhz=2619.0,
        is_throttled=True,
        throttle_reasons=("gpu_idle", "applications_clocks_setting", "sw_power_cap"),
        num_samples=3,
        samples=tuple(samples),
    )
    assert got.as_row(images=1500)["img_per_joule"] == 20.0
    assert got.as_row(images=1500)["throttle_reasons"] == "gpu_idle,applications_clocks_setting,sw_power_cap"


def test_idle_and_pinned_clocks_are_not_throttling():
    samples = [
        sample(0.0, 0, GIB, 60.0, 345, 2619, GPU_IDLE),
        sample(0.1, 99, GIB, 690.0, 1755, 2619, APP_CLOCKS),
    ]
    got = summarize(samples, energy_j=None)
    assert (got.is_throttled, got.throttle_reasons) == (False, ("gpu_idle", "applications_clocks_setting"))
    assert summarize(samples[:1], energy_j=None).is_throttled is False


def test_no_reason_reads_means_throttling_unknown():
    got = summarize([sample(0.0, 80, GIB, 300.0, 1980, 2619, None)], energy_j=None)
    assert (got.is_throttled, got.throttle_reasons) == (None, None)
    zero = summarize([sample(0.0, 80, GIB, 300.0, 1980, 2619, 0)], energy_j=None)
    assert (zero.is_throttled, zero.throttle_reasons) == (False, ())
    assert zero.as_row(None)["throttle_reasons"] == ""


def test_throttle_reason_names_include_unknown_bits():
    assert throttle_reason_names(0) == ()
    assert throttle_reason_names(0x40 | 0x8) == ("hw_slowdown", "hw_thermal_slowdown")
    assert throttle_reason_names(0x800 | 0x40) == ("hw_thermal_slowdown", "bit_0x800")
    # A reason this code has never heard of is assumed to be a slowdown.
    assert summarize([sample(0.0, 1, 1, 1.0, 1, 1, 0x800)], energy_j=None).is_throttled is True


def test_empty_summary_is_all_none():
    got = summarize([], energy_j=None)
    assert got == TelemetrySummary()
    row = got.as_row(images=1000)
    assert set(row) == ROW_COLUMNS
    assert row == {**dict.fromkeys(ROW_COLUMNS), "num_samples": 0}


@pytest.mark.parametrize(("images", "energy_j"), [(None, 10.0), (100, None), (100, 0.0)])
def test_img_per_joule_needs_images_and_energy(images, energy_j):
    assert TelemetrySummary(energy_j=energy_j).as_row(images)["img_per_joule"] is None


# --- the sampling thread with a fake NVML ----------------------------------------------------


def test_sampler_summarises_what_it_polled():
    nvml = FakeNvml(mask=SW_POWER_CAP, energy_mj=(1_000_000, 1_250_500))
    got = run_window(nvml)
    assert got.num_samples == nvml.polls >= 3
    assert got.power_avg_w == 250.5
    assert got.gpu_util_avg_pct == 80.0
    assert (got.sm_clock_avg_mhz, got.mem_clock_avg_mhz) == (1980.0, 2619.0)
    assert got.mem_used_peak_bytes == nvml.polls * GIB
    assert got.energy_j == 250.5  # counter delta, read once at start and once at stop
    assert nvml.energy_calls == 2
    assert (got.is_throttled, got.throttle_reasons) == (True, ("sw_power_cap",))
    row = got.as_row(images=5010)
    assert set(row) == ROW_COLUMNS
    assert row["img_per_joule"] == 20.0
    assert row["throttle_reasons"] == "sw_power_cap"


def test_sampler_benign_reasons_are_not_throttled():
    got = run_window(FakeNvml(mask=GPU_IDLE | APP_CLOCKS))
    assert (got.is_throttled, got.throttle_reasons) == (False, ("gpu_idle", "applications_clocks_setting"))


def test_sampler_keeps_raw_samples_in_time_order():
    ticks = iter(range(1000))
    nvml = FakeNvml()
    sampler = TelemetrySampler(0, interval_s=0.005, nvml=nvml, clock=lambda: float(next(ticks)))
    sampler.start()
    assert nvml.polled.wait(10)
    got = sampler.stop()
    assert got.samples == sampler.samples
    assert [s.t_s for s in got.samples] == [float(i) for i in range(1, got.num_samples + 1)]
    assert [s.mem_used_bytes for s in got.samples] == [i * GIB for i in range(1, got.num_samples + 1)]
    assert got.samples[0]._fields == TelemetrySample._fields


def test_sampler_stops_its_thread_and_nvml():
    nvml = FakeNvml()
    sampler = TelemetrySampler(0, interval_s=0.005, nvml=nvml).start()
    assert len(sampler_threads()) == 1 and sampler_threads()[0].daemon
    assert nvml.polled.wait(10)
    sampler.stop()
    polls_at_stop = nvml.polls
    time.sleep(0.05)
    assert nvml.polls == polls_at_stop
    assert sampler_threads() == []
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def test_sampler_waits_between_polls_instead_of_spinning():
    nvml = FakeNvml(want_polls=1)
    interval_s = 0.05
    started = time.monotonic()
    sampler = TelemetrySampler(0, interval_s=interval_s, nvml=nvml).start()
    time.sleep(0.3)
    got = sampler.stop()
    elapsed = time.monotonic() - started
    # Event.wait never returns before its timeout unless stop() set the event.
    assert 1 <= got.num_samples <= elapsed / interval_s + 2


def test_context_manager_and_idempotent_stop():
    nvml = FakeNvml(want_polls=1)
    with TelemetrySampler(0, interval_s=0.005, nvml=nvml) as sampler:
        assert sampler.summary is None
        assert nvml.polled.wait(10)
    assert sampler.summary is not None and sampler.summary.num_samples >= 1
    assert sampler.stop() is sampler.summary
    assert nvml.energy_calls == 2


def test_deprecated_reason_getter_is_the_fallback():
    class OldDriverNvml(FakeNvml):
        def nvmlDeviceGetCurrentClocksEventReasons(self, h):
            raise NVMLError("Function Not Found")

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
            return 0x20

    got = run_window(OldDriverNvml())
    assert (got.is_throttled, got.throttle_reasons) == (True, ("sw_thermal_slowdown",))


def test_unsupported_queries_give_none_columns():
    class OldGpuNvml(FakeNvml):
        def nvmlDeviceGetPowerUsage(self, h):
            raise NVMLError("Not Supported")

        def nvmlDeviceGetTotalEnergyConsumption(self, h):
            raise NVMLError("Not Supported")

        nvmlDeviceGetCurrentClocksEventReasons = None

    got = run_window(OldGpuNvml())
    assert (got.power_avg_w, got.energy_j, got.is_throttled, got.throttle_reasons) == (None, None, None, None)
    assert got.gpu_util_avg_pct == 80.0
    assert got.as_row(images=100)["img_per_joule"] is None


def test_energy_counter_reset_gives_no_energy():
    assert run_window(FakeNvml(energy_mj=(5_000_000, 1_000))).energy_j is None


def test_stop_gives_up_on_a_hung_nvml_call(monkeypatch):
    monkeypatch.setattr(telemetry_mod, "_JOIN_TIMEOUT_S", 0.1)
    hung, release = threading.Event(), threading.Event()

    class HangingNvml(FakeNvml):
        def nvmlDeviceGetUtilizationRates(self, h):
            if self.polls >= 1:
                hung.set()
                release.wait(10)  # a GPU that fell off the bus can block NVML for a long time
            return super().nvmlDeviceGetUtilizationRates(h)

    nvml = HangingNvml(want_polls=1)
    sampler = TelemetrySampler(0, interval_s=0.005, nvml=nvml).start()
    assert hung.wait(10)
    started = time.monotonic()
    got = sampler.stop()
    assert time.monotonic() - started < 5
    assert got.num_samples == 1
    assert nvml.shutdown_calls == 0  # the stuck thread still holds NVML
    release.set()
    for thread in sampler_threads():
        thread.join(10)


# --- no NVML: everything None, nothing raises, no thread ------------------------------------


def assert_null(got: TelemetrySummary) -> None:
    assert got == TelemetrySummary()
    assert got.as_row(images=1000)["img_per_joule"] is None


def test_real_start_stop_on_this_machine():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present here")
    sampler = TelemetrySampler(0)
    sampler.start()
    assert sampler_threads() == []
    assert_null(sampler.stop())


def test_missing_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with TelemetrySampler(0) as sampler:
        assert sampler_threads() == []
    assert_null(sampler.summary)


def test_no_device_index_never_touches_nvml():
    nvml = FakeNvml()
    with TelemetrySampler(None, nvml=nvml) as sampler:
        pass
    assert_null(sampler.summary)
    assert nvml.init_calls == 0


def test_nvml_init_failure():
    with TelemetrySampler(0, nvml=FakeNvml(fail_init=True)) as sampler:
        assert sampler_threads() == []
    assert_null(sampler.summary)


def test_device_not_visible_closes_nvml(monkeypatch):
    nvml = FakeNvml()
    with TelemetrySampler(3, nvml=nvml) as sampler:
        pass
    assert_null(sampler.summary)
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with TelemetrySampler(0, nvml=FakeNvml()) as hidden:
        pass
    assert_null(hidden.summary)


# --- misuse and isolation --------------------------------------------------------------------


def test_misuse_is_reported():
    with pytest.raises(ValueError, match="interval_s must be > 0, got 0"):
        TelemetrySampler(0, interval_s=0)
    with pytest.raises(ValueError, match="device_index must be >= 0 or None, got -1"):
        TelemetrySampler(-1)
    with pytest.raises(RuntimeError, match=r"call start\(\) first"):
        TelemetrySampler(None).stop()
    sampler = TelemetrySampler(None).start()
    with pytest.raises(RuntimeError, match="already started; use one sampler per window"):
        sampler.start()


def test_importing_telemetry_does_not_import_torch():
    script = "import sys, harness.cell.instruments.telemetry; print('torch' in sys.modules)"
    repo = ROOT
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"
