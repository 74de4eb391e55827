"""`nvbench calibrate-slots`, the runs: an interleaved A/A of every world-size-1 cell, alone on a slot (OUT/solo)
against the same cell on the same slot while every other slot runs its neighbours, the matrix's other cells,
started before it and started again as they end (OUT/packed). Pairs run in plan order, each pair's two sides
in a seeded random order and on one slot, the slot turning from pair to pair; what each packed job had beside
it is kept in OUT/calibration.json. The neighbours leave logs (OUT/neighbours/logs), never rows."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.orchestrate.session import derive, runfolder
from harness.orchestrate.session.capabilities import Capabilities, skip_reason
from harness.orchestrate.session.job import JobContext, Placement, finish_job, prepare_job, run_job
from harness.orchestrate.placement.local import LocalExecutor
from harness.orchestrate.placement.packing import SOLO, UNCALIBRATED, Packing
from harness.results import store
from harness.matrix.cells import Cell, job_key
from harness.matrix.job import FAULT_ENV
from harness.matrix.sections import Matrix

SIDES = ("solo", "packed")
NEIGHBOURS = "neighbours"
RECORD = "calibration.json"


def calibration_cells(cells: list[Cell]) -> list[Cell]:
    """The cells a calibration measures: world size 1 on one node (the jobs slots pack)."""
    return [c for c in cells if c.world_size == 1 and c.launch.nnodes == 1]


def create_calibration(matrix: Matrix, cells: list[Cell], *, out_dir: Path, env: dict[str, Any], smoke: bool,
                       only: list[str], slots: int) -> None:
    """OUT/solo and OUT/packed with one plan, and OUT/calibration.json; nothing runs yet."""
    for side in SIDES:
        runfolder.create_run(matrix, cells, run_dir=out_dir / side, reports_root=out_dir, smoke=smoke, only=only,
                             env=env)
    store.write_json(out_dir / RECORD, {"created_at": datetime.now(UTC).isoformat(), "slots": slots,
                                        "matrix_source": matrix.source, "samples": []})


def run_calibration(out_dir: Path, packing: Packing, *, caps: Capabilities, env: dict[str, Any], env_key: str,
                    seed: int, notify: Callable[[str], None] = print,
                    on_done: Callable[[str, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Every pair of the plan; returns what each packed job had beside it (also in OUT/calibration.json)."""
    ctxs = {name: _context(out_dir / name, caps, env, env_key, notify) for name in (*SIDES, NEIGHBOURS)}
    _, jobs, cells = runfolder.load_plan(out_dir / "solo")
    runnable = [c for c in cells.values() if skip_reason(c, caps) is None]
    # A neighbour's repeat numbers start past the plan's: the executor follows a job by its key, and a neighbour
    # of the one-cell matrix numbered 0 beside its measured repeat 0 was taken for it (killed as a neighbour, or
    # its result read as the measured job's: "exited with status 0 without a result", 1 run in ~5 in the suite).
    neighbours = _neighbours(runnable)
    count = itertools.count(1 + max((r for _, r in jobs), default=-1))
    rng = random.Random(seed)
    samples = []
    for k, (cid, repeat) in enumerate(jobs):
        slot = k % len(packing.slots)
        sides = list(SIDES)
        rng.shuffle(sides)
        for side in sides:
            if side == "solo":
                row = run_job(cells[cid], repeat, ctxs[side], _placed(packing, slot, SOLO))
            else:
                row, beside = _packed(cells[cid], repeat, slot, packing, ctxs, neighbours, count)
                samples.append(beside)
            if on_done:
                on_done(side, row)
    record = store.read_json(out_dir / RECORD)
    record["samples"] = samples
    store.write_json(out_dir / RECORD, record)
    for side in SIDES:
        derive.derive_twin_columns(out_dir / side)
        shutil.rmtree(out_dir / side / "work", ignore_errors=True)
    shutil.rmtree(out_dir / NEIGHBOURS / "work", ignore_errors=True)
    return samples


def _context(run_dir: Path, caps: Capabilities, env: dict[str, Any], env_key: str,
             notify: Callable[[str], None]) -> JobContext:
    run_id = runfolder.load_plan(run_dir)[0] if (run_dir / runfolder.PLAN).exists() else run_dir.name
    return JobContext(run_dir=run_dir, run_id=run_id, caps=caps, env=env, env_key=env_key,
                      fault_spec=os.environ.get(FAULT_ENV), notify=notify)


def _placed(packing: Packing, slot: int, label: str) -> Placement:
    return Placement(grant=packing.pool().grant_of(slot), packing=label)


def _neighbours(cells: list[Cell]) -> Iterator[Cell]:
    """The cells the other slots run, in turn (the measured cell among them: a packed run's neighbours)."""
    if not cells:
        raise ValueError("no cell of the calibration can run on this machine: nothing to keep the other slots busy")
    return itertools.cycle(sorted(cells, key=lambda c: c.cell_id))


def _packed(cell: Cell, repeat: int, slot: int, packing: Packing, ctxs: dict[str, JobContext],
            neighbours: Iterator[Cell], count: Iterator[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cell on `slot` while every other slot runs neighbours, started first and again whenever one ends;
    they are killed when the measured job ends. Returns its row and what ran beside it."""
    executor, beside, others = LocalExecutor(), [], {}

    def start_neighbour(other: int) -> None:
        prepared = prepare_job(next(neighbours), next(count), ctxs[NEIGHBOURS],
                               placed=_placed(packing, other, UNCALIBRATED))
        if not isinstance(prepared, dict):  # a neighbour that cannot start (no dataset) leaves its slot idle
            others[executor.submit(prepared.launch)] = (other, prepared, time.time())

    def ended(handle: str) -> None:
        other, prepared, started = others.pop(handle)
        beside.append({"slot": other, "key": prepared.launch.key, "started": started, "ended": time.time()})
        shutil.rmtree(prepared.launch.work, ignore_errors=True)

    try:
        for other in (s for s in range(len(packing.slots)) if s != slot):
            start_neighbour(other)
        measured = prepare_job(cell, repeat, ctxs["packed"], placed=_placed(packing, slot, UNCALIBRATED))
        if isinstance(measured, dict):  # it cannot run here: its row says why
            return measured, {"key": job_key(cell.cell_id, repeat), "slot": slot, "neighbours": beside}
        handle = executor.submit(measured.launch)
        while True:
            done = executor.wait([handle, *others])
            for other in [h for h in done if h != handle]:
                slot_of = others[other][0]
                ended(other)
                if handle not in done:
                    start_neighbour(slot_of)
            if handle in done:
                row = finish_job(measured, done[handle], ctxs["packed"])
                break
    finally:
        executor.cancel(list(others))
        for other in list(others):
            ended(other)
    return row, {"key": measured.launch.key, "slot": slot, "started": measured.started_at,
                 "ended": time.time(), "neighbours": beside}
