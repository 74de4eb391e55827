"""The measured loop's mechanics without a GPU: the data wait the device sees (events on a simulated
stream), events created before the window, instruments started before the opening fence, epoch marks,
the reason a diverged cell gives. And on a GPU: the exposed wait of a real CUDA stream."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from harness.cell import loop, measure, warmup, worker
from harness.cell import metrics
from harness.cell.instruments.timing import PHASES, PhaseClock, StepClock, make_ranges
from harness.matrix.cells import expand
from harness.matrix.parse import parse_matrix


class SimulatedStream:
    """A device stream on a simulated clock: the host queues work (busy_until grows) and takes host time."""

    def __init__(self) -> None:
        self.host = 0.0
        self.busy_until = 0.0

    def queue(self, device_s: float) -> None:
        self.busy_until = max(self.busy_until, self.host) + device_s


class FakeEvent:
    """An event on the simulated stream: it completes when the stream reaches it."""

    created = 0

    def __init__(self, stream: SimulatedStream) -> None:
        FakeEvent.created += 1
        self.stream, self.t, self.records = stream, None, 0

    def record(self) -> None:
        self.records += 1
        self.t = max(self.stream.host, self.stream.busy_until)

    def elapsed_time(self, end: "FakeEvent") -> float:
        return (end.t - self.t) * 1e3


class SimulatedEngine:
    def __init__(self, stream: SimulatedStream, device_s: float) -> None:
        self.stream, self.device_s = stream, device_s

    def forward_backward(self, images, labels, *, sync_grads: bool) -> None:
        self.stream.queue(self.device_s)

    def optimizer_step(self, extra=None) -> None:
        pass


def batches(stream: SimulatedStream, host_s: float):
    while True:
        stream.host += host_s  # the host spends this long producing the batch
        yield None, None


def context(accum: int) -> SimpleNamespace:
    return SimpleNamespace(cell=SimpleNamespace(grad_accum=accum), ranges=make_ranges(False), phases=None,
                           device=torch.device("cpu"), is_distributed=False)


def simulated_window(*, fetch_s: float, compute_s: float, steps: int = 5, accum: int = 2) -> np.ndarray:
    stream = SimulatedStream()
    clock = StepClock(steps, torch.device("cuda"), accum, make_event=lambda: FakeEvent(stream))
    loop.run_window(context(accum), SimulatedEngine(stream, compute_s), batches(stream, fetch_s), clock, "measure")
    return clock.resolve_exposed_data_wait()


def test_a_busy_gpu_hides_the_hosts_fetch_time():
    exposed = simulated_window(fetch_s=0.02, compute_s=0.05)
    # Only the very first fetch finds the stream idle; after it the device always has queued work.
    assert exposed[0] == pytest.approx(0.02) and exposed[1:] == pytest.approx(0.0)


def test_a_starved_gpu_waits_for_what_the_host_takes_beyond_its_work():
    exposed = simulated_window(fetch_s=0.05, compute_s=0.02)
    # Each later fetch: 0.05 s on the host, of which the previous micro-batch's 0.02 s of work hides part.
    assert exposed[1:] == pytest.approx(2 * (0.05 - 0.02))
    assert exposed[0] == pytest.approx(0.05 + 0.03)


def test_every_event_exists_before_the_window_opens():
    stream = SimulatedStream()
    FakeEvent.created = 0
    clock = StepClock(4, torch.device("cuda"), 3, make_event=lambda: FakeEvent(stream))
    made = FakeEvent.created
    assert made == 2 * 4 + 2 * 4 * 3
    events = [*clock._start, *clock._end, *clock._fetch_start, *clock._fetch_end]
    assert all(e.records == 1 for e in events)  # recorded once: torch creates a CUDA event on its first record
    loop.run_window(context(3), SimulatedEngine(stream, 0.01), batches(stream, 0.0), clock, "measure")
    assert FakeEvent.created == made


def test_on_cpu_the_exposed_wait_is_the_host_wait():
    clock = StepClock(3, torch.device("cpu"), 1)

    def slow():
        while True:
            time.sleep(0.01)
            yield None, None

    loop.run_window(context(1), SimulatedEngine(SimulatedStream(), 0.0), slow(), clock, "measure")
    assert (clock.resolve_exposed_data_wait() == clock.host_data_wait_s).all()
    assert (clock.host_data_wait_s >= 0.01).all()


def test_instruments_start_before_the_opening_fence_and_stop_after_the_closing_one(monkeypatch):
    log: list[str] = []
    monkeypatch.setattr(loop, "_fence", lambda ctx: log.append("fence"))

    class Instrument:
        def __init__(self, name: str) -> None:
            self.name = name

        def start(self) -> None:
            log.append(f"start {self.name}")

        def stop(self) -> None:
            log.append(f"stop {self.name}")

    stream = SimulatedStream()
    clock = StepClock(2, torch.device("cpu"))
    loop.run_window(context(1), SimulatedEngine(stream, 0.0), batches(stream, 0.0), clock, "measure",
                    instruments=[Instrument("profiler"), Instrument("nvml")])
    assert log == ["start profiler", "start nvml", "fence", "fence", "stop nvml", "stop profiler"]


def test_epoch_marks_follow_the_stream_of_images():
    epoch, starts = measure.epoch_marks(6, 4, 10)  # steps of 4 images, epochs of 10
    assert epoch == [0, 0, 0, 1, 1, 2]
    assert starts == [True, False, True, False, False, True]  # images 0, 10 and 20 open epochs
    assert measure.epoch_marks(3, 4, None) == ([None] * 3, [None] * 3)


def test_a_diverged_cell_names_its_first_non_finite_step_and_lr():
    loss = np.array([2.3, 2.2, np.inf, np.nan])
    lr = np.array([0.1, 0.2, 0.3, 0.4])
    reason = metrics.non_finite_reason(float("nan"), loss, lr, warmup_steps=3)
    assert reason == ("non-finite training loss (nan) in the measured window; "
                      "first non-finite step loss at step 2 (warmup), lr 0.3")
    assert "another rank diverged" in metrics.non_finite_reason(float("nan"), loss[:2], lr[:2], warmup_steps=1)


def test_a_local_rank_without_its_own_gpu_is_refused(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cell = expand(parse_matrix({"version": 1, "benchmark": {}}, "m.toml"))[0]
    with pytest.raises(RuntimeError, match="local rank 1 has no GPU of its own: 1 visible"):
        worker._setup({"cell": cell.to_plain(), "device": "cuda"})


# ---------------------------------------------------------------- on a GPU


class SlowLoader:
    """Yields one device batch after `host_s` of host time (a loader the host waits for)."""

    def __init__(self, host_s: float) -> None:
        self.host_s = host_s
        self.images = torch.zeros(8, 3, 8, 8, device="cuda")

    def __iter__(self):
        while True:
            time.sleep(self.host_s)
            yield self.images, None


class SleepEngine:
    """GPU work of a known length per micro-batch (torch.cuda._sleep cycles)."""

    def __init__(self, cycles: int) -> None:
        self.cycles = cycles

    def forward_backward(self, images, labels, *, sync_grads: bool) -> None:
        torch.cuda._sleep(self.cycles)

    def optimizer_step(self, extra=None) -> None:
        pass


def _cycles_per_s() -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    torch.cuda.synchronize()
    return 10_000_000 / (start.elapsed_time(end) / 1e3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(("host_ms", "gpu_ms", "exposed_ms"), [(10, 40, 0), (40, 10, 30)])
def test_the_exposed_wait_is_what_a_real_stream_waited(host_ms, gpu_ms, exposed_ms):
    ctx = SimpleNamespace(cell=SimpleNamespace(grad_accum=1), ranges=make_ranges(False), phases=None,
                          device=torch.device("cuda", 0), is_distributed=False)
    engine = SleepEngine(int(gpu_ms / 1e3 * _cycles_per_s()))
    clock = StepClock(8, ctx.device)
    loop.run_window(ctx, engine, iter(SlowLoader(host_ms / 1e3)), clock, "measure")
    exposed, host = clock.resolve_exposed_data_wait()[1:] * 1e3, clock.host_data_wait_s[1:] * 1e3
    assert np.median(host) == pytest.approx(host_ms, abs=3)  # the host waited either way
    assert np.median(exposed) == pytest.approx(exposed_ms, abs=3)


# ---------------------------------------------------------------- auto warmup


def test_steady_means_the_last_chunk_is_within_two_percent_of_the_one_before():
    assert warmup.is_steady(np.r_[np.full(10, 1.0), np.full(10, 1.019)])
    assert not warmup.is_steady(np.r_[np.full(10, 1.0), np.full(10, 1.03)])
    assert not warmup.is_steady(np.full(19, 1.0))  # two chunks are needed to judge
    # medians: a single stall in a chunk does not keep warmup going...
    assert warmup.is_steady(np.r_[np.full(10, 1.0), np.full(4, 1.0), [5.0], np.full(5, 1.0)])
    # ...but one as the chunk ends does: a hiccup under way, the window would open in it (issue 42)
    assert not warmup.is_steady(np.r_[np.full(10, 1.0), np.full(9, 1.0), [5.0]])
    # and so does a last chunk that opens slow: the steps have not settled yet
    assert not warmup.is_steady(np.r_[np.full(10, 1.0), [3.0, 3.0, 3.0], np.full(7, 1.0)])
    assert warmup.is_steady(np.r_[np.full(30, 3.0), np.full(10, 1.0), np.full(10, 1.01)])  # only the last two


class SettlingEngine(SimulatedEngine):
    """Steps whose device time follows `times(step)`: slow and settling (cuDNN autotuning, allocator growth),
    then steady."""

    def __init__(self, stream: SimulatedStream, times) -> None:
        super().__init__(stream, times(0))
        self.steps, self.times = 0, times

    def optimizer_step(self, extra=None) -> None:
        self.steps += 1
        self.device_s = self.times(self.steps)


def auto_warmup(times, *, min_steps: int = 10, max_steps: int = 200) -> warmup.Warmup:
    stream = SimulatedStream()
    bench = SimpleNamespace(warmup_steps="auto", warmup_min_steps=min_steps, warmup_max_steps=max_steps)
    ctx = SimpleNamespace(cell=SimpleNamespace(grad_accum=1, benchmark=bench), ranges=make_ranges(False), phases=None,
                          device=torch.device("cpu"), is_distributed=False)
    clock = lambda n: StepClock(n, torch.device("cuda"), 1, make_event=lambda: FakeEvent(stream))  # noqa: E731
    return warmup.warm_up(ctx, SettlingEngine(stream, times), batches(stream, 0.0), clock=clock)


def test_auto_warmup_ends_at_the_first_steady_chunk_and_says_how_many_steps_it_took():
    # chunk medians 50, 30, 15, 10, 10 ms: the first two alike are the chunks ending at steps 40 and 50
    settling = lambda step: 0.05 if step < 10 else 0.03 if step < 20 else 0.02 if step < 25 else 0.01  # noqa: E731
    warm = auto_warmup(settling)
    assert warm.steps == 50 and warm.step_times_s[-1] == pytest.approx(0.01)
    assert len(warm.host_data_wait_s) == len(warm.exposed_data_wait_s) == 50
    assert auto_warmup(lambda step: 0.01).steps == 20  # steady from the start: the first judgement stops it


def test_auto_warmup_stops_at_its_maximum():
    growing = lambda step: 0.01 * 1.05 ** step  # noqa: E731  # never steady
    assert auto_warmup(growing, max_steps=35).steps == 35  # 10, then chunks of 10, the last one cut to 5


# --- per-phase step timing ----------------------------------------------------------------------------


class PhasedEngine:
    """Forward, backward and optimizer each take a known time, inside the step's own ranges."""

    def __init__(self, ranges, spend, forward_s: float, backward_s: float, optimizer_s: float) -> None:
        self.ranges, self.spend = ranges, spend
        self.forward_s, self.backward_s, self.optimizer_s = forward_s, backward_s, optimizer_s

    def forward_backward(self, images, labels, *, sync_grads: bool) -> None:
        with self.ranges("forward"):
            self.spend(self.forward_s)
        with self.ranges("backward"):
            self.spend(self.backward_s)

    def optimizer_step(self, extra=None) -> None:
        with self.ranges("optimizer"):
            self.spend(self.optimizer_s)
            if extra is not None:
                extra()


