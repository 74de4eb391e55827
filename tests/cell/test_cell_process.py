"""The cell's process and Python's cyclic garbage collector: off while torch loads and the cell is built,
on with everything built frozen (so a full collection in the measured window walks only what the window
made), and the heap frozen again before the interpreter's exit. What it saves is in docs/performance.md."""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
from types import SimpleNamespace

import pytest

from harness.cell import worker

ENTRY = """
import gc, sys, types
fake = types.ModuleType("harness.cell.worker")
seen = {}
def main(argv):
    seen["argv"], seen["on_while_running"] = argv, gc.isenabled()
    return 3
fake.main = main
sys.modules["harness.cell.worker"] = fake
from harness.cell.__main__ import main as entry
code = entry(["run", "job.json"])
print(seen["argv"], seen["on_while_running"], code, gc.get_freeze_count() > 0)
"""


def test_the_cells_entry_runs_the_worker_with_the_collector_off_and_freezes_the_heap_before_exit():
    out = subprocess.run([sys.executable, "-c", ENTRY], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['job.json']", "False", "3", "True"]


EXIT = """
import atexit, json, sys, types
fake = types.ModuleType("harness.cell.worker")
def main(argv):
    atexit.register(lambda: print("teardown ran", flush=True))
    print("cell done", flush=True)  # flushed before the process ends either way
    return 3
fake.main = main
sys.modules["harness.cell.worker"] = fake
json.dump({"profile": sys.argv[1] == "profiled" or None}, open("job.json", "w"))
from harness.cell.__main__ import main as entry
sys.exit(entry(["run", "job.json"]))
"""


@pytest.mark.parametrize("profiled", [False, True])
def test_a_cell_ends_without_the_interpreters_teardown_unless_a_profiler_collects_at_its_exit(profiled, tmp_path):
    """The row is written before the exit, so the interpreter's teardown (every module, atexit hooks: ~1 s) is
    skipped; under nsys the process exits the ordinary way, as nsys collects its data then."""
    out = subprocess.run([sys.executable, "-c", EXIT, "profiled" if profiled else "timed"], check=False,
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    assert out.stdout.split("\n")[:1] == ["cell done"] and ("teardown ran" in out.stdout) == profiled


@pytest.fixture
def collector_restored():
    was_on = gc.isenabled()
    yield
    gc.unfreeze()  # nothing else in the test process freezes: hand the objects back to the collector
    (gc.enable if was_on else gc.disable)()


def test_after_the_build_the_collector_comes_on_with_what_is_alive_frozen(collector_restored):
    gc.disable()
    alive = len(gc.get_objects())
    worker.collector_on_after_build()
    assert gc.isenabled()
    assert gc.get_freeze_count() >= alive // 2  # the test process's own heap: torch, pytest, the suite


def test_a_caller_that_kept_the_collector_on_is_left_as_it_is(collector_restored):
    gc.enable()
    frozen = gc.get_freeze_count()
    worker.collector_on_after_build()
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_run_cell_turns_the_collector_on_after_the_build_and_before_anything_else(monkeypatch):
    order = []

    class Stop(Exception):
        pass

    def build_engine(ctx, dataset_images):
        order.append("engine")

    def count_flops(ctx):
        order.append("flops")
        raise Stop

    class Loader:
        num_images = 8

        def __iter__(self):
            order.append("loader started")
            return iter(())

    monkeypatch.setattr(worker, "rank_loader", lambda ctx, split: order.append("loader") or Loader())
    monkeypatch.setattr(worker, "rank_engine", build_engine)
    monkeypatch.setattr(worker, "collector_on_after_build", lambda: order.append("collector"))
    monkeypatch.setattr(worker, "count_flops", count_flops)
    ctx = SimpleNamespace(ranges=lambda name: contextlib.nullcontext(), local_rank=0)
    with pytest.raises(Stop):
        worker.run_cell(ctx)
    # the loader's stream starts before the model builds: its workers load meanwhile
    assert order == ["loader", "loader started", "engine", "collector", "flops"]


def test_each_rank_says_where_it_runs_in_one_write_with_its_newline(monkeypatch):
    """The runner sets PYTHONUNBUFFERED: print() there writes the text and the newline in two calls, and a rank
    torchrun tears down between them leaves its line open for the next writer of the job's shared log (twice a
    parallel suite found a world-size-2 job's line run into another: tests/orchestrate/test_slots_run.py)."""
    writes: list[str] = []
    stdout = SimpleNamespace(write=writes.append, flush=lambda: None)
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b")
    slot = {"index": 0, "num_slots": 2, "packing": "calibrated", "cpus": [0, 1]}
    assert worker._say_where(slot, rank=1, local_world=2) == 1
    assert len(writes) == 1 and writes[0].startswith("nvbench: rank 1 on cores ")
    assert writes[0].endswith(" (slot 0, holding 2; packing calibrated), CUDA_VISIBLE_DEVICES=GPU-a,GPU-b\n")
