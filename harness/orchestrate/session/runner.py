"""A session over a run folder: every pending (cell, repeat) job in plan order through the run's executor, each
followed to its row: locally as many at once as the run's slots hold (each job waits, in plan order, for the
slots it takes), under SLURM at most its max_parallel in flight. Ctrl-C cancels what this session started, and a
later session (`--resume`) follows the jobs an earlier one left in flight (inflight.json) instead of
submitting them again.
"""

from __future__ import annotations

import contextlib

import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from harness.orchestrate.session.capabilities import Capabilities
from harness.orchestrate.session.compile_cache import read_records, warm_compile_caches
from harness.orchestrate.session.derive import derive_twin_columns, matrix_efficiency
from harness.orchestrate.placement.executors import Executor, Launch
from harness.orchestrate.session.job import JobContext, Placement, PreparedJob, finish_job, prepare_job
from harness.orchestrate.placement.local import LocalExecutor
from harness.orchestrate.placement.machine import probe_machine
from harness.orchestrate.placement.packing import Packing, solo_packing
from harness.orchestrate.session.runfolder import (MANIFEST, load_plan, pending, plan_executor, plan_fire_drill,
                                                   requeue_lost)
from harness.orchestrate.placement.slurm import SlurmExecutor
from harness.results import folded, store
from harness.matrix.cells import Cell, job_key
from harness.matrix.job import FAULT_ENV
from harness.matrix.executor import ExecutorConfig
from harness.catalogue import col

INFLIGHT = "inflight.json"
"""Jobs of the run submitted to an executor and not yet rows: key -> the executor's record (SLURM job id)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run, after the jobs this session submitted were cancelled (`cancelled` lists them)."""

    def __init__(self, cancelled: list[str]):
        super().__init__()
        self.cancelled = cancelled


def executor_for(config: ExecutorConfig, *, notify=print) -> Executor:
    """Where the run's jobs run: one SLURM job each, or this machine's processes."""
    if config.kind == "slurm":
        return SlurmExecutor(config, notify=notify)
    return LocalExecutor()


