"""A profiled window's events as kernels.parquet rows, on real torch.profiler events: ops under their phase
and outermost aten op, self times adding up to the step; convolutions without oneDNN paired as replaced; the
table read back by DuckDB and by pyarrow alone."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from harness.analysis.judge.kernel_diff import GONE, NEW, REPLACED, diff_cell
from harness.cell.instruments.kernels import kernel_rows
from harness.cell.instruments.timing import BACKWARD, FORWARD, MEASURE, OPTIMIZER, STEP, make_ranges
from harness.results import kernels, store

STEPS = 3


def _profiled_rows(repeat: int, *, mkldnn: bool) -> list[dict]:
    """One profiled window of a small conv net with the cell's own range names, as kernels rows."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3),
                                torch.nn.Flatten(), torch.nn.Linear(16 * 12 * 12, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, ranges = torch.randn(4, 3, 16, 16), make_ranges(False, profiler=True)
    previous = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = mkldnn
    try:
        model(x).sum().backward()  # warm: the first call of a path allocates
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            with ranges(MEASURE):
                for _ in range(STEPS):
                    with ranges(STEP):
                        with ranges(FORWARD):
                            loss = model(x).sum()
                        with ranges(BACKWARD):
                            loss.backward()
                        with ranges(OPTIMIZER):
                            opt.step()
                            opt.zero_grad()
    finally:
        torch.backends.mkldnn.enabled = previous
    return kernel_rows(prof.events(), cell_id="c", repeat=repeat, rank=0, is_cuda=False, steps=STEPS)


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """kernels.parquet of three profiled windows with oneDNN convolutions (A) and three without (B)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tables = {name: kernels.kernels_table([r for rep in range(3) for r in _profiled_rows(rep, mkldnn=on)])
                  for name, on in (("a", True), ("b", False))}
    finally:
        torch.set_num_threads(threads)
    folder = tmp_path_factory.mktemp("kernels")
    for name, table in tables.items():
        store.write_table(folder / f"{name}.parquet", table)
    return folder


def test_ops_fall_under_their_phase_and_outermost_op_and_self_times_add_up_to_the_step(sides):
    rows = [r for r in kernels.read_kernels(sides / "a.parquet").to_pylist() if r["repeat"] == 0]
    by = {(r["phase"], r["operator"], r["kernel"]): r for r in rows}
    conv = by[("forward", "aten::conv2d", "aten::mkldnn_convolution")]
    assert conv["calls_per_step"] == 2 and conv["time_per_step_s"] > 0
    assert ("forward", "aten::conv2d", "aten::convolution") in by  # the wrappers stay under the outer op
    assert {r["phase"] for r in rows} >= {"forward", "backward", "optimizer"}
    assert ("backward", "aten::convolution_backward", "aten::convolution_backward") in by
    assert ("forward", kernels.BETWEEN_OPS, "forward") in by  # the phase's own time between ops
    # self times do not overlap: on one thread they account for the profiled step
    assert sum(r["time_per_step_s"] for r in rows) == pytest.approx(rows[0]["step_time_s"], rel=0.05)


def test_convolutions_without_onednn_are_paired_as_replaced_not_new_and_gone(sides):
    a, b = (kernels.read_kernels(sides / f"{n}.parquet") for n in "ab")
    d = diff_cell(a, b, "c")
    conv = [k for k in d.kernels if (k.phase, k.operator) == ("forward", "aten::conv2d")]
    swapped = [(k.replaced, k.kernel) for k in conv if k.presence == REPLACED]
    assert ("aten::mkldnn_convolution", "aten::_slow_conv2d_forward") in swapped
    alone = {k.kernel for k in conv if k.presence in (NEW, GONE)}
    assert not alone & {"aten::mkldnn_convolution", "aten::_slow_conv2d_forward"}


def test_the_table_reads_in_duckdb_and_pyarrow_alone_and_a_newer_one_is_refused(sides, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    path = sides / "a.parquet"
    got = dict(duckdb.sql(f"select operator, sum(time_per_step_s) from '{path}' where phase = 'forward' "
                          "group by operator").fetchall())
    table = pq.read_table(path)
    forward = [r for r in table.to_pylist() if r["phase"] == "forward"]
    by_hand = {op: sum(r["time_per_step_s"] for r in forward if r["operator"] == op)
               for op in {r["operator"] for r in forward}}
    # the same sums DuckDB reads as pyarrow does (which op is the biggest depends on the machine: on a busy
    # one the Python between this tiny net's ops can outweigh its convolutions)
    assert got.keys() == by_hand.keys() and {"aten::conv2d", kernels.BETWEEN_OPS} <= got.keys()
    assert all(got[op] == pytest.approx(by_hand[op]) for op in got) and got["aten::conv2d"] > 0
    assert table.schema.metadata[kernels.VERSION_KEY] == str(kernels.KERNELS_VERSION).encode()
    assert table.schema.field("time_per_step_s").metadata[b"unit"] == b"s"
    newer = table.replace_schema_metadata({kernels.VERSION_KEY: str(kernels.KERNELS_VERSION + 1).encode()})
    pq.write_table(newer, tmp_path / "newer.parquet")
    with pytest.raises(store.UnreadableFile, match="newer.parquet: version 2, this nvbench reads 1$"):
        kernels.read_kernels(tmp_path / "newer.parquet")
    old = table.drop_columns(["step_time_s"]).replace_schema_metadata({kernels.VERSION_KEY: b"1"})
    pq.write_table(old, tmp_path / "old.parquet")  # a column this version adds reads as null
    assert kernels.read_kernels(tmp_path / "old.parquet").column("step_time_s").null_count == old.num_rows
    assert isinstance(kernels.read_kernels(path), pa.Table)


def _event(name, start, end, *, id=0, linked=0, parent=None, device="DeviceType.CPU", annotation=False):
    """A stand-in for torch.profiler's FunctionEvent with the fields the device path reads (no GPU here)."""
    from types import SimpleNamespace

    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), id=id,
                           linked_correlation_id=linked, cpu_parent=parent, device_type=device, is_async=False,
                           is_user_annotation=annotation, self_cpu_time_total=0.0)


