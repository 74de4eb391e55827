"""A counted window's work, exactly: on constructed events (the GPU's among them, pending a GPU) and on real
torch.profiler windows of a tiny model's steps with one thing added (an .item(), 16 matmuls, a tensor a step, a
graph break), each found as exactly that; the table read back by DuckDB and by pyarrow alone."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch

from harness.catalogue.work import (ALLOC_RETRIES, ALLOCATED_BYTES, ALLOCATIONS, COLLECTIVE_BYTES, COLLECTIVES,
                                    COPIED_BYTES, COPIES, DEVICE_MALLOCS, GRAPH_BREAKS, GRAPHS, HOST_SYNCS,
                                    KERNEL_LAUNCHES, OP_CALLS, RECOMPILATIONS)
from harness.cell.instruments import work
from harness.cell.instruments.timing import BACKWARD, FORWARD, MEASURE, OPTIMIZER, STEP, make_ranges
from harness.results import store
from harness.results import work as work_table
from harness.results.kernels import BETWEEN_OPS

STEPS = 3
SYNC = "aten::_local_scalar_dense"


def _fresh_dynamo() -> None:
    """Forget what earlier tests of this pytest process compiled: dynamo's counters are the process's, and a cell
    process starts with none (an eager window after another test's torch.compile would read as compiled)."""
    import sys

    if "torch._dynamo" in sys.modules:
        import torch._dynamo
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()


def _counted(*, item: bool = False, mm: int = 0, new_tensor: bool = False) -> Counter:
    """The counts of STEPS profiled steps of a small net with the cell's range names, after two warm steps."""
    _fresh_dynamo()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, a = torch.randn(2, 3, 8, 8), torch.randn(8, 8)
    ranges = make_ranges(False, profiler=True)

    def step() -> None:
        with ranges(STEP):
            with ranges(FORWARD):
                loss = model(x).sum()
                for _ in range(mm):
                    torch.mm(a, a)
                if new_tensor:
                    torch.ones(16)
            with ranges(BACKWARD):
                loss.backward()
            with ranges(OPTIMIZER):
                opt.step()
                opt.zero_grad()
                if item:
                    loss.item()

    for _ in range(2):
        step()
    counter = work.WorkCounter(is_cuda=False)
    counter.start()
    with ranges(MEASURE):
        for _ in range(STEPS):
            step()
    counter.stop()
    return counter.counts()


@pytest.fixture(scope="module")
def base():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield _counted()
    finally:
        torch.set_num_threads(threads)


def _diff(a: Counter, b: Counter) -> dict:
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b) if a.get(k, 0) != b.get(k, 0)}


def test_a_window_counts_the_same_twice_and_no_copy_on_a_cpu(base):
    again = _counted()
    assert _diff(base, again) == {}
    assert base[("forward", OP_CALLS, "aten::conv2d")] == STEPS and base[("forward", OP_CALLS, "aten::linear")] == STEPS
    assert ("forward", OP_CALLS, "aten::convolution") not in base  # inside conv2d: not what the model called
    assert base[("backward", OP_CALLS, "aten::convolution_backward")] == STEPS
    assert not any(k[1] in (HOST_SYNCS, COPIES, COPIED_BYTES, KERNEL_LAUNCHES, COLLECTIVES) for k in base)
    assert base[("forward", ALLOCATIONS, "aten::conv2d")] >= STEPS and base[("forward", ALLOCATED_BYTES, "aten::conv2d")] > 0
    assert not any(k[1] in (GRAPH_BREAKS, GRAPHS, RECOMPILATIONS) for k in base)  # eager: none written


def test_an_item_in_the_optimizer_is_one_more_host_sync_a_step(base):
    """The sync is the work: aten::item around it is no op call of its own (the acceptance's "and nothing else")."""
    assert _diff(base, _counted(item=True)) == {("optimizer", HOST_SYNCS, SYNC): STEPS}


def test_sixteen_matmuls_in_forward_are_sixteen_more_mm_calls_a_step(base):
    d = _diff(base, _counted(mm=16))
    assert d[("forward", OP_CALLS, "aten::mm")] == 16 * STEPS
    assert {k for k in d if k[1] == OP_CALLS} == {("forward", OP_CALLS, "aten::mm")}
    assert d[("forward", ALLOCATIONS, "aten::mm")] == 16 * STEPS