def execute(run_dir: Path, *, caps: Capabilities, env: dict[str, Any], env_key: str,
            on_start: Callable[[int, int, str], None] | None = None,
            on_done: Callable[[dict[str, Any]], None] | None = None,
            notify: Callable[[str], None] = print, executor: Executor | None = None,
            packing: Packing | None = None, estimate: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run every pending job of the run folder in plan order through the run's executor; return the rows
    written in this session. Locally, `packing` says which slots each job takes (None: one job at a time on the
    whole machine); SLURM ignores it and keeps at most its max_parallel in flight.

    Jobs an earlier session left in flight (inflight.json) are followed, not submitted again; Ctrl-C cancels
    the jobs this session has in flight, forgets them (a resume submits them again) and raises Interrupted.
    `estimate` (estimate.Estimate.to_plain) is kept with the session, beside what it took.
    """
    run_id, jobs, cells = load_plan(run_dir)
    folded.unfold_run(run_dir)  # a finished run resumed: its rows one file a job again, as in flight
    for key in requeue_lost(run_dir):  # its node failed, not the cell: run again (the row kept, superseded)
        notify(f"{key}: its SLURM node was lost (NODE_FAIL); running it again")
    todo = pending(run_dir, jobs)
    executor = executor or executor_for(plan_executor(run_dir), notify=notify)
    ctx = JobContext(run_dir=run_dir, run_id=run_id, caps=caps, env=env, env_key=env_key,
                     fault_spec=os.environ.get(FAULT_ENV), notify=notify,
                     fire_drill_pct=plan_fire_drill(run_dir))
    manifest = store.read_json(run_dir / MANIFEST)
    session = {col.started_at: datetime.now(timezone.utc).isoformat(), "pending_at_start": len(todo),
               "executor": executor.kind} | ({"estimate": estimate} if estimate else {})
    manifest["sessions"].append(session)
    store.write_json(run_dir / MANIFEST, manifest)
    flight = _Flight(run_dir, executor)
    seats = _Seats(executor, packing)
    rows = []

    def done(row: dict[str, Any]) -> None:
        rows.append(row)
        if on_done:
            on_done(row)

    try:
        queue = flight.adopt(todo, cells, ctx)
        warm_compile_caches(queue, cells, ctx, executor=executor)  # before any timed repeat: they only read it
        started = len(todo) - len(queue)
        while queue or flight.jobs:
            # the next job in plan order takes its slots, or every job waits for it: nothing overtakes
            while queue and (placed := seats.claim(cells[queue[0][0]], len(flight.jobs))) is not False:
                cid, repeat = queue.pop(0)
                if on_start:
                    on_start(started, len(todo), job_key(cid, repeat))
                started += 1
                prepared = prepare_job(cells[cid], repeat, ctx, executor=executor.kind, placed=placed)
                if isinstance(prepared, dict):
                    seats.release(placed)
                    done(prepared)
                else:
                    flight.submit(prepared)
                    seats.hold(prepared.launch.key, placed)
            for handle, ended in (executor.wait(list(flight.jobs)) if flight.jobs else {}).items():
                prepared = flight.pop(handle)
                seats.release(seats.held.pop(prepared.launch.key, None))
                done(finish_job(prepared, ended, ctx))
    except KeyboardInterrupt:
        raise Interrupted(flight.cancel_all()) from None
    except store.CannotWrite:  # a full disk, a read-only folder: every job in flight ends now
        with contextlib.suppress(OSError):  # inflight.json may not fit either: a resume finds the jobs ended
            flight.cancel_all()
        raise
    derive_twin_columns(run_dir)
    folded.fold_run(run_dir)  # after the last rewrite of a row: a file a folder, a few KB a row (results/folded.py)
    session["finished_at"] = datetime.now(timezone.utc).isoformat()
    manifest["finished_at"] = session["finished_at"]
    manifest |= matrix_efficiency(manifest["sessions"], store.read_cells(run_dir).to_pylist(), read_records(run_dir))
    store.write_json(run_dir / MANIFEST, manifest)
    shutil.rmtree(run_dir / "work", ignore_errors=True)
    (run_dir / INFLIGHT).unlink(missing_ok=True)
    return rows


class _Seats:
    """Room for the next job: locally the slots of the run's packing (one whole-machine slot without it), under
    SLURM a place among its max_parallel jobs in flight."""

    def __init__(self, executor: Executor, packing: Packing | None):
        self.local = executor.kind == "local"
        self.max_parallel = executor.max_parallel
        self.packing = packing or (solo_packing(probe_machine("cpu")) if self.local else None)
        self.pool = self.packing.pool() if self.local else None
        self.held: dict[str, Placement | None] = {}

    def claim(self, cell: Cell, in_flight: int) -> Placement | None | bool:
        """The job's placement (None: SLURM places it), or False while it must wait."""
        if self.pool is None:
            return None if in_flight < self.max_parallel else False
        grant = self.pool.claim(self.packing.needs(cell))
        return False if grant is None else Placement(grant=grant, packing=self.packing.label(cell, grant))

    def hold(self, key: str, placed: Placement | None) -> None:
        self.held[key] = placed

    def release(self, placed: Placement | None) -> None:
        if placed is not None and self.pool is not None:
            self.pool.release(placed.grant)


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
    row[col.started_at] = datetime.fromisoformat(row[col.started_at])
    launch = Launch(key=key, argv=(), env={}, log_path=ctx.run_dir / "logs" / f"{key}.log", work=work,
                    timeout_s=cell.benchmark.timeout_s, nnodes=cell.launch.nnodes)
    return PreparedJob(cell=cell, repeat=repeat, launch=launch, row=row, started_at=float(record["submitted_at"]))
