"""Shared fixtures: tiny matrices that real worker processes finish in seconds on a 2-core CPU; the CLI with a
bound; tags that find every process a command started, for the tests that stop one."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import parallel
import pytest
from parallel import auto_workers, pytest_runtest_protocol  # noqa: F401 (a hook this conftest registers)

ROOT = Path(__file__).resolve().parents[1]

TINY = """
version = 1
[benchmark]
name = "tiny"
model = "resnet18"
num_classes = 10
image_size = 16
batch_size = 4
warmup_steps = 1
measure_steps = 3
val_steps = 1
timeout_s = {timeout}
[data]
workers = 0
cache_dir = "{cache}"
[data.generate]
image_size = 20
num_classes = 10
train_per_class = 4
val_per_class = 2
[axes]
{axes}
[run]
repeats = {repeats}
threads_per_process = 1
nvtx = {nvtx}
device = "{device}"
"""


def pytest_sessionstart(session):
    """Byte-compile the package once. Every cell, rank and CLI process the suite starts imports it afresh, and
    where PYTHONDONTWRITEBYTECODE is set (as on this machine and CI) nothing else would ever cache it: each
    process compiled harness from source, 0.7 s of a 2.7 s import here. An installed wheel ships compiled."""
    import compileall

    compileall.compile_dir(ROOT / "harness", quiet=1)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: parallel.auto_workers of the cores this process may use."""
    return auto_workers(len(os.sched_getaffinity(0)))


def pytest_configure(config):
    """Under xdist, each worker and every process it starts keep to their own cores (tests/parallel.py): a cell
    sizes its threads (and the runner its rank limits) by the cores it may use, so the workers' cells never
    fight for a core (8 workers x 16 threads on a 16-core box took 1,700 s of test time for 530 s here).

    The suite's processes share one nvbench machine cache of its own (NVBENCH_CACHE, set by the controller before
    its workers start, unless the caller set one): what a machine keeps between runs (registry models' FLOPs, 1.5-2
    s of a run's first cell) is kept between the suite's runs, and nothing is written to the user's ~/.cache. A
    test that needs an empty cache sets its own."""
    if "NVBENCH_CACHE" not in os.environ:
        os.environ["NVBENCH_CACHE"] = tempfile.mkdtemp(prefix="nvbench-suite-cache-")
    parallel.configure(config)


def pytest_collection_modifyitems(config, items):
    parallel.order(items)


@pytest.fixture
def one_torch_thread():
    """In-process training tests use one intra-op thread, then restore the previous count."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def tiny_matrix(tmp_path):
    """Write a tiny matrix; returns its path. Axes are TOML lines."""

    def make(axes: str = 'backend = ["synthetic"]', *, repeats: int = 1, timeout: float = 120,
             nvtx: bool = False, extra: str = "", device: str = "cpu") -> Path:
        """CPU by default: a test of the CPU path says so, whatever the machine has; GPU tests pass "cuda"."""
        path = tmp_path / "tiny.toml"
        text = TINY.format(axes=textwrap.dedent(axes), repeats=repeats, timeout=timeout,
                           cache=tmp_path / "cache", nvtx=str(nvtx).lower(), device=device)
        path.write_text(text + textwrap.dedent(extra))
        return path

    return make


def own_cores(count: int) -> list[set[int]] | None:
    """`count` disjoint sets of this process's cores, one core each, or None when it holds fewer: commands run
    side by side must not share a core, or each is the other's interference (harness.host.meter) and
    its windows are left out of every comparison."""
    cores = sorted(os.sched_getaffinity(0))
    return [{c} for c in cores[:count]] if len(cores) >= count else None


def pinned(cores: set[int] | None):
    """A preexec_fn that keeps a child (and its children) on `cores`; None: where the parent runs."""
    return (lambda: os.sched_setaffinity(0, cores)) if cores else None


def nvbench(*args: str, env: dict | None = None, timeout: float = 600, cwd: Path | None = None,
            cores: set[int] | None = None):
    """Run the real CLI in a fresh interpreter (on `cores` when given); one that outruns `timeout` is killed
    (its cells and child commands die with it) and fails the test with the command named."""
    full_env = dict(os.environ, **(env or {}))
    try:
        return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                              env=full_env, timeout=timeout, cwd=cwd or ROOT, preexec_fn=pinned(cores))
    except subprocess.TimeoutExpired:
        pytest.fail(f"`nvbench {' '.join(map(str, args))}` did not finish within {timeout:.0f} s")


@pytest.fixture
def documented_run(request):
    """`nvbench ARGS` within the bound the test's `documented` marker states (tests/test_documented.py)."""
    marker = request.node.get_closest_marker("documented")
    assert marker is not None and "bound_s" in marker.kwargs, "needs @pytest.mark.documented(..., bound_s=S)"

    def run(args: list[str], *, env: dict | None = None, cwd: Path | None = None):
        return nvbench(*args, env=env, cwd=cwd, timeout=marker.kwargs["bound_s"])

    return run


