"""A run's compile cache, warmed before its timed repeats: every job compiles into the run's own folder
(TORCHINDUCTOR_CACHE_DIR, job.py), and each inductor cell first gets one untimed warm-up process that compiles
its step and leaves, one at a time, so that no timed repeat pays a cold compile and repeats in flight together
only read the cache (concurrent writers into one inductor cache have raced: pytorch issues 172144, 196189)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.orchestrate.session.classify import classify
from harness.orchestrate.placement.executors import Executor
from harness.orchestrate.session.job import JobContext, prepare_job
from harness.orchestrate.placement.local import LocalExecutor
from harness.orchestrate.session.runfolder import WARMUPS
from harness.results import store
from harness.matrix.cells import Cell
from harness.catalogue import col

RECORD_FIELDS = (col.startup_s, col.build_s, col.compile_s)
"""What a warm-up's record keeps of its process's result (beside status, reason, duration_s, log_path)."""


def needs_warmup(cell: Cell) -> bool:
    """Only inductor compiles into the cache; a captured CUDA graph cannot be kept across processes."""
    return cell.compile == "inductor"


def warmup_key(cell_id: str) -> str:
    """The warm-up's key: its work folder and log (logs/<cell_id>-warmup.log); never a row's file name."""
    return f"{cell_id}-warmup"


def record_path(run_dir: Path, cell_id: str) -> Path:
    return Path(run_dir) / WARMUPS / f"{cell_id}.json"


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """Every warm-up record of a run folder (none for runs without compiled cells)."""
    folder = Path(run_dir) / WARMUPS
    return [store.read_json(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def warm_compile_caches(todo: Sequence[tuple[str, int]], cells: dict[str, Cell], ctx: JobContext, *,
                        executor: Executor | None = None) -> list[dict[str, Any]]:
    """One warm-up per inductor cell among the pending jobs `todo` whose cache is not yet warm (no ok record:
    a resumed run warms only what an earlier session did not), one after another; return their records.

    A warm-up that fails is recorded and the cell's repeats still run: each then compiles for itself and
    fails or succeeds on its own terms, with its own row."""
    executor = executor or LocalExecutor()
    wanted = dict.fromkeys(cid for cid, _ in todo if needs_warmup(cells[cid]))
    records = []
    for cid in wanted:
        path = record_path(ctx.run_dir, cid)
        if path.exists() and store.read_json(path).get("status") == "ok":
            continue
        record = _warm_one(cells[cid], ctx, executor)
        if record is not None:
            store.write_json(path, record)
            ctx.notify(_line(record))
            records.append(record)
    return records


def _warm_one(cell: Cell, ctx: JobContext, executor: Executor) -> dict[str, Any] | None:
    """Run one warm-up process to its end; its record, or None when the cell does not run here (skipped)."""
    prepared = prepare_job(cell, 0, ctx, executor=executor.kind, key=warmup_key(cell.cell_id), compile_warmup=True)
    if isinstance(prepared, dict):  # skipped here, or its dataset cannot be made: its repeats' rows will say why
        return None if prepared["status"] == "skipped" else _record(cell, prepared["status"], prepared["reason"], 0.0)
    launch = prepared.launch
    handle = executor.submit(launch)
    try:
        ended = executor.wait([handle])[handle]
    except BaseException:  # interrupted: the warm-up goes with the runner (a resume warms it again)
        executor.cancel([handle])
        raise
    status, reason = ended.verdict or classify(ended.outcome, launch.work, launch.log_path, launch.timeout_s)
    record = _record(cell, status, reason, time.time() - prepared.started_at)
    record[col.log_path] = str(launch.log_path.relative_to(ctx.run_dir))
    if status == "ok":
        result = store.read_json(launch.work / "result.json")
        record |= {k: result.get(k) for k in RECORD_FIELDS}
    shutil.rmtree(launch.work, ignore_errors=True)
    return record


def _record(cell: Cell, status: str, reason: str, duration_s: float) -> dict[str, Any]:
    return {col.cell_id: cell.cell_id, "status": status, "reason": reason, col.duration_s: duration_s,
            "finished_at": time.time()}


def _line(record: dict[str, Any]) -> str:
    if record["status"] != "ok":
        return (f"compile cache: {record[col.cell_id]}: warm-up {record['status']}: {record['reason']} "
                "(its repeats compile for themselves)")
    return (f"compile cache: {record[col.cell_id]}: warmed in {record[col.duration_s]:.1f} s "
            f"(compile {record.get(col.compile_s) or 0:.1f} s; untimed, not a result)")

