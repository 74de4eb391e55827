"""World size > 1: real torchrun groups (gloo on this CPU machine) train one cell together, on one node or
two; the global throughput adds up from the per-rank step rows; a rank that raises, crashes or hangs ends
its cell as a row naming that rank, within the cell's timeout, leaving no process behind; and each rank
reads its own shard of the data."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from conftest import ROOT, nvbench

from harness.orchestrate.session.capabilities import Capabilities, skip_reason
from harness.orchestrate.session.classify import classify
from harness.orchestrate.placement.launch import Outcome, ProcessLauncher, TorchrunLauncher, launcher_for
from harness.matrix.cells import Cell, expand
from harness.matrix.parse import parse_matrix

MEASURE_STEPS, BATCH, VAL_STEPS = 3, 4, 1
"""What the conftest's tiny matrix runs per cell."""


def _cell(axes: dict | None = None, **launch) -> Cell:
    matrix = parse_matrix({"version": 1, "benchmark": {}, "axes": {"world_size": [2]} | (axes or {}),
                           "launch": launch}, "m.toml")
    return expand(matrix)[0]


def _torchrun(argv: list[str]):
    """Split a launcher's argv at torch.distributed.run and parse the rest with torchrun's own parser."""
    from torch.distributed.run import get_args_parser

    i = argv.index("torch.distributed.run") + 1
    return argv[:i], get_args_parser().parse_args(argv[i:])


def _no_process_left(path: Path, within_s: float = 15.0) -> None:
    """Nothing whose command line names `path` runs (DataLoader workers notice a dead parent within ~5 s)."""
    deadline = time.monotonic() + within_s
    while True:
        left = subprocess.run(["pgrep", "-af", str(path)], capture_output=True, text=True).stdout.strip()
        if not left:
            return
        assert time.monotonic() < deadline, f"processes outlived their cell:\n{left}"
        time.sleep(0.2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _steps_by_rank(run_dir: Path, cell_id: str) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for step in pq.read_table(run_dir / "steps").to_pylist():
        if step["cell_id"] == cell_id:
            out.setdefault(step["rank"], []).append(step)
    return out


# ---------------------------------------------------------------- the commands, against torchrun's parser

def test_single_node_cell_is_a_standalone_torchrun_group(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # else torchrun's config_from_args sets it in this process
    from torch.distributed.run import config_from_args

    job = Path("/runs/r/work/key/job.json")
    assert isinstance(launcher_for(_cell(axes={"world_size": [1]})), ProcessLauncher)
    argv = launcher_for(_cell()).command(_cell(), job)
    prefix, args = _torchrun(argv)
    # The agent is exec'd by the cell's entry point, which first asks to die with the runner (PR_SET_PDEATHSIG).
    assert prefix == [sys.executable, "-m", "harness.cell", "exec", sys.executable, "-m", "torch.distributed.run"]
    assert args.standalone and args.nproc_per_node == "2" and args.max_restarts == 0
    assert (args.module, args.training_script, args.training_script_args) == (True, "harness.cell",
                                                                              ["run", str(job)])
    config, _, _ = config_from_args(args)
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (1, 1, 2)


@pytest.mark.parametrize("backend", ["c10d", "static"])
def test_multi_node_cell_uses_torchruns_own_rendezvous(monkeypatch, backend):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    from torch.distributed.run import config_from_args

    cell = _cell(axes={"world_size": [1]}, nnodes=2, node_rank=1, rdzv_backend=backend,
                 rdzv_endpoint="10.0.0.1:29400", rdzv_id="job42")
    assert isinstance(launcher_for(cell), TorchrunLauncher)  # one process per node is still a group
    _, args = _torchrun(launcher_for(cell).command(cell, Path("job.json"), "cellA-r0"))
    assert not args.standalone
    config, _, _ = config_from_args(args)
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (2, 2, 1)
    assert (config.rdzv_backend, config.rdzv_endpoint) == (backend, "10.0.0.1:29400")
    if backend == "static":  # the node's rank is fixed by the matrix
        assert config.rdzv_configs["rank"] == 1
    else:  # c10d assigns node ranks at the rendezvous: every node may use the same matrix file
        assert "rank" not in config.rdzv_configs
        assert config.rdzv_configs["join_timeout"] == str(int(cell.benchmark.timeout_s / 2))  # never a hang
        assert config.run_id == "job42-cellA-r0"  # a rendezvous of its own per job: no late node joins the next
        other = launcher_for(cell).command(cell, Path("job.json"), "cellA-r1")
        assert config_from_args(_torchrun(other)[1])[0].run_id == "job42-cellA-r1"


def test_world_size_is_checked_against_this_nodes_gpus_or_cores():
    cuda = Capabilities(device="cuda", gpu_count=1, cpu_count=16, device_name="GPU")
    assert skip_reason(_cell(), cuda) == "world_size 2 needs 2 GPUs on this node; 1 visible"
    # world_size counts processes per node: two nodes of one GPU each fit.
    assert skip_reason(_cell(axes={"world_size": [1]}, nnodes=2, rdzv_endpoint="h:1"), cuda) is None
    cpu = Capabilities(device="cpu", gpu_count=0, cpu_count=1, device_name="CPU")
    assert "exceeds the 1 CPU cores" in skip_reason(_cell(), cpu)


# ---------------------------------------------------------------- classification of a group's failure

# torchrun's own summary when rank 1 called os._exit(3) (exit@1); it stopped rank 0 with SIGTERM.
TORCHRUN_EXIT_LOG = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
harness.cell FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_08:27:46
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 11582)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 11582
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_08:27:46
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 11583)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_the_cause_is_the_failing_rank_not_its_peers_collateral_error(tmp_path):
    log = tmp_path / "cell.log"
    log.write_text(TORCHRUN_EXIT_LOG)
    # Rank 0 lost its peer inside a barrier before torchrun stopped it: an error torch.distributed raised.
    (tmp_path / "error-rank0.json").write_text(json.dumps(
        {"rank": 0, "type": "RuntimeError", "message": "[gloo/transport/tcp/pair.cc:537] Connection reset by peer",
         "time": 2.0, "in_collective": True}))
    assert classify(Outcome(1, False), tmp_path, log, 60) == ("crashed", "rank 1 exited with status 3 without a result")
    # Without torchrun's word on rank 1, the collateral error is reported, and called what it is.
    log.write_text(TORCHRUN_EXIT_LOG.replace("exitcode  : 3 (pid", "exitcode  : -15 (pid"))
    status, reason = classify(Outcome(1, False), tmp_path, log, 60)
    assert status == "failed" and reason.startswith("rank 0: RuntimeError: [gloo/")
    assert "a peer rank or node probably failed first" in reason