def test_a_new_tensor_a_step_in_forward_is_one_more_allocation_with_its_bytes(base):
    d = _diff(base, _counted(new_tensor=True))
    assert d == {("forward", OP_CALLS, "aten::ones"): STEPS, ("forward", ALLOCATIONS, "aten::ones"): STEPS,
                 ("forward", ALLOCATED_BYTES, "aten::ones"): 16 * 4 * STEPS}


COMPILED = """
import json, sys
import torch, torch._dynamo
from torch._dynamo.utils import counters
from harness.cell.instruments import work

def counted(with_break):
    torch._dynamo.reset()
    counters.clear()

    def f(x):
        y = x.sin()
        if with_break:
            torch._dynamo.graph_break()
        return y.cos()

    torch.compile(f, backend="inductor")(torch.randn(4))
    got = work.compile_counts({k: dict(v) for k, v in counters.items()}, work._recompiles(), 0)
    return [[*k, v] for k, v in got.items()]

work.prepare_process()
before = work._recompiles()
g = torch.compile(lambda x: x.sin() + 1)
g(torch.randn(4))
g(torch.randn(5))  # another shape: compiled again (dynamic now)
print(json.dumps({"without": counted(False), "with": counted(True), "recompiles": work._recompiles() - before}))
"""
"""Run in a fresh interpreter, as a cell is: torch.compile's state is the process's (dynamo's counters, inductor's
config), and another test of the same pytest process may have left it changed."""


@pytest.mark.slow
def test_a_graph_break_under_inductor_is_counted_and_none_without_it():
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", COMPILED], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    without, with_ = ({tuple(r[:3]): r[3] for r in got[k]} for k in ("without", "with"))
    assert without[("process", GRAPH_BREAKS, "")] == 0 and without[("process", GRAPHS, "")] == 1
    assert with_[("process", GRAPH_BREAKS, "")] >= 1 and with_[("process", GRAPHS, "")] == 2
    assert with_[("process", GRAPH_BREAKS, "Call to `torch._dynamo.graph_break()`")] >= 1
    assert got["recompiles"] == 1


def test_compile_counters_are_none_for_an_eager_process_and_reasons_keep_their_first_line():
    assert work.compile_counts({}, 0, 0) == Counter()
    got = work.compile_counts({"frames": {"total": 3}, "graph_break": {"Call to x\n  Explanation: y": 2},
                               "stats": {"unique_graphs": 4}}, 1, 1)
    assert got == {("process", GRAPH_BREAKS, ""): 2, ("process", GRAPH_BREAKS, "Call to x"): 2,
                   ("process", GRAPHS, ""): 4, ("process", RECOMPILATIONS, ""): 1, ("window", RECOMPILATIONS, ""): 1}


def _event(name, start, end, *, id=0, linked=0, parent=None, device="DeviceType.CPU", thread=1, shapes=(),
           dtypes=(), meta=""):
    """A stand-in for torch.profiler's FunctionEvent with the fields the counting reads."""
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), id=id,
                           linked_correlation_id=linked, cpu_parent=parent, device_type=device, is_async=False,
                           is_user_annotation=False, thread=thread, input_shapes=list(shapes),
                           input_dtypes=list(dtypes), metadata_json=meta)


