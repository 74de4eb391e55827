"""The run folder: its plan.json and manifest.json, written before anything runs, and read back on resume.

A run folder holds plan.json (the resolved cells and the job order), manifest.json, logs/, steps/ and cells/
(and, for compiled cells, compile-cache/ and warmups/).
A job is done exactly when cells/<job>.parquet exists; that file is written last and atomically, so a runner
killed at any moment resumes without duplicates.
"""

from __future__ import annotations

import os
import re
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness import __version__
from harness.results import store
from harness.results.schema import CELL_SCHEMA, SUPERSEDED, SUPERSEDED_STEPS, cell_table
from harness.matrix.cells import Cell, job_key, schedule
from harness.matrix.executor import ExecutorConfig
from harness.matrix.sections import Matrix, from_plain, to_plain
from harness.catalogue import col
from harness.catalogue.cells import RERUN_NODE_LOST

PLAN = "plan.json"
MANIFEST = "manifest.json"
COMPILE_CACHE = "compile-cache"
"""The run's compile cache (TORCHINDUCTOR_CACHE_DIR of every job), warmed before the timed repeats."""
WARMUPS = "warmups"
LOST = "lost-nodes.json"
"""Jobs SLURM ended for a lost node (NODE_FAIL): job key -> the nodes found down. Their rows stand until
`nvbench run --resume`, which runs those jobs again (requeue_lost)."""
"""One record per compiled cell's compile-cache warm-up: <cell_id>.json (never a result row)."""


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
    plan = {col.run_id: run_id, "jobs": jobs, "cells": {cid: c.to_plain() for cid, c in by_id.items()},
            col.fire_drill_pct: fire_drill_pct, "executor": to_plain(executor or matrix.executor)}
    manifest = {
        col.run_id: run_id, "created_at": now.isoformat(), col.nvbench_version: __version__,
        col.git_sha: env.get("nvbench_git_sha"), "host": env.get("hostname"), "matrix_source": matrix.source,
        "matrix_text": matrix.source_text, "smoke": smoke, "only": only, "repeats": matrix.run.repeats,
        "order": matrix.run.order, "shuffle_seed": matrix.run.shuffle_seed, "num_cells": len(by_id),
        "num_jobs": len(jobs), "environment": env, "sessions": [], col.fire_drill_pct: fire_drill_pct,
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
    made_by = manifest.get(col.nvbench_version)
    if made_by != __version__:
        raise RunFolderError(f"{run_dir / MANIFEST}: the run was made by nvbench {made_by}, this is {__version__}; "
                             "finish it with that version or start a new run")
    try:
        cells = {str(cid): Cell.from_plain(c) for cid, c in plan["cells"].items()}
        jobs = [(str(cid), int(r)) for cid, r in plan["jobs"]]
        run_id = str(plan[col.run_id])
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
    return float(store.read_json(Path(run_dir) / PLAN).get(col.fire_drill_pct) or 0.0)


def plan_executor(run_dir: Path) -> ExecutorConfig:
    """The executor the run was planned with (local for plans written before executors)."""
    plain = store.read_json(Path(run_dir) / PLAN).get("executor") or {}
    return from_plain(ExecutorConfig, plain)


def pending(run_dir: Path, jobs: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Jobs without a terminal row (in their own file or in the folded one of a finished run), and those whose
    SLURM node was lost (mark_lost: run again)."""
    lost = Path(run_dir) / LOST
    done = store.row_stems(Path(run_dir) / "cells") - set(store.read_json(lost) if lost.exists() else ())
    return [(cid, r) for cid, r in jobs if job_key(cid, r) not in done]


def compile_cache_dir(run_dir: Path) -> Path:
    """Where every job of the run compiles into and reads from (absolute: the cells' working folder differs)."""
    return (Path(run_dir) / COMPILE_CACHE).absolute()


def write_row(run_dir: Path, key: str, row: dict[str, Any]) -> None:
    store.write_table(run_dir / "cells" / f"{key}.parquet", cell_table([row]))


def unfinished(run_dir: Path) -> tuple[int, int] | None:
    """(jobs without a row, jobs planned) of a run that stopped before its end (a full disk, a crash of nvbench
    itself: a failed cell still has its row), or None when every job has one."""
    _, jobs, _ = load_plan(run_dir)
    left = pending(run_dir, jobs)
    return (len(left), len(jobs)) if left else None


def mark_lost(run_dir: Path, key: str, nodes: tuple[str, ...]) -> None:
    """Note a job its node failed under (written before its row: a row without its note would never run again)."""
    path = Path(run_dir) / LOST
    lost = store.read_json(path) if path.exists() else {}
    store.write_json(path, lost | {key: list(nodes)})


def requeue_lost(run_dir: Path) -> list[str]:
    """The jobs mark_lost noted run again: each row kept under a name of its own (status superseded, `rerun_cause`
    RERUN_NODE_LOST, its steps in SUPERSEDED_STEPS, its log beside the others) and taken away, so the job is
    pending. Returns their keys. The copy is written before the row goes; the note goes last."""
    run_dir = Path(run_dir)
    path = run_dir / LOST
    if not path.exists():
        return []
    lost = store.read_json(path)
    for key in list(lost):
        row_file = run_dir / "cells" / f"{key}.parquet"
        if row_file.exists():
            row = store.read_table(row_file, CELL_SCHEMA).to_pylist()[0]
            n = 1 + len(list((run_dir / "cells").glob(f"{key}-{SUPERSEDED}-lost*.parquet")))
            kept = f"{key}-{SUPERSEDED}-lost{n}"
            log = Path(row[col.log_path]) if row.get(col.log_path) else None
            store.write_table(run_dir / "cells" / f"{kept}.parquet", cell_table([dict(
                row, status=SUPERSEDED, rerun_cause=RERUN_NODE_LOST,
                log_path=str(log.with_name(f"{kept}.log")) if log else row.get(col.log_path))]))
            for folder, target, suffix in (("steps", SUPERSEDED_STEPS, ".parquet"), ("logs", "logs", ".log")):
                if (run_dir / folder / f"{key}{suffix}").exists():
                    (run_dir / target).mkdir(exist_ok=True)
                    os.replace(run_dir / folder / f"{key}{suffix}", run_dir / target / f"{kept}{suffix}")
            row_file.unlink()
    path.unlink()
    return list(lost)
