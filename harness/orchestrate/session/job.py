"""One (cell, repeat) job from the parent's side: its folder and job file, the argv and environment its
processes start with, and its row once it ended (written last and atomically: the row marks the job done)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

import harness
from harness import __version__
from harness.orchestrate.session.capabilities import Capabilities, skip_reason
from harness.orchestrate.session.classify import classify, where_killed
from harness.orchestrate.placement.executors import Ended, Executor, Launch
from harness.orchestrate.placement.launch import launcher_for
from harness.orchestrate.placement.local import LocalExecutor
from harness.orchestrate.session.runfolder import compile_cache_dir, mark_lost, write_row
from harness.orchestrate.placement.slots import Grant
from harness.results import store
from harness.results.schema import CELL_SCHEMA
from harness.matrix.cells import Cell, job_key
from harness.matrix.parse import split_axis_filter
from harness.matrix.job import FAULT_ENV, LAUNCHED_AT_ENV, PARENT_PID_ENV
from harness.catalogue import col
from harness.exits import EXIT_CELL_NO_SPACE


def fault_for(cell: Cell, spec: str | None, **job: Any) -> str | None:
    """Match NVBENCH_FAULT rules `axis=value&axis=value:kind[@rank]` (';'-separated, '*' = any) to a cell; `job`
    adds names a rule may match beside the axes (prepare_job: `repeat` and `run`, the run's id)."""
    for rule in filter(None, (spec or "").split(";")):
        matcher, _, kind = rule.rpartition(":")
        conds = [split_axis_filter(c) for c in matcher.split("&") if c and c != "*"]
        names = {**cell.axes, **job}
        if all(c is not None and str(names.get(c[0])) == c[1] for c in conds):
            return kind.strip()
    return None


@dataclass(slots=True)
class JobContext:
    run_dir: Path
    run_id: str
    caps: Capabilities
    env: dict[str, Any]
    env_key: str
    fault_spec: str | None
    data_roots: dict[Any, Path] = field(default_factory=dict)
    notify: Callable[[str], None] = print
    profile: Any = None
    """A harness.orchestrate.workflows.profile.ProfileSpec under `nvbench profile` (run_dir is then RUN/profile); None when timed."""
    fire_drill_pct: float = 0.0
    """Extra work per measured step in % of its cost (nvbench run --fire-drill); recorded in every row."""
    python: str | None = None
    """Interpreter that runs the cells instead of this one (nvbench ab); it runs this checkout's harness."""
    checkout: Path | None = None
    """Checkout whose harness the cells run instead of this one (nvbench ab --a-checkout: the baseline's code)."""


def reads_generated_dataset(cell: Cell) -> bool:
    """Whether the cell's images come from a generated dataset (not synthetic tensors, not data.path)."""
    return cell.backend != "synthetic" and not cell.data.path


def _data_root(cell: Cell, ctx: JobContext) -> Path | None:
    if cell.backend == "synthetic":
        return None
    if not reads_generated_dataset(cell):
        return Path(cell.data.path).expanduser().resolve()
    key = (cell.data.cache_dir, cell.data.generate)
    if key not in ctx.data_roots:
        ctx.data_roots[key] = generated_dataset(cell, ctx.notify)
    return ctx.data_roots[key]


def generated_dataset(cell: Cell, notify: Callable[[str], None] = print) -> Path:
    """The cell's generated dataset in the cache (NVBENCH_CACHE, or ~/.cache/nvbench), made now if missing; an
    absolute path, so the job file says where the images came from whatever the working directory."""
    from harness.data.generate import ensure_dataset

    cache = Path(cell.data.cache_dir or os.environ.get("NVBENCH_CACHE") or Path.home() / ".cache" / "nvbench")
    cache = cache.expanduser().resolve()  # "~/datasets" is the home's, not a folder named "~" here
    g = cell.data.generate
    return ensure_dataset(cache / "datasets", notify=notify, kind=g.kind, image_size=g.image_size,
                          num_classes=g.num_classes, train_per_class=g.train_per_class,
                          val_per_class=g.val_per_class, seed=g.seed)


def base_row(cell: Cell, repeat: int, ctx: JobContext, fault: str | None) -> dict[str, Any]:
    return {
        col.run_id: ctx.run_id, col.cell_id: cell.cell_id, col.cell_label: cell.label, "repeat": repeat, **cell.axes,
        "nnodes": cell.launch.nnodes, "model": cell.benchmark.model, col.batch_size: cell.benchmark.batch_size,
        col.image_size: cell.benchmark.image_size, col.num_classes: cell.benchmark.num_classes,
        col.images_per_step: cell.images_per_step, "device": ctx.caps.device, col.device_name: ctx.caps.device_name,
        col.is_smoke: cell.is_smoke, col.env_key: ctx.env_key, "hostname": ctx.env.get("hostname"),
        col.glibc_tunables: malloc_tunables(cell, os.environ.get("GLIBC_TUNABLES")) or "",
        col.nvbench_version: __version__, col.git_sha: ctx.env.get("nvbench_git_sha"), col.injected_fault: fault,
        col.profile_tool: ctx.profile.tool if ctx.profile else None, col.fire_drill_pct: ctx.fire_drill_pct,
        col.config_json: json.dumps(cell.to_plain(), sort_keys=True),
    }


def run_job(cell: Cell, repeat: int, ctx: JobContext, placed: Placement | None = None,
            executor: Executor | None = None) -> dict[str, Any]:
    """Run one (cell, repeat) to its terminal row, whatever the cell's processes do: on this machine, or through
    `executor` (the run's SLURM, where a cell wider than one node can only run)."""
    executor = executor or LocalExecutor()
    prepared = prepare_job(cell, repeat, ctx, placed=placed, executor=executor.kind)
    if isinstance(prepared, dict):
        return prepared
    handle = executor.submit(prepared.launch)
    try:
        ended = executor.wait([handle])[handle]
    except BaseException:  # interrupted: the cell goes down with the wait
        executor.cancel([handle])
        raise
    return finish_job(prepared, ended, ctx)


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where a local job runs: the slots it holds, and what its row says about the packing."""

    grant: Grant
    packing: str
    """solo, calibrated or uncalibrated (harness/orchestrate/placement/packing.py)."""

    def columns(self) -> dict[str, Any]:
        return self.grant.columns() | {"packing": self.packing}

    def job_section(self) -> dict[str, Any]:
        """The job file's `slot`: what the cell sizes its threads and loader workers to (None: the machine)."""
        return {"index": self.grant.slots[0].index, col.num_slots: len(self.grant.slots),
                "cpus": list(self.grant.pinned_cpus) if self.grant.pinned_cpus else None,
                "packing": self.packing}


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedJob:
    """A job with its folder and job file written, ready for an executor, and its row so far."""

    cell: Cell
    repeat: int
    launch: Launch
    row: dict[str, Any]
    started_at: float
    """time.time() at the submission, for the row's duration."""


def prepare_job(cell: Cell, repeat: int, ctx: JobContext, *, executor: str = "local",
                placed: Placement | None = None, key: str | None = None,
                compile_warmup: bool = False) -> PreparedJob | dict[str, Any]:
    """The job's folder, job file and argv; or its terminal row when it cannot run (skipped, no dataset).
    `placed`: the slots it runs on (local runs); None where a scheduler places it (SLURM) or nothing does.

    `compile_warmup`: the cell's untimed compile-cache warm-up under `key` (harness/orchestrate/session/compile_cache.py):
    its process compiles and leaves, and no row is written for it, not even a terminal one."""
    key = key or job_key(cell.cell_id, repeat)
    fault = fault_for(cell, ctx.fault_spec, repeat=repeat, run=ctx.run_id)
    row = base_row(cell, repeat, ctx, fault)
    started = datetime.now(timezone.utc)
    reason = skip_reason(cell, ctx.caps)
    if reason:
        row |= {"status": "skipped", "reason": reason, col.started_at: started, col.duration_s: 0.0}
        if not compile_warmup:
            write_row(ctx.run_dir, key, row)
        return row
    work = ctx.run_dir / "work" / key
    shutil.rmtree(work, ignore_errors=True)  # leftovers of an interrupted attempt
    work.mkdir(parents=True)
    log_rel = Path("logs") / f"{key}.log"
    log_path = ctx.run_dir / log_rel
    try:  # emptied now, where the cell's output goes: a folder that takes no file stops the run, not the cell
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(b"")
    except OSError as exc:
        if exc.errno in store.FULL_ERRNOS:
            raise store.NoSpace(log_path, 0, exc.errno) from None
        raise store.CannotWrite(log_path, exc.errno or 0, exc.strerror) from None
    try:
        data_root = _data_root(cell, ctx)
    except Exception as exc:  # a dataset that cannot be made is this cell's failure, not the matrix's
        row |= {"status": "failed", "reason": f"dataset: {exc}", col.started_at: started, col.duration_s: 0.0}
        if not compile_warmup:
            write_row(ctx.run_dir, key, row)
        return row
    job = {"cell": cell.to_plain(), col.run_id: ctx.run_id, "repeat": repeat, "device": ctx.caps.device,
           "data_root": str(data_root) if data_root else None, "out_dir": str(work), "fault": fault,
           "profile": ctx.profile.job_section(key, cell.cell_id, repeat) if ctx.profile else None,
           col.fire_drill_pct: ctx.fire_drill_pct, "flops_cache": str(ctx.run_dir / "flops.json"),
           "slot": placed.job_section() if placed else None, "compile_warmup": compile_warmup}
    argv = launcher_for(cell).command(cell, work / "job.json", key)
    if ctx.python:  # every interpreter slot of the command (torchrun's agent and its ranks alike)
        argv = [ctx.python if arg == sys.executable else arg for arg in argv]
    if ctx.profile:
        argv = ctx.profile.command(argv, key)
    job["launched_at"] = time.time()  # the cell measures its startup_s from here
    store.write_json(work / "job.json", job)
    env = _child_env(cell, ctx, placed)
    if executor != "local":  # the runner may be gone while the job runs (kill -9, then --resume): no parent check
        env.pop(PARENT_PID_ENV, None)
    if ctx.profile and ctx.profile.tool == "nsys":  # nsys's launcher is the cell's parent, not this process
        env.pop(PARENT_PID_ENV, None)
    row |= {col.started_at: started, col.log_path: str(log_rel)}
    if placed:  # a job that never started (skipped, no dataset) held no slot worth recording
        row |= placed.columns() | {col.cuda_visible_devices: env.get("CUDA_VISIBLE_DEVICES")}
    launch = Launch(key=key, argv=tuple(argv), env=env, log_path=log_path, work=work,
                    timeout_s=cell.benchmark.timeout_s, nnodes=cell.launch.nnodes,
                    cpus=placed.grant.pinned_cpus if placed else None)
    return PreparedJob(cell=cell, repeat=repeat, launch=launch, row=row, started_at=time.time())


def finish_job(prepared: PreparedJob, ended: Ended, ctx: JobContext) -> dict[str, Any]:
    """Classify an ended job from its exit and the files its ranks left; write its row (last, atomically)."""
    launch, row = prepared.launch, dict(prepared.row)
    if not ended.verdict and ended.outcome.returncode == EXIT_CELL_NO_SPACE \
            and not (launch.work / "result.json").exists():  # its disk is full: the run stops, the job stays pending
        raise store.NoSpace(launch.work / "result.json", None)
    if ended.verdict:
        status, reason = ended.verdict
        if status == "timeout":
            reason += where_killed(launch.work)
    else:
        status, reason = classify(ended.outcome, launch.work, launch.log_path, launch.timeout_s)
        if ended.job_id and status != "ok":
            reason += f" (SLURM job {ended.job_id})"
    row |= {"status": status, "reason": reason, col.duration_s: time.time() - prepared.started_at,
            "nodes": ended.nodes or ctx.env.get("hostname"), col.slurm_job_id: ended.job_id}
    if status == "ok":
        result = store.read_json(launch.work / "result.json")
        row |= {k: v for k, v in result.items() if k in CELL_SCHEMA.names}
    _collect_steps(launch.work, ctx.run_dir / "steps" / f"{launch.key}.parquet")
    if ended.node_failed:  # a node failed, not the cell: `nvbench run --resume` runs it again
        mark_lost(ctx.run_dir, launch.key, ended.lost_nodes)
        ctx.notify(f"{launch.key}: a node of SLURM job {ended.job_id} failed; `nvbench run --resume {ctx.run_dir}` "
                   "runs it again once the node is back")
    write_row(ctx.run_dir, launch.key, row)  # last: the row's existence marks the job done
    shutil.rmtree(launch.work, ignore_errors=True)
    return row


STABLE_MALLOC = {"glibc.malloc.mmap_threshold": "33554432", "glibc.malloc.trim_threshold": "4294967296"}
"""GLIBC_TUNABLES of run.malloc = "stable". With glibc's defaults a CPU training step frees its activations
and the heap top is trimmed back to the kernel (and large blocks are unmapped), so the next step faults
the same memory in again: 0.1-0.85 M minor faults and 0.3-1.9 s of kernel time per 160 resnet18 steps,
depending on the process's allocation history. A fixed mmap threshold (32 MiB, glibc's maximum) and a
trim threshold beyond any heap keep the memory mapped: ~0.1 M faults and ~0.35 s in every process, steps
6-8 % faster (benchmarks/malloc_noise.py, docs/performance.md). The setting is read at process start, so
it can only be given to the cell's processes (torchrun passes it to its ranks, DataLoader workers inherit
it)."""


def malloc_tunables(cell: Cell, inherited: str | None) -> str | None:
    """GLIBC_TUNABLES for the cell's processes: the inherited value with the stable-malloc settings added
    where the user did not set them (theirs win); the inherited value unchanged for run.malloc = "system"."""
    return with_stable_malloc(inherited) if cell.run.malloc == "stable" else inherited


def with_stable_malloc(inherited: str | None) -> str:
    """`inherited` GLIBC_TUNABLES plus STABLE_MALLOC's settings for the names it does not set."""
    items = [item for item in (inherited or "").split(":") if item]
    mine = {item.partition("=")[0] for item in items}
    items += [f"{name}={value}" for name, value in STABLE_MALLOC.items() if name not in mine]
    return ":".join(items)


def _child_env(cell: Cell, ctx: JobContext, placed: Placement | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if placed and placed.grant.cuda_visible_devices:  # its slots' GPUs, by UUID: cuda:0 is the first of them
        env["CUDA_VISIBLE_DEVICES"] = placed.grant.cuda_visible_devices
    tunables = malloc_tunables(cell, env.get("GLIBC_TUNABLES"))
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    env.pop(FAULT_ENV, None)  # the job file carries the matched fault; ranks must not re-match it
    env.pop(LAUNCHED_AT_ENV, None)  # only a SLURM job's own script sets it, just before its srun
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The run's own compile cache, warmed before the timed repeats (compile_cache.py): never another run's
    env["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache_dir(ctx.run_dir))
    env[PARENT_PID_ENV] = str(os.getpid())  # lets the child notice a runner that died as it started
    if ctx.python or ctx.checkout:  # nvbench ab: the side's harness comes first, not the interpreter's own copy
        checkout = str(ctx.checkout or Path(harness.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (checkout, env.get("PYTHONPATH"))))
        # `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH: run from a
        # checkout, it would import that checkout's harness whatever the side asked for (Python >= 3.11).
        env["PYTHONSAFEPATH"] = "1"
    if ctx.caps.device == "cpu" and cell.world_size > 1:
        # The ranks of a node share its cores. torchrun would otherwise force OMP_NUM_THREADS=1; the
        # worker sets torch's intra-op threads itself either way. A single process gets no
        # OMP_NUM_THREADS at all: merely setting it to the core count made the same CPU training loop
        # ~20% slower here (benchmarks/overhead.py, docs/performance.md).
        cores = len(placed.grant.cpus) if placed and not placed.grant.whole_machine else ctx.caps.cpu_count
        threads = cell.run.threads_per_process or max(1, cores // cell.world_size)
        env.setdefault("OMP_NUM_THREADS", str(threads))
    return env


def _collect_steps(work: Path, target: Path) -> None:
    """Merge the ranks' step files (whatever ranks got that far) into one atomic file."""
    parts = sorted(work.glob("steps-rank*.parquet"))
    if parts:
        store.write_table(target, pa.concat_tables([pq.read_table(p) for p in parts]))
