"""Schedules (cell, repeat) jobs, one fresh process (or torchrun group) each, with timeouts and resume.

A run folder holds plan.json (the resolved cells and the job order, written before anything runs),
manifest.json, logs/, steps/ and cells/. A job is done exactly when cells/<job>.parquet exists; that
file is written last and atomically, so a runner killed at any moment resumes without duplicates.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
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
from harness.orchestrate.executors import Ended, Executor, Launch, LocalExecutor, executor_for
from harness.orchestrate.launch import Outcome, launcher_for
from harness.results import store
from harness.results.env import usable_cpu_count
from harness.results.schema import CELL_SCHEMA, cell_table
from harness.spec.cells import Cell, job_key, schedule
from harness.spec.executor import ExecutorConfig
from harness.spec.job import FAULT_ENV, LAUNCHED_AT_ENV, PARENT_PID_ENV
from harness.spec.matrix import AXES, Axes, Matrix, from_plain, to_plain

PLAN = "plan.json"
AXIS_DEFAULTS = {axis: getattr(Axes(), axis)[0] for axis in AXES}
"""Each axis's value in rows written before the axis existed (compile: eager)."""
MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What this machine offers cells; probed once per runner session."""

    device: str
    """cuda or cpu: where cells train."""
    gpu_count: int
    cpu_count: int
    device_name: str | None
    reason: str | None = None
    """Why the requested device is not available (every cell is then skipped with it)."""


def probe_capabilities(requested: str, env: dict[str, Any]) -> Capabilities:
    """From the environment fingerprint (NVML-based): the parent never initialises CUDA itself."""
    gpus = int(env.get("gpu_count") or 0) if env.get("device_kind") == "cuda" else 0
    cpus = usable_cpu_count()
    if requested == "cpu" or (requested == "auto" and gpus == 0):
        return Capabilities(device="cpu", gpu_count=gpus, cpu_count=cpus, device_name=env.get("cpu_model"))
    reason = None if gpus else "run.device = 'cuda' but no CUDA device is visible on this machine"
    return Capabilities(device="cuda", gpu_count=gpus, cpu_count=cpus, device_name=env.get("gpu_name"),
                        reason=reason)


def skip_reason(cell: Cell, caps: Capabilities) -> str | None:
    """Why this machine cannot run the cell, decided without launching anything heavy."""
    from harness.data import unavailable_reason

    if caps.reason:
        return caps.reason
    reason = unavailable_reason(cell.backend, caps.device)
    if reason:
        return reason
    if cell.compile == "cudagraph" and caps.device != "cuda":
        return "compile = cudagraph captures the step as a CUDA graph; this run trains on the CPU"
    if cell.compile == "cudagraph" and cell.world_size * cell.launch.nnodes > 1:
        return "compile = cudagraph captures one process's step; DDP groups (world_size > 1) are not captured"
    if caps.device == "cuda" and cell.world_size > caps.gpu_count:
        return (f"world_size {cell.world_size} needs {cell.world_size} GPUs on this node; "
                f"{caps.gpu_count} visible")
    if caps.device == "cpu" and cell.world_size > caps.cpu_count:
        return (f"world_size {cell.world_size} exceeds the {caps.cpu_count} CPU cores of this machine "
                "(without CUDA each rank is a gloo process on its own core)")
    return None


# ---------------------------------------------------------------- faults (tests and fire drills only)

def fault_for(cell: Cell, spec: str | None) -> str | None:
    """Match NVBENCH_FAULT rules `axis=value&axis=value:kind[@rank]` (';'-separated, '*' = any) to a cell."""
    for rule in filter(None, (spec or "").split(";")):
        matcher, _, kind = rule.rpartition(":")
        conds = [c.partition("=") for c in matcher.split("&") if c and c != "*"]
        if all(str(cell.axes.get(axis.strip())) == value.strip() for axis, _, value in conds):
            return kind.strip()
    return None


# ---------------------------------------------------------------- the run folder

def new_run_id(name: str, now: datetime) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "run"
    return f"{now:%Y%m%d-%H%M%S}-{slug}-{secrets.token_hex(2)}"


def create_run(matrix: Matrix, cells: list[Cell], *, run_dir: Path | None, reports_root: Path,
               smoke: bool, only: list[str], env: dict[str, Any], now: datetime | None = None,
               fire_drill_pct: float = 0.0, executor: ExecutorConfig | None = None) -> Path:
    """Make the run folder with its plan and manifest; nothing runs yet.

    `fire_drill_pct` > 0 makes every job of the run a fire drill (extra work of that % of each measured
    step, see faults.FireDrill): the plan carries it, so a resumed run drills the same way. `executor` (the
    matrix's [executor] with `--executor` applied) is the plan's too: a resumed run runs where it began.
    """
    now = now or datetime.now(timezone.utc)
    run_id = new_run_id(matrix.benchmark.name, now) if run_dir is None else Path(run_dir).name
    run_dir = Path(run_dir) if run_dir is not None else reports_root / run_id
    if (run_dir / PLAN).exists():
        raise FileExistsError(f"{run_dir} already holds a run; finish it with `nvbench run --resume {run_dir}`")
    by_id = {c.cell_id: c for c in cells}
    jobs = schedule(list(by_id), matrix.run.repeats, matrix.run.order, matrix.run.shuffle_seed)
    plan = {"run_id": run_id, "jobs": jobs, "cells": {cid: c.to_plain() for cid, c in by_id.items()},
            "fire_drill_pct": fire_drill_pct, "executor": to_plain(executor or matrix.executor)}
    manifest = {
        "run_id": run_id, "created_at": now.isoformat(), "nvbench_version": __version__,
        "git_sha": env.get("nvbench_git_sha"), "host": env.get("hostname"), "matrix_source": matrix.source,
        "matrix_text": matrix.source_text, "smoke": smoke, "only": only, "repeats": matrix.run.repeats,
        "order": matrix.run.order, "shuffle_seed": matrix.run.shuffle_seed, "num_cells": len(by_id),
        "num_jobs": len(jobs), "environment": env, "sessions": [], "fire_drill_pct": fire_drill_pct,
    }
    store.write_json(run_dir / PLAN, plan)
    store.write_json(run_dir / MANIFEST, manifest)
    return run_dir


class RunFolderError(ValueError):
    """A folder that is not a run this nvbench can finish; the message is one line naming the file."""


def load_plan(run_dir: Path) -> tuple[str, list[tuple[str, int]], dict[str, Cell]]:
    """(run id, jobs in run order, cells by id) of a run folder; RunFolderError when it is not one this nvbench
    made, or its plan does not read back."""
    run_dir = Path(run_dir)
    plan, manifest = _run_file(run_dir, PLAN), _run_file(run_dir, MANIFEST)
    if not isinstance(manifest.get("sessions"), list):
        raise RunFolderError(f"{run_dir / MANIFEST}: not an nvbench manifest (no list of sessions)")
    made_by = manifest.get("nvbench_version")
    if made_by != __version__:
        raise RunFolderError(f"{run_dir / MANIFEST}: the run was made by nvbench {made_by}, this is {__version__}; "
                             "finish it with that version or start a new run")
    try:
        cells = {str(cid): Cell.from_plain(c) for cid, c in plan["cells"].items()}
        jobs = [(str(cid), int(r)) for cid, r in plan["jobs"]]
        run_id = str(plan["run_id"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RunFolderError(f"{run_dir / PLAN}: not a plan this nvbench can read "
                             f"({type(exc).__name__}: {exc})") from None
    if not jobs or any(cid not in cells for cid, _ in jobs):
        raise RunFolderError(f"{run_dir / PLAN}: its jobs name no cell, or cells it does not hold")
    return run_id, jobs, cells


def _run_file(run_dir: Path, name: str) -> dict[str, Any]:
    path = run_dir / name
    try:
        data = store.read_json(path)
    except FileNotFoundError:
        raise RunFolderError(f"{run_dir}: not an nvbench run folder (no {name})") from None
    except (store.UnreadableFile, OSError) as exc:
        raise RunFolderError(str(exc) if isinstance(exc, store.UnreadableFile) else f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: not an nvbench {name} (a JSON object)")
    return data


def plan_fire_drill(run_dir: Path) -> float:
    """The run's fire-drill percentage (0.0 for real runs and for plans written before fire drills)."""
    return float(store.read_json(Path(run_dir) / PLAN).get("fire_drill_pct") or 0.0)


def pending(run_dir: Path, jobs: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Jobs without a terminal row."""
    return [(cid, r) for cid, r in jobs if not (run_dir / "cells" / f"{job_key(cid, r)}.parquet").exists()]


# ---------------------------------------------------------------- one job

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
    """A harness.orchestrate.profile.ProfileSpec under `nvbench profile` (run_dir is then RUN/profile); None when timed."""
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


# torchrun's failure summary (ChildFailedError) gives each failed worker's global rank and exit code.
_TORCHRUN_FAILURE = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.M)
# A faulthandler dump (the worker writes one per rank on SIGTERM): frames innermost first.
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def _killed_by(code: int) -> str:
    return f"killed by {_signal_name(code)}" + (" (the kernel OOM killer sends this)" if code == signal.SIGKILL else "")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _log_tail(log_path: Path, lines: int = 1) -> str:
    text = _read(log_path).strip().splitlines()
    return " | ".join(t.strip() for t in text[-lines:])


def _where(dump: str) -> str | None:
    """'in FUNC (harness/FILE:LINE)' at the innermost nvbench frame of a faulthandler dump; None if none.

    The thread running nvbench code is the one that matters; frames of torch.distributed above it mean
    the rank was waiting for its peers, not stuck itself.
    """
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump):
        frames = _FRAME.findall(block)
        for i, (file, line, func) in enumerate(frames):
            if "/harness/" in file:
                waiting = any("torch/distributed/" in f for f, _, _ in frames[:i])
                here = f"{func} ({file[file.rindex('/harness/') + 1:]}:{line})"
                return f"waiting for its peers in {here}" if waiting else f"in {here}"
    return None


def _timeout_reason(work: Path, timeout_s: float) -> str:
    reason = f"no exit within timeout_s = {timeout_s:g} s; the cell's processes were killed"
    stacks = {int(p.stem.removeprefix("stack-rank")): _where(_read(p)) for p in work.glob("stack-rank*.txt")}
    wheres = [f"rank {rank} {where}" for rank, where in sorted(stacks.items()) if where]
    return reason + (f"; at the kill: {', '.join(wheres)}" if wheres else "")


def classify(outcome: Outcome, work: Path, log_path: Path, timeout_s: float) -> tuple[str, str]:
    """(status, reason) of a finished job from its exit and the files its ranks left.

    In a torchrun group one rank's failure makes the others fail too (a collective loses its peer, torchrun
    stops the rest with SIGTERM), so the cause is chosen in order: a rank's own exception; a rank killed by
    a signal torchrun did not send, or exited without writing its error (both from torchrun's log); an
    error torch.distributed raised on a surviving rank.
    """
    if outcome.timed_out:
        return "timeout", _timeout_reason(work, timeout_s)
    if outcome.returncode == 0 and (work / "result.json").exists():
        return "ok", ""
    errors = sorted((store.read_json(p) for p in work.glob("error-rank*.json")),
                    key=lambda e: (bool(e.get("in_collective")), e.get("time", 0.0), e["rank"]))
    if errors and not errors[0].get("in_collective"):
        return "failed", f"rank {errors[0]['rank']}: {errors[0]['type']}: {errors[0]['message']}"
    exits = {int(r): int(c) for r, c in _TORCHRUN_FAILURE.findall(_read(log_path))}
    for rank, code in sorted(exits.items()):
        if code < 0 and code != -signal.SIGTERM:
            return "crashed", f"rank {rank} {_killed_by(-code)}"
    reported = {e["rank"] for e in errors}
    for rank, code in sorted(exits.items()):
        if code > 0 and rank not in reported:
            return "crashed", f"rank {rank} exited with status {code} without a result"
    if errors:
        err = errors[0]
        return "failed", (f"rank {err['rank']}: {err['type']}: {err['message']} (raised by torch.distributed: "
                          "a peer rank or node probably failed first; see its log)")
    code = outcome.returncode
    if code is not None and code < 0:
        return "crashed", _killed_by(-code)
    tail = _log_tail(log_path)
    return "crashed", f"exited with status {code} without a result" + (f": {tail}" if tail else "")


def base_row(cell: Cell, repeat: int, ctx: JobContext, fault: str | None) -> dict[str, Any]:
    return {
        "run_id": ctx.run_id, "cell_id": cell.cell_id, "repeat": repeat, **cell.axes,
        "nnodes": cell.launch.nnodes, "model": cell.benchmark.model, "batch_size": cell.benchmark.batch_size,
        "image_size": cell.benchmark.image_size, "num_classes": cell.benchmark.num_classes,
        "images_per_step": cell.images_per_step, "device": ctx.caps.device, "device_name": ctx.caps.device_name,
        "is_smoke": cell.is_smoke, "env_key": ctx.env_key, "hostname": ctx.env.get("hostname"),
        "glibc_tunables": malloc_tunables(cell, os.environ.get("GLIBC_TUNABLES")) or "",
        "nvbench_version": __version__, "git_sha": ctx.env.get("nvbench_git_sha"), "injected_fault": fault,
        "profile_tool": ctx.profile.tool if ctx.profile else None, "fire_drill_pct": ctx.fire_drill_pct,
        "config_json": json.dumps(cell.to_plain(), sort_keys=True),
    }


def write_row(run_dir: Path, key: str, row: dict[str, Any]) -> None:
    store.write_table(run_dir / "cells" / f"{key}.parquet", cell_table([row]))


def run_job(cell: Cell, repeat: int, ctx: JobContext) -> dict[str, Any]:
    """Run one (cell, repeat) on this machine to its terminal row, whatever the cell's processes do."""
    prepared = prepare_job(cell, repeat, ctx)
    if isinstance(prepared, dict):
        return prepared
    executor = LocalExecutor()
    handle = executor.submit(prepared.launch)
    return finish_job(prepared, executor.wait([handle])[handle], ctx)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedJob:
    """A job with its folder and job file written, ready for an executor, and its row so far."""

    cell: Cell
    repeat: int
    launch: Launch
    row: dict[str, Any]
    started_at: float
    """time.time() at the submission, for the row's duration."""


def prepare_job(cell: Cell, repeat: int, ctx: JobContext, *, executor: str = "local") -> PreparedJob | dict[str, Any]:
    """The job's folder, job file and argv; or its terminal row when it cannot run (skipped, no dataset)."""
    key = job_key(cell.cell_id, repeat)
    fault = fault_for(cell, ctx.fault_spec)
    row = base_row(cell, repeat, ctx, fault)
    started = datetime.now(timezone.utc)
    reason = skip_reason(cell, ctx.caps)
    if reason:
        row |= {"status": "skipped", "reason": reason, "started_at": started, "duration_s": 0.0}
        write_row(ctx.run_dir, key, row)
        return row
    work = ctx.run_dir / "work" / key
    shutil.rmtree(work, ignore_errors=True)  # leftovers of an interrupted attempt
    work.mkdir(parents=True)
    log_rel = Path("logs") / f"{key}.log"
    log_path = ctx.run_dir / log_rel
    log_path.unlink(missing_ok=True)
    try:
        data_root = _data_root(cell, ctx)
    except Exception as exc:  # a dataset that cannot be made is this cell's failure, not the matrix's
        row |= {"status": "failed", "reason": f"dataset: {exc}", "started_at": started, "duration_s": 0.0}
        write_row(ctx.run_dir, key, row)
        return row
    job = {"cell": cell.to_plain(), "run_id": ctx.run_id, "repeat": repeat, "device": ctx.caps.device,
           "data_root": str(data_root) if data_root else None, "out_dir": str(work), "fault": fault,
           "profile": ctx.profile.job_section(key) if ctx.profile else None,
           "fire_drill_pct": ctx.fire_drill_pct, "flops_cache": str(ctx.run_dir / "flops.json")}
    argv = launcher_for(cell).command(cell, work / "job.json", key)
    if ctx.python:  # every interpreter slot of the command (torchrun's agent and its ranks alike)
        argv = [ctx.python if arg == sys.executable else arg for arg in argv]
    if ctx.profile:
        argv = ctx.profile.command(argv, key)
    job["launched_at"] = time.time()  # the cell measures its startup_s from here
    store.write_json(work / "job.json", job)
    env = _child_env(cell, ctx)
    if executor != "local":  # the runner may be gone while the job runs (kill -9, then --resume): no parent check
        env.pop(PARENT_PID_ENV, None)
    if ctx.profile and ctx.profile.tool == "nsys":  # nsys's launcher is the cell's parent, not this process
        env.pop(PARENT_PID_ENV, None)
    row |= {"started_at": started, "log_path": str(log_rel)}
    launch = Launch(key=key, argv=tuple(argv), env=env, log_path=log_path, work=work,
                    timeout_s=cell.benchmark.timeout_s, nnodes=cell.launch.nnodes)
    return PreparedJob(cell=cell, repeat=repeat, launch=launch, row=row, started_at=time.time())


def finish_job(prepared: PreparedJob, ended: Ended, ctx: JobContext) -> dict[str, Any]:
    """Classify an ended job from its exit and the files its ranks left; write its row (last, atomically)."""
    launch, row = prepared.launch, dict(prepared.row)
    if ended.verdict:
        status, reason = ended.verdict
        if status == "timeout":
            reason += _timeout_reason(launch.work, launch.timeout_s).partition("were killed")[2]
    else:
        status, reason = classify(ended.outcome, launch.work, launch.log_path, launch.timeout_s)
        if ended.job_id and status != "ok":
            reason += f" (SLURM job {ended.job_id})"
    row |= {"status": status, "reason": reason, "duration_s": time.time() - prepared.started_at,
            "nodes": ended.nodes or ctx.env.get("hostname"), "slurm_job_id": ended.job_id}
    if status == "ok":
        result = store.read_json(launch.work / "result.json")
        row |= {k: v for k, v in result.items() if k in CELL_SCHEMA.names}
    _collect_steps(launch.work, ctx.run_dir / "steps" / f"{launch.key}.parquet")
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


def _child_env(cell: Cell, ctx: JobContext) -> dict[str, str]:
    env = dict(os.environ)
    tunables = malloc_tunables(cell, env.get("GLIBC_TUNABLES"))
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    env.pop(FAULT_ENV, None)  # the job file carries the matched fault; ranks must not re-match it
    env.pop(LAUNCHED_AT_ENV, None)  # only a SLURM job's own script sets it, just before its srun
    env.setdefault("PYTHONUNBUFFERED", "1")
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
        threads = cell.run.threads_per_process or max(1, ctx.caps.cpu_count // cell.world_size)
        env.setdefault("OMP_NUM_THREADS", str(threads))
    return env


def _collect_steps(work: Path, target: Path) -> None:
    """Merge the ranks' step files (whatever ranks got that far) into one atomic file."""
    parts = sorted(work.glob("steps-rank*.parquet"))
    if parts:
        store.write_table(target, pa.concat_tables([pq.read_table(p) for p in parts]))


# ---------------------------------------------------------------- a session over the run folder

INFLIGHT = "inflight.json"
"""Jobs of the run submitted to an executor and not yet rows: key -> the executor's record (SLURM job id)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run, after the jobs this session submitted were cancelled (`cancelled` lists them)."""

    def __init__(self, cancelled: list[str]):
        super().__init__()
        self.cancelled = cancelled


def plan_executor(run_dir: Path) -> ExecutorConfig:
    """The executor the run was planned with (local for plans written before executors)."""
    plain = store.read_json(Path(run_dir) / PLAN).get("executor") or {}
    return from_plain(ExecutorConfig, plain)


def execute(run_dir: Path, *, caps: Capabilities, env: dict[str, Any], env_key: str,
            on_start: Callable[[int, int, str], None] | None = None,
            on_done: Callable[[dict[str, Any]], None] | None = None,
            notify: Callable[[str], None] = print, executor: Executor | None = None) -> list[dict[str, Any]]:
    """Run every pending job of the run folder in plan order through the run's executor (at most its
    max_parallel in flight); return the rows written in this session.

    Jobs an earlier session left in flight (inflight.json) are followed, not submitted again; Ctrl-C cancels
    the jobs this session has in flight, forgets them (a resume submits them again) and raises Interrupted.
    """
    run_id, jobs, cells = load_plan(run_dir)
    todo = pending(run_dir, jobs)
    executor = executor or executor_for(plan_executor(run_dir), notify=notify)
    ctx = JobContext(run_dir=run_dir, run_id=run_id, caps=caps, env=env, env_key=env_key,
                     fault_spec=os.environ.get(FAULT_ENV), notify=notify,
                     fire_drill_pct=plan_fire_drill(run_dir))
    manifest = store.read_json(run_dir / MANIFEST)
    session = {"started_at": datetime.now(timezone.utc).isoformat(), "pending_at_start": len(todo),
               "executor": executor.kind}
    manifest["sessions"].append(session)
    store.write_json(run_dir / MANIFEST, manifest)
    flight = _Flight(run_dir, executor)
    rows = []

    def done(row: dict[str, Any]) -> None:
        rows.append(row)
        if on_done:
            on_done(row)

    try:
        queue = flight.adopt(todo, cells, ctx)
        started = len(todo) - len(queue)
        while queue or flight.jobs:
            while queue and len(flight.jobs) < executor.max_parallel:
                cid, repeat = queue.pop(0)
                if on_start:
                    on_start(started, len(todo), job_key(cid, repeat))
                started += 1
                prepared = prepare_job(cells[cid], repeat, ctx, executor=executor.kind)
                if isinstance(prepared, dict):
                    done(prepared)
                else:
                    flight.submit(prepared)
            for handle, ended in (executor.wait(list(flight.jobs)) if flight.jobs else {}).items():
                done(finish_job(flight.pop(handle), ended, ctx))
    except KeyboardInterrupt:
        raise Interrupted(flight.cancel_all()) from None
    derive_twin_columns(run_dir)
    session["finished_at"] = datetime.now(timezone.utc).isoformat()
    manifest["finished_at"] = session["finished_at"]
    manifest |= matrix_efficiency(manifest["sessions"], store.read_cells(run_dir).to_pylist())
    store.write_json(run_dir / MANIFEST, manifest)
    shutil.rmtree(run_dir / "work", ignore_errors=True)
    (run_dir / INFLIGHT).unlink(missing_ok=True)
    return rows


class _Flight:
    """The jobs in flight, mirrored in the run folder's inflight.json before and after every change."""

    def __init__(self, run_dir: Path, executor: Executor):
        self.run_dir, self.executor = run_dir, executor
        self.jobs: dict[str, PreparedJob] = {}
        self.mine: list[str] = []
        path = run_dir / INFLIGHT
        self.records: dict[str, dict[str, Any]] = store.read_json(path) if path.exists() else {}

    def _save(self) -> None:
        store.write_json(self.run_dir / INFLIGHT, self.records)

    def adopt(self, todo: list[tuple[str, int]], cells: dict[str, Cell], ctx: JobContext) -> list[tuple[str, int]]:
        """Follow the jobs an earlier session left running or pending; return the jobs still to submit."""
        queue = []
        for cid, repeat in todo:
            key = job_key(cid, repeat)
            record = self.records.get(key)
            prepared = _readopted(cells[cid], repeat, ctx, record) if record else None
            handle = self.executor.adopt(record, prepared.launch) if prepared else None
            if handle is None:
                self.records.pop(key, None)
                queue.append((cid, repeat))
            else:
                self.jobs[handle] = prepared
                ctx.notify(f"{key}: following SLURM job {handle} submitted by an earlier session")
        self._save()
        return queue

    def submit(self, prepared: PreparedJob) -> None:
        key = prepared.launch.key
        self.records[key] = {"executor": self.executor.kind, "state": "submitting",
                             "submitted_at": prepared.started_at, "row": _plain_row(prepared.row)}
        self._save()
        handle = self.executor.submit(prepared.launch)
        self.jobs[handle] = prepared
        self.mine.append(handle)
        self.records[key] |= self.executor.record(handle) | {"state": "submitted"}
        self._save()

    def pop(self, handle: str) -> PreparedJob:
        prepared = self.jobs.pop(handle)
        self.records.pop(prepared.launch.key, None)
        self._save()
        return prepared

    def cancel_all(self) -> list[str]:
        """Cancel this session's jobs in flight and forget them, so that a resume runs them again."""
        ours = [h for h in self.jobs if h in self.mine]
        cancelled = self.executor.cancel(ours)
        for handle in ours:
            self.records.pop(self.jobs.pop(handle).launch.key, None)
        self._save()
        return cancelled


def _plain_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in row.items()}


def _readopted(cell: Cell, repeat: int, ctx: JobContext, record: dict[str, Any]) -> PreparedJob | None:
    """The PreparedJob of a job an earlier session submitted, from its record and its folder."""
    key = job_key(cell.cell_id, repeat)
    work = ctx.run_dir / "work" / key
    if record.get("state") not in ("submitted", "submitting") or not (work / "job.json").exists():
        return None
    row = dict(record["row"])
    row["started_at"] = datetime.fromisoformat(row["started_at"])
    launch = Launch(key=key, argv=(), env={}, log_path=ctx.run_dir / "logs" / f"{key}.log", work=work,
                    timeout_s=cell.benchmark.timeout_s, nnodes=cell.launch.nnodes)
    return PreparedJob(cell=cell, repeat=repeat, launch=launch, row=row, started_at=float(record["submitted_at"]))


PHASES = ("startup_s", "build_s", "compile_s", "warmup_window_s", "window_s", "val_s")
"""Where a job's time goes, in the order it goes there (the rest of a job is its process's exit and the
runner's own work between launch and row)."""


def matrix_efficiency(sessions: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's measured share of its wall time: the measured windows of its ok rows over the wall time of
    every session that ran it (a resumed run counts each session), with where the rest went."""
    wall = sum((datetime.fromisoformat(s["finished_at"]) - datetime.fromisoformat(s["started_at"])).total_seconds()
               for s in sessions if s.get("finished_at"))
    ok = [r for r in rows if r["status"] == "ok"]
    phases = {name: sum(r.get(name) or 0.0 for r in ok) for name in PHASES}
    jobs_s = sum(r.get("duration_s") or 0.0 for r in rows)
    breakdown = phases | {"rest_of_jobs_s": jobs_s - sum(phases.values()), "between_jobs_s": wall - jobs_s}
    return {"wall_s": wall, "window_s_total": phases["window_s"],
            "matrix_efficiency": phases["window_s"] / wall if wall > 0 else None,
            "time_breakdown_s": {k: round(v, 3) for k, v in breakdown.items()}}


def _twin_key(row: dict[str, Any], **override: Any) -> tuple:
    axes = {axis: row[axis] if row.get(axis) is not None else default for axis, default in AXIS_DEFAULTS.items()}
    axes |= override
    return (*axes.values(), row["repeat"], row["model"], row["batch_size"], row["image_size"], row["is_smoke"])


def derive_twin_columns(run_dir: Path) -> int:
    """Fill loader_efficiency and scaling_efficiency from twins in the same run; return rows rewritten.

    A real-data cell's synthetic twin (same other axes and repeat) gives the loader efficiency, the
    figure that says whether the input pipeline or the compute is the bottleneck; the world_size-1 twin
    gives scaling efficiency. Rows are rewritten atomically, and the step is idempotent (resume reruns it).
    """
    rows = store.read_cells(run_dir).to_pylist()
    ok = {_twin_key(r): r for r in rows if r["status"] == "ok"}
    changed = 0
    for row in rows:
        if row["status"] != "ok":
            continue
        synth = ok.get(_twin_key(row, backend="synthetic"))
        single = ok.get(_twin_key(row, world_size=1))
        new = {
            "loader_efficiency": row["throughput_img_per_s"] / synth["throughput_img_per_s"]
            if synth and row["backend"] != "synthetic" else None,
            "scaling_efficiency": row["throughput_per_process_img_per_s"] / single["throughput_per_process_img_per_s"]
            if single and row["world_size"] > 1 else None,
        }
        if any(row[k] != v for k, v in new.items()):
            write_row(run_dir, job_key(row["cell_id"], row["repeat"]), row | new)
            changed += 1
    return changed


def exit_code(rows: list[dict[str, Any]]) -> int:
    """0 when every row is ok or skipped, 1 when the matrix completed with failures."""
    return 0 if all(r["status"] in ("ok", "skipped") for r in rows) else 1