# ---------------------------------------------------------------- real groups

@pytest.mark.world_size
def test_world_size_2_trains_with_ddp_and_the_throughput_adds_up(tiny_matrix, tmp_path):
    # synthetic at world size 1 (the twin) and 2 with accumulation 1; pytorch (DistributedSampler, past an
    # epoch boundary: 5 batches per rank per epoch) at world size 2 with accumulation 2 (DDP's no_sync).
    # (The fault test below runs pytorch at world size 2 with accumulation 1, 2 and 3 up to its fault.)
    matrix = tiny_matrix('backend = ["synthetic", "pytorch"]\nworld_size = [1, 2]\ngrad_accum = [1, 2]\n'
                         '[[exclude]]\nbackend = "synthetic"\ngrad_accum = 2\n'
                         '[[exclude]]\nbackend = "pytorch"\nworld_size = 1\n'
                         '[[exclude]]\nbackend = "pytorch"\ngrad_accum = 1')
    out = tmp_path / "run"
    proc = nvbench("run", str(matrix), "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["backend"], r["world_size"], r["grad_accum"]): r for r in pq.read_table(out / "cells").to_pylist()}
    assert sorted(rows) == [("pytorch", 2, 2), ("synthetic", 1, 1), ("synthetic", 2, 1)]
    assert {r["status"] for r in rows.values()} == {"ok"}
    single = rows["synthetic", 1, 1]
    for (backend, ws, ga), row in rows.items():
        if ws == 1:
            assert row["phase_allreduce_median_s"] is None  # one process: nothing to all-reduce
            continue
        assert row["nnodes"] == 1 and row["images_per_step"] == BATCH * ga * 2
        assert row["images_measured"] == MEASURE_STEPS * row["images_per_step"]
        # The per-rank step rows: both ranks, every step, and together exactly the images the row counts.
        ranks = _steps_by_rank(out, row["cell_id"])
        assert sorted(ranks) == [0, 1]
        measured = {r: [s for s in steps if not s["is_warmup"]] for r, steps in ranks.items()}
        assert all(len(m) == MEASURE_STEPS for m in measured.values())
        assert sum(s["images"] for m in measured.values() for s in m) == row["images_measured"]
        # The all-reduce wait is a phase of its own on every rank's measured steps. The phases are disjoint
        # stretches of their step (host clocks on CPU), so together they never exceed it: the wait counted in
        # backward too would. (How closely they fill it is the loop's overhead, a timing: benchmarks/, not here.)
        for m in measured.values():
            assert all(s["phase_allreduce_s"] is not None and s["phase_allreduce_s"] >= 0 for s in m)
            parts = [sum(s[f"phase_{p}_s"] or 0.0 for p in ("data", "forward", "backward", "optimizer",
                                                             "allreduce")) for s in m]
            assert all(0 < a <= s["step_time_s"] for a, s in zip(parts, m)), (parts, m)
        assert row["phase_allreduce_median_s"] is not None
        # Global throughput: all images over the common window, the longest rank's, which holds that rank's
        # measured steps (so it is at least the slowest rank's sum of step times).
        slowest = max(sum(s["step_time_s"] for s in m) for m in measured.values())
        assert slowest <= row["window_s"]
        assert row["throughput_img_per_s"] == pytest.approx(row["images_measured"] / row["window_s"], rel=1e-12)
        assert row["throughput_per_process_img_per_s"] == pytest.approx(row["throughput_img_per_s"] / 2, rel=1e-12)
        # Loss and accuracy are all-reduced: validation counted both ranks' images (synthetic data has none).
        val_images = 0 if backend == "synthetic" else VAL_STEPS * BATCH * 2
        assert math.isfinite(row["train_loss"]) and row["num_val_images"] == val_images
        assert (row["top1"] is None) == (backend == "synthetic")
        if ga == 1 and backend == "synthetic":  # scaling efficiency against the world-size-1 twin
            assert row["scaling_efficiency"] == pytest.approx(
                row["throughput_per_process_img_per_s"] / single["throughput_per_process_img_per_s"], rel=1e-12)
        else:  # no world-size-1 twin in this run
            assert row["scaling_efficiency"] is None
        assert "Traceback" not in (out / row["log_path"]).read_text()
    _no_process_left(out)


@pytest.mark.world_size
def test_a_counted_world_size_2_cell_counts_its_gradients_all_reduce_by_call_and_by_byte(tiny_matrix, tmp_path):
    """Issue 56's collectives in a real DDP group (gloo, two ranks): the counted process's rank 0 sees DDP's
    all-reduce called from backward's hooks every step, and the backend's all-reduces carry exactly every
    trainable parameter's fp32 gradient once a step (the model is small enough for DDP's one bucket or a few)."""
    from harness.models import build_model

    matrix = tiny_matrix('backend = ["synthetic"]\nworld_size = [2]')
    out = tmp_path / "run"
    proc = nvbench("run", str(matrix), "--out", str(out), "--no-progress", "--work-repeats", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [r for r in pq.read_table(out / "work.parquet").to_pylist() if r["rank"] == 0]
    calls = [r for r in rows if r["counter"] == "collectives" and r["key"].startswith("c10d::allreduce")]
    assert calls and all(r["phase"] in ("backward", "allreduce") for r in calls), rows
    steps = calls[0]["steps"]
    assert steps >= 1 and sum(r["count"] for r in calls) % steps == 0  # the same calls every step: exact
    grads = sum(p.numel() for p in build_model("resnet18", num_classes=10).parameters() if p.requires_grad)
    reduced = sum(r["count"] for r in rows if r["counter"] == "collective_bytes" and "all_reduce" in r["key"])
    assert reduced == steps * 4 * grads, (reduced, steps, grads)
    _no_process_left(out)


@pytest.mark.world_size
def test_a_failing_rank_ends_its_cell_within_the_timeout_and_leaves_no_process(tiny_matrix, tmp_path):
    timeout = 30  # over 4x the ~7 s a cell with a failing rank took on the 2-core machine
    matrix = tiny_matrix('backend = ["pytorch"]\nworld_size = [2]\ngrad_accum = [1, 2, 3]', timeout=timeout)
    matrix.write_text(matrix.read_text().replace("workers = 0", "workers = 1"))  # DataLoader workers too
    out = tmp_path / "run"
    faults = "grad_accum=1:raise@1;grad_accum=2:segv@1;grad_accum=3:hang@1"
    proc = nvbench("run", str(matrix), "--out", str(out), "--no-progress", env={"NVBENCH_FAULT": faults})
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the matrix completed, with failures
    rows = {r["grad_accum"]: r for r in pq.read_table(out / "cells").to_pylist()}
    assert len(rows) == 3

    raised, crashed, hung = rows[1], rows[2], rows[3]
    assert (raised["status"], raised["reason"]) == ("failed", "rank 1: RuntimeError: injected fault: raise")
    assert (crashed["status"], crashed["reason"]) == ("crashed", "rank 1 killed by SIGSEGV")
    assert raised["duration_s"] < timeout and crashed["duration_s"] < timeout
    assert hung["status"] == "timeout" and f"timeout_s = {timeout} s" in hung["reason"]
    assert timeout <= hung["duration_s"] < timeout + 20
    # Where each rank was when the timeout struck: the hung one always; its peer, where its stack reached the row in
    # time, blocked in the window's barrier (once in 13 runs, 2026-11-29, the peer's stack was missing: its dump
    # races the kill, a known gap, so the peer is checked where it is named)
    assert "rank 1 in inject_fault (harness/cell/faults.py:" in hung["reason"]
    if "rank 0 " in hung["reason"]:
        assert "rank 0 waiting for its peers in _fence (harness/cell/loop.py:" in hung["reason"]
    assert {r["injected_fault"] for r in rows.values()} == {"raise@1", "segv@1", "hang@1"}
    _no_process_left(out)


@pytest.mark.world_size
@pytest.mark.slow
def test_a_runner_killed_mid_cell_takes_its_torchrun_group_with_it(tiny_matrix, tmp_path):
    """The agent and the ranks sit in sessions of their own, out of reach of a process-group kill; they die
    with their parent (PR_SET_PDEATHSIG): runner -> agent -> ranks."""
    out = tmp_path / "run"
    runner = subprocess.Popen([sys.executable, "-m", "harness", "run", str(tiny_matrix("world_size = [2]")),
                               "--out", str(out), "--no-progress"], cwd=ROOT, env=dict(os.environ, NVBENCH_FAULT="*:hang@1"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    work = out / "work"
    while len(list(work.glob("*/stack-rank*.txt"))) < 2:  # both ranks are up (each opened its stack file)
        assert time.monotonic() < deadline and runner.poll() is None, "the ranks did not start"
        time.sleep(0.2)
    runner.kill()
    runner.wait()
    _no_process_left(out, within_s=10)


def _two_node_matrix(tiny_matrix, **launch) -> list[Path]:
    """One matrix file per node: the tiny synthetic cell at world_size 1 per node, two nodes."""
    lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in launch.items() if k != "node_rank")
    paths = []
    for node in range(2):
        written = tiny_matrix(extra=f"[launch]\nnnodes = 2\n{lines}node_rank = {node}\n")
        paths.append(written.with_name(f"node{node}.toml"))
        paths[-1].write_text(written.read_text())
    return paths


def _run_two_nodes(matrices: list[Path], tmp_path: Path) -> list[Path]:
    outs = [tmp_path / f"node{n}" for n in range(2)]
    procs = [subprocess.Popen([sys.executable, "-m", "harness", "run", str(m), "--out", str(o), "--no-progress"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for m, o in zip(matrices, outs)]
    try:
        for p in procs:
            output, _ = p.communicate(timeout=240)
            assert p.returncode == 0, output
    finally:
        for p in procs:
            p.kill()
    return outs


def _assert_one_cell_across_two_nodes(outs: list[Path]) -> None:
    rows = [pq.read_table(o / "cells").to_pylist() for o in outs]
    assert [len(r) for r in rows] == [1, 1]
    a, b = rows[0][0], rows[1][0]
    for row in (a, b):  # each node's local rank 0 wrote the cell's global figures: a full row per node
        assert row["status"] == "ok" and row["nnodes"] == 2 and row["images_per_step"] == BATCH * 2
        assert row["images_measured"] == MEASURE_STEPS * BATCH * 2
        assert row["throughput_per_process_img_per_s"] == pytest.approx(row["throughput_img_per_s"] / 2, rel=1e-12)
        assert row["num_val_images"] == 0  # synthetic data is not validated
    # All-reduced loss and max-reduced window: the two rows report one measurement.
    for key in ("window_s", "throughput_img_per_s", "train_loss", "val_loss"):
        assert a[key] == b[key], key
    # Each node keeps its own ranks' step rows; together they are the whole group.
    ranks = [sorted({s["rank"] for s in pq.read_table(o / "steps").to_pylist()}) for o in outs]
    assert sorted(ranks) == [[0], [1]]
    for out in outs:
        _no_process_left(out)


@pytest.mark.world_size
def test_two_nodes_meet_at_a_c10d_rendezvous_and_train_one_cell(tiny_matrix, tmp_path):
    # c10d: node ranks are assigned at the rendezvous, so both nodes may run the very same file.
    (matrix, _) = _two_node_matrix(tiny_matrix, rdzv_endpoint=f"127.0.0.1:{_free_port()}", rdzv_id="two-nodes")
    outs = _run_two_nodes([matrix, matrix], tmp_path)
    _assert_one_cell_across_two_nodes(outs)
    cell_ids = {pq.read_table(o / "cells").column("cell_id")[0].as_py() for o in outs}
    assert len(cell_ids) == 1


@pytest.mark.world_size
@pytest.mark.slow
def test_two_nodes_meet_at_a_static_rendezvous(tiny_matrix, tmp_path):
    matrices = _two_node_matrix(tiny_matrix, rdzv_backend="static", rdzv_endpoint=f"127.0.0.1:{_free_port()}")
    _assert_one_cell_across_two_nodes(_run_two_nodes(matrices, tmp_path))


# ---------------------------------------------------------------- shards, through what a rank runs

@pytest.fixture(scope="module")
def one_image_per_class(tmp_path_factory) -> Path:
    """16 classes of one image each: a label names its sample."""
    from harness.data.generate import make_dataset

    return make_dataset(tmp_path_factory.mktemp("ids") / "ds", image_size=20, num_classes=16,
                        train_per_class=1, val_per_class=1, seed=0)


def _rank_context(backend: str, root: Path | None, rank: int):
    from harness.cell.context import Context
    from harness.cell.instruments.timing import make_ranges

    matrix = parse_matrix({"version": 1,
                           "benchmark": {"num_classes": 16, "image_size": 16, "batch_size": 2, "seed": 5},
                           "data": {"workers": 0, "dali_threads": 1}, "axes": {"backend": [backend],
                                                                               "world_size": [2]}}, "m.toml")
    return Context(cell=expand(matrix)[0], run_id="r", repeat=0, out_dir=Path("."), data_root=root,
                   fault=None, rank=rank, local_rank=rank, world_size=2, device=torch.device("cpu"),
                   ranges=make_ranges(False))


@pytest.mark.parametrize("backend", ["pytorch", "dali-cpu"])
def test_each_rank_reads_its_own_shard_every_epoch(one_image_per_class, backend):
    """The cell's own rank_loader(ctx), an endless stream, for ranks 0 and 1 of 2: per epoch the ranks' samples
    are disjoint and together the whole training set (DistributedSampler's split or DALI's shard_id), and
    each epoch is reshuffled. A run's step rows show each process carried its own rank (test above)."""
    from harness.cell.build import rank_loader
    from harness.data import unavailable_reason

    if unavailable_reason(backend, "cpu"):
        pytest.skip(unavailable_reason(backend, "cpu"))
    loaders = [rank_loader(_rank_context(backend, one_image_per_class, r), "train") for r in range(2)]
    try:
        assert [len(loader) for loader in loaders] == [4, 4]  # 16 samples / 2 ranks / batch 2
        streams = [iter(loader) for loader in loaders]
        epochs = []
        for _ in range(2):
            seen = [[int(label) for _, (_, labels) in zip(range(4), stream) for label in labels] for stream in streams]
            assert not set(seen[0]) & set(seen[1])
            assert sorted(seen[0] + seen[1]) == list(range(16))
            epochs.append(seen)
        assert epochs[0] != epochs[1]  # reshuffled
    finally:
        for loader in loaders:
            loader.close()


def test_synthetic_ranks_draw_different_batches_from_their_seeds():
    from harness.cell.build import rank_loader

    batches = [next(iter(rank_loader(_rank_context("synthetic", None, r), "train"))) for r in range(2)]
    assert not torch.equal(batches[0][0], batches[1][0])
    again = next(iter(rank_loader(_rank_context("synthetic", None, 0), "train")))
    assert torch.equal(batches[0][0], again[0])


def test_a_failing_rank_still_destroys_its_process_group(tmp_path, monkeypatch):
    """worker.main releases the process group in a finally: a rank that raised leaves no communicator."""
    import torch.distributed as dist

    from harness.cell import worker
    from harness.results import store

    def setup_then_fail(job):
        dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
        raise RuntimeError("the cell failed after joining its group")

    monkeypatch.setattr(worker, "_setup", setup_then_fail)
    monkeypatch.setattr(worker, "_stack_on_sigterm", lambda path: None)
    job = tmp_path / "job.json"
    store.write_json(job, {"out_dir": str(tmp_path)})
    assert worker.main([str(job)]) == 1
    assert not dist.is_initialized()
    assert "the cell failed" in store.read_json(tmp_path / "error-rank0.json")["message"]
