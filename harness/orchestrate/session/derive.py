"""What a run's rows give once its jobs are done: the twins' efficiency columns, the run's matrix efficiency
(its measured share of the wall time, and where the rest went), and the exit code of `nvbench run`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.orchestrate.session.runfolder import write_row
from harness.results import store
from harness.results.schema import SUPERSEDED
from harness.matrix.cells import job_key
from harness.matrix.sections import AXES, Axes
from harness.catalogue import col
from harness.exits import EXIT_FAILURES, EXIT_OK

AXIS_DEFAULTS = {axis: getattr(Axes(), axis)[0] for axis in AXES}
"""Each axis's value in rows written before the axis existed (compile: eager)."""
RUN_PARTS = (col.startup_s, col.build_s, col.autotune_s, col.compile_s, col.warmup_window_s, col.window_s, col.val_s)
"""Where a job's time goes, in the order it goes there (the rest of a job is its process's exit and the
runner's own work between launch and row)."""


def matrix_efficiency(sessions: list[dict[str, Any]], rows: list[dict[str, Any]],
                      warmups: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The run's measured share of its wall time: the measured windows of its ok rows over the wall time of
    every session that ran it (a resumed run counts each session), with where the rest went: each phase of
    the ok rows, the rest of the jobs, the compile-cache warm-ups (`warmups`, compile_cache.py) and the
    runner between them."""
    wall = sum((datetime.fromisoformat(s["finished_at"]) - datetime.fromisoformat(s[col.started_at])).total_seconds()
               for s in sessions if s.get("finished_at"))
    ok = [r for r in rows if r["status"] == "ok"]
    phases = {name: sum(r.get(name) or 0.0 for r in ok) for name in RUN_PARTS}
    jobs_s = sum(r.get(col.duration_s) or 0.0 for r in rows)
    warm_s = sum(w.get(col.duration_s) or 0.0 for w in warmups)
    breakdown = phases | {"rest_of_jobs_s": jobs_s - sum(phases.values()), "compile_warmups_s": warm_s,
                          "between_jobs_s": wall - jobs_s - warm_s}
    return {"wall_s": wall, "window_s_total": phases[col.window_s],
            "matrix_efficiency": phases[col.window_s] / wall if wall > 0 else None,
            "time_breakdown_s": {k: round(v, 3) for k, v in breakdown.items()}}


def _twin_key(row: dict[str, Any], **override: Any) -> tuple:
    axes = {axis: row[axis] if row.get(axis) is not None else default for axis, default in AXIS_DEFAULTS.items()}
    axes |= override
    return (*axes.values(), row["repeat"], row["model"], row[col.batch_size], row[col.image_size], row[col.is_smoke])


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
            col.loader_efficiency: row[col.throughput_img_per_s] / synth[col.throughput_img_per_s]
            if synth and row["backend"] != "synthetic" else None,
            col.scaling_efficiency: row[col.throughput_per_process_img_per_s] / single[col.throughput_per_process_img_per_s]
            if single and row[col.world_size] > 1 else None,
        }
        if any(row[k] != v for k, v in new.items()):
            write_row(run_dir, job_key(row[col.cell_id], row["repeat"]), row | new)
            changed += 1
    return changed


def exit_code(rows: list[dict[str, Any]]) -> int:
    """0 when every row is ok or skipped, 1 when the matrix completed with failures. A superseded row was run
    again (its node lost, or an A/B window spoiled): the row that replaced it decides."""
    return EXIT_OK if all(r["status"] in ("ok", "skipped", SUPERSEDED) for r in rows) else EXIT_FAILURES