@pytest.fixture(scope="session")
def shared_cpu_run(tmp_path_factory) -> Path:
    """One small real run, made once for the tests that only read a finished run (each cell process costs
    seconds): a synthetic CPU cell with an auto warmup (2 steps, then at most one chunk: 12), and three cells
    this machine skips (dali-gpu without CUDA, more ranks than cores, compile = cudagraph on the CPU)."""
    root = tmp_path_factory.mktemp("shared-run")
    cpus = len(os.sched_getaffinity(0))
    # dali-gpu and cudagraph are left out of the oversized group: its generated dataset is too small to
    # shard that wide, and one skip reason per cell is enough
    axes = (f'backend = ["synthetic", "dali-gpu"]\nworld_size = [1, {cpus + 1}]\n'
            'compile = ["eager", "cudagraph"]')
    extra = (f'[[exclude]]\nbackend = "dali-gpu"\nworld_size = {cpus + 1}\n'
             f'[[exclude]]\ncompile = "cudagraph"\nworld_size = {cpus + 1}\n'
             '[[exclude]]\ncompile = "cudagraph"\nbackend = "dali-gpu"\n')
    text = TINY.format(axes=axes, repeats=1, timeout=120, cache=root / "cache", nvtx="false", device="cpu")
    text = text.replace("warmup_steps = 1\n", 'warmup_steps = "auto"\nwarmup_min_steps = 2\nwarmup_max_steps = 12\n')
    (root / "matrix.toml").write_text(text + extra)
    proc = nvbench("run", str(root / "matrix.toml"), "--out", str(root / "run"), "--no-progress")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root / "run"


# ---------------------------------------------------------------- processes a test started, and their ends

