"""Reading run folders for the analysis: one run, a baseline pointer, a folder of past runs, a run's work table.
What they hold is harness.analysis.judge.run's RunData."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from harness.analysis.judge.run import RunData
from harness.catalogue import col


class RunInputError(ValueError):
    """A path given as a run, baseline or history is not what it should be; one line per problem."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


SCREEN_COLUMNS = (col.cell_id, "repeat", "status", col.throughput_img_per_s, col.is_steady, col.is_smoke, col.fire_drill_pct,
                  col.env_key, "backend", "device", col.world_size)
"""What screening reads of each past run (harness.analysis.judge.screen): a history is read for these alone."""


def load_run(path: Path | str, columns: Sequence[str] | None = None) -> RunData:
    """A run folder (plan.json, manifest.json, cells/) or a baseline pointer file naming one; `columns`: its rows
    hold only those."""
    from harness.results import store

    run_dir = resolve_pointer(Path(path))
    check_run_folder(run_dir, said=path)
    manifest_path = run_dir / "manifest.json"
    try:
        manifest = store.read_json(manifest_path)
        left_out: list[str] = []
        rows = tuple(store.read_cells(run_dir, list(columns) if columns else None, left_out=left_out).to_pylist())
    except store.UnreadableFile as exc:
        raise RunInputError([str(exc)]) from None
    if not isinstance(manifest, dict):
        raise RunInputError([f"{manifest_path}: not an nvbench manifest (a JSON object)"])
    if not rows:
        raise RunInputError([f"{run_dir / 'cells'}: no result rows (the run has not finished a job)"])
    efficiency = manifest.get("matrix_efficiency")
    breakdown = manifest.get("time_breakdown_s")
    return RunData(path=str(run_dir), run_id=str(manifest.get(col.run_id) or run_dir.name),
                   created_at=str(manifest.get("created_at") or ""), environment=manifest.get("environment") or {},
                   rows=rows, matrix_efficiency=float(efficiency) if isinstance(efficiency, (int, float)) else None,
                   time_breakdown_s=breakdown if isinstance(breakdown, dict) else None,
                   wall_s=float(manifest["wall_s"]) if isinstance(manifest.get("wall_s"), (int, float)) else None,
                   matrix_text=manifest["matrix_text"] if isinstance(manifest.get("matrix_text"), str) else "",
                   unreadable=tuple(left_out))


def check_run_folder(run_dir: Path, *, said: Path | str | None = None) -> None:
    """RunInputError naming `said` (default: `run_dir`) unless `run_dir` is an nvbench run folder: the one place
    that says what one is (manifest.json and cells/)."""
    if not (Path(run_dir) / "manifest.json").is_file() or not (Path(run_dir) / "cells").is_dir():
        raise RunInputError([f"{said if said is not None else run_dir}: not an nvbench run folder (needs manifest.json "
                             "and cells/)"])


def resolve_pointer(path: Path) -> Path:
    """A baseline may be a run folder or a text file whose first line that is not blank or `#` names one
    (relative paths are relative to the file's folder)."""
    if not path.is_file():
        return path
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as exc:
        raise RunInputError([f"{path}: cannot read this pointer file ({type(exc).__name__})"]) from None
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            target = Path(line).expanduser()
            return target if target.is_absolute() else path.parent / target
    raise RunInputError([f"{path}: pointer file names no run folder"])


def load_history(folder: Path | str, *, exclude: Path | str | None = None,
                 columns: Sequence[str] | None = SCREEN_COLUMNS) -> list[RunData]:
    """Every run folder directly inside `folder` (and pointer files there), oldest first; `exclude` skipped;
    each run's rows hold `columns` (default: what screening reads; None: every column)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RunInputError([f"{folder}: history must be a folder of run folders"])
    skip = Path(exclude).resolve() if exclude else None
    runs = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        target = resolve_pointer(entry) if entry.is_file() else entry
        if not (target / "manifest.json").is_file() or (skip and target.resolve() == skip):
            continue
        runs.append(load_run(target, columns))
    return sorted(runs, key=lambda r: (r.created_at, r.run_id))


def read_work_table(run_dir: Path) -> list[dict[str, Any]] | None:
    """A run folder's work.parquet as rows (its version checked, an older one migrated), or None where it has
    none; UnreadableFile naming it when it is not one. The one place the diff reads the table."""
    from harness.results.work import WORK_FILE, read_work

    path = Path(run_dir) / WORK_FILE
    return read_work(path).to_pylist() if path.is_file() else None