def phased_context(accum: int, phases: PhaseClock) -> SimpleNamespace:
    return SimpleNamespace(cell=SimpleNamespace(grad_accum=accum), ranges=make_ranges(False, phases=phases),
                           phases=phases, device=torch.device("cpu"), is_distributed=False)


def test_each_measured_step_records_its_phases_on_cuda_events_made_before_the_window():
    stream, steps, accum = SimulatedStream(), 4, 2
    phases = PhaseClock()
    ctx = phased_context(accum, phases)
    make = lambda: FakeEvent(stream)  # noqa: E731
    clock = StepClock(steps, torch.device("cuda"), accum, make_event=make)
    phases.arm(steps, torch.device("cuda"), accum, make_event=make)
    created = FakeEvent.created
    engine = PhasedEngine(ctx.ranges, stream.queue, 0.010, 0.020, 0.005)
    loop.run_window(ctx, engine, batches(stream, 0.001), clock, "measure")
    assert FakeEvent.created == created  # nothing created inside the window
    got = phases.resolve()
    assert got.shape == (steps, len(PHASES))
    col = {name: got[:, PHASES.index(name)] for name in PHASES}
    assert np.allclose(col["forward"], accum * 0.010) and np.allclose(col["backward"], accum * 0.020)
    assert np.allclose(col["optimizer"], 0.005) and np.isnan(col["h2d"]).all()  # synthetic: no copy
    assert (col["data"] >= 0).all() and (col["data"] < 0.002 * accum).all()  # the busy stream hides the fetch