TAG_ENV = "NVBENCH_TEST_TAG"
"""Every process a tagged command starts inherits this variable: how a test finds all of them in /proc."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def kill_plan(name: str, *, seed: int | None = None) -> tuple[signal.Signals, float]:
    """A stop signal and a moment (0-3 s) drawn for test `name`: seeded (NVBENCH_TEST_SEED, default 0), so a
    failure is reproduced by running the same test with the same seed."""
    seed = int(os.environ.get("NVBENCH_TEST_SEED", "0")) if seed is None else seed
    rng = random.Random(f"{seed}:{name}")
    return rng.choice(STOP_SIGNALS), round(rng.uniform(0.0, 3.0), 2)


def start_tagged(argv: list[str], tag: str, *, env: dict | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """Start argv (stdout and stderr to pipes) with the tag that marks it and all its descendants, SIGINT at its
    default as in a terminal's foreground job: when the suite itself runs as a background job of a
    non-interactive shell (`nohup bash .ci/run &`), its children start with SIGINT ignored, and bash can trap no
    signal it was started ignoring, so ci/nightly.sh ran its night to the end through the test's Ctrl-C (two
    fresh clones, 2026-11-28)."""
    full_env = dict(os.environ, **(env or {}), **{TAG_ENV: tag})
    return subprocess.Popen(argv, cwd=cwd or ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.fixture
def tagged():
    """start(argv, env=, cwd=) -> (its Popen, its tag), for tests that stop commands; whatever of them a failed
    test leaves running (a command that never got going, say) is killed when the test ends."""
    tags: list[str] = []

    def start(argv: list[str], *, env: dict | None = None, cwd: Path | None = None):
        tags.append(f"{os.getpid()}-{len(tags)}-{time.monotonic_ns()}")
        return start_tagged(argv, tags[-1], env=env, cwd=cwd), tags[-1]

    yield start
    for tag in tags:
        for line in tagged_processes(tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)


def tagged_processes(tag: str) -> list[str]:
    """'pid command line' of every live process whose environment carries the tag (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if f"{TAG_ENV}={tag}".encode() not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            found.append(f"{entry} {argv}")
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def wait_for(what: str, condition, *, timeout_s: float, proc: subprocess.Popen | None = None):
    """Poll `condition()` every 0.2 s until it is truthy (returned); fail naming `what` after `timeout_s`, or as
    soon as `proc` ends first."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the command ended first (exit {proc.returncode}): {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.2)
    return value


def catches(pid: int, sig: int) -> bool:
    """The process has a handler for `sig` (its SigCgt mask in /proc): an nvbench command is past its start-up
    and inside stopping.run, where a stop signal is an orderly stop rather than the default death."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            mask = next(int(line.split()[1], 16) for line in fh if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(mask >> (int(sig) - 1) & 1)


def first_cell(tag: str) -> list[str]:
    """The tagged cell processes running now."""
    return [p for p in tagged_processes(tag) if " -m harness.cell " in p]


def stop_and_check(proc: subprocess.Popen, tag: str, sig: int, *, within_s: float | None = None) -> tuple[int, str]:
    """Send `sig` to the command, then require that no process of it is left after `within_s`; returns its exit
    status and stderr. What is left is killed and named in the failure. By default the bound is the harness's own
    promise, a cell's SIGTERM grace before its SIGKILL (TERM_GRACE_S), and 10 s to reap: a cell that takes its
    time to unwind on a slow machine is within the contract (a night's cell still ran 10 s after SIGINT on an
    AVX2-only CPU, 2026-11-28); one the harness never kills is not."""
    from harness.orchestrate.placement.launch import TERM_GRACE_S

    within_s = TERM_GRACE_S + 10.0 if within_s is None else within_s
    proc.send_signal(sig)
    deadline = time.monotonic() + within_s
    while (left := tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for line in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    assert not left, f"{signal.Signals(sig).name}: still running {within_s:.0f} s later:\n" + "\n".join(left)
    _, err = proc.communicate(timeout=5)
    return proc.returncode, err


@contextlib.contextmanager
def constructed_quiet(folder: Path):
    """The environment of commands that must see this machine's cores quiet whatever else runs beside them (a shared
    CI runner): NVBENCH_PROC_STAT names a constructed /proc/stat in `folder` whose every core stays idle as time passes
    (100 ticks a second, as the kernel counts), rewritten whole every 50 ms while the block runs. The cells' meters and
    the A/B's wait for quiet read it; their own processes' ticks still come from the real /proc. Exact: a window reads
    no other process, so nothing is re-run or left out for interference."""
    import threading

    from harness.host.procstat import PROC_STAT_ENV

    path, stop = Path(folder) / "proc-stat", threading.Event()
    cpus = os.cpu_count() or 1

    def write() -> None:
        idle = int(time.monotonic() * 100)
        lines = [f"cpu 0 0 0 {idle * cpus} 0 0 0 0 0 0"] + [f"cpu{c} 0 0 0 {idle} 0 0 0 0 0 0" for c in range(cpus)]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, path)

    def keep() -> None:
        while not stop.wait(0.05):
            write()

    write()
    thread = threading.Thread(target=keep, daemon=True)
    thread.start()
    try:
        yield {PROC_STAT_ENV: str(path)}
    finally:
        stop.set()
        thread.join()


@pytest.fixture
def quiet_machine(tmp_path):
    """constructed_quiet for one test: its commands see this machine's cores quiet."""
    with constructed_quiet(tmp_path) as env:
        yield env