def test_constructed_events_count_syncs_once_collectives_by_call_and_gpu_work_by_launch_phase():
    """The GPU's part on events shaped as torch 2.13 gives them (its run on a GPU is pending): .item()'s runtime
    synchronize inside aten::_local_scalar_dense is one sync; a bare torch.cuda.synchronize() is one; a kernel and
    a copy fall in their launch's phase though they ran later; a collective counts by its c10d call."""
    step, fwd, bwd, opt = (_event(STEP, 0, 100), _event(FORWARD, 1, 40), _event(BACKWARD, 41, 70),
                           _event(OPTIMIZER, 71, 99))
    mm = _event("aten::mm", 2, 10, id=5)
    item = _event("aten::item", 72, 80)
    dense = _event(SYNC, 73, 79, parent=item)
    inner_sync = _event("cudaStreamSynchronize", 75, 78, parent=dense)
    reduce_ = _event("c10d::allreduce_", 50, 52, id=9, shapes=[[]], dtypes=["TensorList"])
    events = [step, fwd, bwd, opt, mm, _event("cudaLaunchKernel", 3, 4, linked=5, parent=mm),
              _event("sm90_gemm", 45, 46, linked=5, device="DeviceType.CUDA"),
              _event("aten::copy_", 20, 30, id=6), _event("cudaMemcpyAsync", 21, 22, linked=6),
              _event("Memcpy HtoD (Pageable -> Device)", 42, 43, linked=6, device="DeviceType.CUDA",
                     meta='"device": 0, "bytes": 4096'),
              item, dense, inner_sync, _event("cudaDeviceSynchronize", 90, 91), reduce_,
              _event("gloo:all_reduce", 120, 130, shapes=[[110]], dtypes=["float"], thread=2)]
    memory = [work.MemoryEvent(5.0, 64, "CUDA", 1), work.MemoryEvent(6.0, -64, "CUDA", 1),
              work.MemoryEvent(35.0, 32, "CUDA", 1), work.MemoryEvent(36.0, 8, "CPU", 1)]
    got = work.window_counts(events, memory, device="cuda")
    assert got[("optimizer", HOST_SYNCS, SYNC)] == 1 and got[("optimizer", HOST_SYNCS, "cudaDeviceSynchronize")] == 1
    assert ("optimizer", HOST_SYNCS, "cudaStreamSynchronize") not in got
    assert got[("forward", KERNEL_LAUNCHES, "sm90_gemm")] == 1
    assert got[("forward", COPIES, "h2d")] == 1 and got[("forward", COPIED_BYTES, "h2d")] == 4096
    assert got[("backward", COLLECTIVES, "c10d::allreduce_")] == 1
    assert got[("window", COLLECTIVE_BYTES, "gloo:all_reduce")] == 110 * 4
    assert got[("forward", ALLOCATIONS, "aten::mm")] == 1 and got[("forward", ALLOCATED_BYTES, "aten::mm")] == 64
    assert got[("forward", ALLOCATIONS, BETWEEN_OPS)] == 1  # the CPU's 8 bytes are not the CUDA cell's
    assert work.allocator_counts({"num_device_alloc": 4}, {"num_device_alloc": 6, "num_alloc_retries": 1}) == \
        {("window", DEVICE_MALLOCS, ""): 2, ("window", ALLOC_RETRIES, ""): 1}


def test_rows_are_per_step_except_whole_window_counts_and_read_in_duckdb_and_pyarrow(base, tmp_path):
    counts = base + Counter({("process", GRAPHS, ""): 2})
    rows = work.work_rows(counts, cell_id="c", process=0, rank=0, device="cpu", steps=STEPS)
    by = {(r["phase"], r["counter"], r["key"]): r for r in rows}
    assert by[("forward", OP_CALLS, "aten::conv2d")]["per_step"] == 1.0
    assert by[("process", GRAPHS, "")]["per_step"] == 2.0 and by[("process", GRAPHS, "")]["count"] == 2
    path = tmp_path / "work.parquet"
    store.write_table(path, work_table.work_table(rows))
    table = pq.read_table(path)
    assert table.schema.names == ["cell_id", "process", "rank", "device", "phase", "counter", "key", "count", "steps",
                                  "per_step"]
    assert table.schema.metadata[b"nvbench.work_version"] == b"1" and table.schema.metadata[b"nvbench.table"] == b"work"
    from harness.analysis.load.columns import dictionary

    kind, described = dictionary(path)  # what `nvbench columns work.parquet` prints
    assert kind == "work" and [c.name for c in described] == table.schema.names and all(c.doc for c in described)
    duckdb = pytest.importorskip("duckdb")
    got = duckdb.sql(f"select sum(count) from '{path}' where counter = 'op_calls' and phase = 'forward'").fetchall()[0][0]
    assert got == sum(n for (p, c, _), n in base.items() if (p, c) == ("forward", OP_CALLS))
    newer = table.replace_schema_metadata({work_table.VERSION_KEY: b"2"})
    pq.write_table(newer, tmp_path / "newer.parquet")
    with pytest.raises(store.UnreadableFile, match="newer.parquet: version 2, this nvbench reads 1$"):
        work_table.read_work(tmp_path / "newer.parquet")