def test_device_kernels_go_to_the_launching_ops_phase_and_a_graph_replay_is_one_item():
    """The GPU path's attribution, on events shaped as torch 2.13 gives them (its run on a GPU is pending):
    a kernel by its launch's correlation id under the outermost op and the launch's phase, though it ran
    later; the kernels of a cudaGraphLaunch as one replay item; a range's GPU span not counted."""
    step, fwd, opt = _event(STEP, 0, 100), _event(FORWARD, 1, 50), _event(OPTIMIZER, 60, 99)
    conv = _event("aten::conv2d", 2, 10, id=7)
    inner = _event("aten::cudnn_convolution", 3, 9, id=8, parent=conv)
    replay = _event("cudaGraphLaunch", 61, 62, linked=9)
    cuda = "DeviceType.CUDA"
    events = [step, fwd, opt, conv, inner, _event("cudaLaunchKernel", 4, 5, linked=8, parent=inner), replay,
              _event("sm90_xmma_fprop", 55, 58, linked=8, device=cuda),  # runs after forward's range closed
              _event("k1", 70, 72, linked=9, device=cuda), _event("k2", 72, 75, linked=9, device=cuda),
              _event(FORWARD, 1, 50, device=cuda, annotation=True)]
    rows = {(r["phase"], r["operator"], r["kernel"]): r
            for r in kernel_rows(events, cell_id="c", repeat=0, rank=0, is_cuda=True, steps=1)}
    assert set(rows) == {("forward", "aten::conv2d", "sm90_xmma_fprop"),
                         ("optimizer", kernels.GRAPH_REPLAY, kernels.GRAPH_REPLAY)}
    assert rows[("forward", "aten::conv2d", "sm90_xmma_fprop")]["time_per_step_s"] == pytest.approx(3e-6)
    graph = rows[("optimizer", kernels.GRAPH_REPLAY, kernels.GRAPH_REPLAY)]
    assert graph["graph_replay"] and graph["calls_per_step"] == 1 and graph["time_per_step_s"] == pytest.approx(5e-6)