def test_on_cpu_the_phases_are_host_clock_sums_and_a_drill_lands_in_the_optimizer(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    def spend(seconds: float) -> None:
        now[0] += seconds

    steps, accum = 3, 2
    phases = PhaseClock()
    ctx = phased_context(accum, phases)
    clock = StepClock(steps, torch.device("cpu"), accum)
    phases.arm(steps, torch.device("cpu"), accum)

    def fed():
        while True:
            spend(0.004)
            yield None, None

    class Drill:
        def begin(self) -> None:
            pass

        def __call__(self) -> None:
            spend(0.030)

    loop.run_window(ctx, PhasedEngine(ctx.ranges, spend, 0.010, 0.020, 0.005), fed(), clock, "measure",
                    drill=Drill())
    got = phases.resolve()
    col = {name: got[:, PHASES.index(name)] for name in PHASES}
    assert np.allclose(col["data"], accum * 0.004) and np.allclose(col["forward"], accum * 0.010)
    assert np.allclose(col["backward"], accum * 0.020) and np.allclose(col["optimizer"], 0.005 + 0.030)
    assert np.allclose(clock.resolve(), np.nansum(got, axis=1))  # the phases make up the whole step
    phases.disarm()
    with ctx.ranges("forward"):  # outside the measured window nothing is recorded
        spend(1.0)
    assert np.allclose(phases.resolve(), got, equal_nan=True)


def test_a_ddp_steps_allreduce_wait_is_its_own_phase_from_the_last_gradient_to_backwards_end(monkeypatch):
    """World size > 1: the wait after autograd writes the last gradient (DDP's reducer finishing its buckets) is
    phase allreduce, timed on the syncing micro-batch only, and backward is reported without it. Real autograd
    and real post-accumulate-grad hooks; the clock is simulated so that the figures are exact."""
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    def spend(seconds: float) -> None:
        now[0] += seconds

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    steps, accum = 3, 2
    phases = PhaseClock()
    phases.watch_gradients(model.parameters())
    ctx = phased_context(accum, phases)

    class Engine:
        def forward_backward(self, images, labels, *, sync_grads: bool) -> None:
            with ctx.ranges("forward"):
                spend(0.010)
                loss = model(torch.ones(2, 3)).sum()
            with ctx.ranges("backward"):
                spend(0.020)  # the backward pass's own work
                loss.backward()  # the last gradient is written in here: the wait starts
                if sync_grads:
                    spend(0.007)  # DDP's reducer waiting for its last buckets' all-reduce

        def optimizer_step(self, extra=None) -> None:
            with ctx.ranges("optimizer"):
                spend(0.005)

    def fed():
        while True:
            spend(0.004)
            yield None, None

    engine = Engine()
    engine.forward_backward(None, None, sync_grads=True)  # a warm-up backward: the hooks learn the last gradient
    clock = StepClock(steps, torch.device("cpu"), accum)
    phases.arm(steps, torch.device("cpu"), accum)
    assert len(phases._hooks) == 1  # one hook left for the measured window, on the gradient written last
    loop.run_window(ctx, engine, fed(), clock, "measure")
    got = phases.resolve()
    col = {name: got[:, PHASES.index(name)] for name in PHASES}
    assert np.allclose(col["allreduce"], 0.007)  # once per step: the micro-batch before it did not sync
    assert np.allclose(col["backward"], accum * 0.020)
    assert np.allclose(clock.resolve(), np.nansum(got, axis=1))  # still the whole step, nothing counted twice
    single = PhaseClock()  # one process: no hooks, no allreduce phase
    single.arm(steps, torch.device("cpu"), accum)
    assert np.isnan(single.resolve()[:, PHASES.index("allreduce")]).all()
