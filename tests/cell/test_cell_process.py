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

    monkeypatch.setattr(worker, "rank_loader", lambda ctx, split: order.append("loader") or SimpleNamespace(num_images=8))
    monkeypatch.setattr(worker, "rank_engine", build_engine)
    monkeypatch.setattr(worker, "collector_on_after_build", lambda: order.append("collector"))
    monkeypatch.setattr(worker, "count_flops", count_flops)
    ctx = SimpleNamespace(ranges=lambda name: contextlib.nullcontext(), local_rank=0)
    with pytest.raises(Stop):
        worker.run_cell(ctx)
    assert order == ["loader", "engine", "collector", "flops"]
