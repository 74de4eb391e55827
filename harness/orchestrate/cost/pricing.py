"""The past a run's estimate rests on: earlier run folders of this machine's environment (a reports folder, a
history; an A/B's sides and a bisect's A/Bs for an A/B's estimate) read for the planned cells' job and warm-up
seconds, or other cells' rows to scale (harness/orchestrate/cost/scaled.py); never an interrupted run's rows, nor a
row another process interfered with. The arithmetic: harness/orchestrate/cost/estimate.py.

    python -m harness.orchestrate.cost.pricing RUN_DIR   # the run's estimate beside what it took (the nightly's log line)
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from harness.orchestrate.cost import scaled
from harness.orchestrate.workflows.ab import AB_FILE
from harness.orchestrate.session.capabilities import Capabilities, skip_reason
from harness.orchestrate.session.compile_cache import record_path
from harness.orchestrate.cost.estimate import Estimate, Past, PlannedJob, duration_text, estimate, in_sequence
from harness.orchestrate.session.runfolder import MANIFEST
from harness.results import store
from harness.results.env import env_key
from harness.matrix.cells import Cell
from harness.catalogue import col
from harness.exits import EXIT_BAD_INPUT, EXIT_OK

MAX_JOBS_PER_CELL = 10
"""Past jobs of one cell that its estimate uses, newest runs first."""
MAX_RUNS = 100
"""Run folders examined at most, newest first."""


def run_folders(roots: Iterable[Path]) -> list[Path]:
    """Run folders at or under `roots`, up to three levels down (REPORTS/run, REPORTS/ab/a, REPORTS/bisect/ab-01/a),
    each once."""
    found: dict[Path, None] = {}
    for root in roots:
        root = Path(root)
        for pattern in (MANIFEST, f"*/{MANIFEST}", f"*/*/{MANIFEST}", f"*/*/*/{MANIFEST}"):
            for manifest in sorted(root.glob(pattern)):
                if (manifest.parent / "cells").is_dir():
                    found.setdefault(manifest.parent.resolve())
    return list(found)


def read_past(roots: Iterable[Path], cell_ids: Iterable[str], key: str, *, cells: Mapping[str, Cell] | None = None,
              device: str = "", ab_sides: bool = False) -> Past:
    """What the newest run folders under `roots` measured on this environment (`key`, env_key) for `cell_ids`:
    the seconds of their clean ok jobs (is_clean) and compile warm-ups, and the runner's own seconds per job; for
    `cells` without such jobs, seconds scaled from other cells' rows (scaled.py). A folder that does not read
    back, an interrupted run, and (unless `ab_sides`: an A/B's own estimate) an A/B's side are passed over."""
    wanted = list(dict.fromkeys(cell_ids))
    job_s: dict[str, list[float]] = {}
    warmup_s: dict[str, list[float]] = {}
    between, used = [], []
    folders = _same_env(run_folders(roots), key, ab_sides=ab_sides)
    for run_dir, manifest in folders:
        rows = _rows(run_dir, [c for c in wanted if len(job_s.get(c, ())) < MAX_JOBS_PER_CELL])
        warm = {c: store.read_json(record_path(run_dir, c)) for c in wanted
                if c not in warmup_s and record_path(run_dir, c).is_file()}
        if not rows and not warm:
            continue
        used.append(_name(run_dir))
        for row in rows:
            job_s.setdefault(row[col.cell_id], []).append(float(row[col.duration_s]))
        for cid, record in warm.items():
            if record.get("status") == "ok":
                warmup_s[cid] = [float(record[col.duration_s])]
        per_job = _between_per_job(run_dir, manifest)
        if per_job is not None:
            between.append(per_job)
        if all(len(job_s.get(c, ())) >= MAX_JOBS_PER_CELL for c in wanted):
            break
    missing = {c: cell for c, cell in (cells or {}).items() if c not in job_s}
    scaled_s, scaled_runs = scaled.scaled_seconds(missing, device, _donors([f for f, _ in folders])) if missing \
        else ({}, ())
    return Past(job_s={c: v[:MAX_JOBS_PER_CELL] for c, v in job_s.items()}, warmup_s=warmup_s,
                between_jobs_s=statistics.median(between) if between else None, runs=tuple(used),
                scaled_s=scaled_s, scaled_runs=scaled_runs)


def _name(run_dir: Path) -> str:
    """A past run as the estimate names it: an A/B's side by its A/B folder too (ab-xyz/b, not b)."""
    return f"{run_dir.parent.name}/{run_dir.name}" if (run_dir.parent / AB_FILE).is_file() else run_dir.name


def _same_env(folders: Sequence[Path], key: str, *, ab_sides: bool = False) -> list[tuple[Path, dict[str, Any]]]:
    """(folder, manifest) of the finished runs measured on environment `key`, newest first: an interrupted run
    (its last session never finished) is passed over, as an A/B's side is unless `ab_sides`."""
    out = []
    for folder in folders:
        try:
            manifest = store.read_json(folder / MANIFEST)
        except (OSError, store.UnreadableFile):
            continue
        if not isinstance(manifest, dict) or env_key(manifest.get("environment") or {}) != key:
            continue
        sessions = manifest.get("sessions") or [{}]
        if not isinstance(sessions[-1], dict) or not sessions[-1].get("finished_at"):
            continue
        if ab_sides or not (folder.parent / AB_FILE).is_file():
            out.append((folder, manifest))
    out.sort(key=lambda item: str(item[1].get("created_at") or ""), reverse=True)
    return out[:MAX_RUNS]


def _rows(run_dir: Path, cell_ids: Sequence[str]) -> list[dict[str, Any]]:
    order = {cid: i for i, cid in enumerate(cell_ids)}
    rows = [row for row in _cost_rows(run_dir) if row[col.cell_id] in order and is_clean(row)]
    return sorted(rows, key=lambda row: order[row[col.cell_id]])


def is_clean(row: Mapping[str, Any]) -> bool:
    """An ok job whose seconds are its own: not profiled, no fire drill or injected fault, and no process of
    another job on its GPU (gpu_shared)."""
    return row["status"] == "ok" and bool(row[col.duration_s]) and not row.get(col.profile_tool) and \
        not row.get(col.fire_drill_pct) and not row.get(col.injected_fault) and not row.get(col.gpu_shared)


COST_COLUMNS = (col.cell_id, "status", col.duration_s, col.profile_tool, col.fire_drill_pct, col.injected_fault, col.gpu_shared)


def _cost_rows(run_dir: Path, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The columns the estimate reads of every row of a run folder (folded or one file a job), or none: an
    unreadable or foreign folder says nothing about cost (a column an older file lacks reads as null)."""
    try:
        return store.read_cells(run_dir, list(dict.fromkeys((*COST_COLUMNS, *extra)))).to_pylist()
    except (OSError, ValueError, KeyError, pa.ArrowException):  # store.UnreadableFile is a ValueError
        return []


def _donors(folders: Sequence[Path]) -> list[scaled.Donor]:
    """The clean ok jobs of `folders` (newest first), any cell, as scaling donors (at most scaled.MAX_DONORS)."""
    out: list[scaled.Donor] = []
    for run_dir in folders:
        for row in _cost_rows(run_dir, scaled.DONOR_COLUMNS):
            if is_clean(row) and (d := scaled.donor(row, float(row[col.duration_s]), _name(run_dir))):
                out.append(d)
                if len(out) >= scaled.MAX_DONORS:
                    return out
    return out


def _between_per_job(run_dir: Path, manifest: dict[str, Any]) -> float | None:
    spent = manifest.get("time_breakdown_s") or {}
    jobs = len(store.row_stems(run_dir / "cells"))
    if not jobs or not isinstance(spent.get("between_jobs_s"), (int, float)):
        return None
    return max(0.0, spent["between_jobs_s"]) / jobs


def planned(cells: dict[str, Cell], jobs: Sequence[tuple[str, int]], caps: Capabilities) -> list[PlannedJob]:
    """The jobs as the estimate sees them, with what this machine skips."""
    runs = {cid: not skip_reason(cell, caps) for cid, cell in cells.items()}
    return [PlannedJob(cell_id=cid, backend=cells[cid].backend, compile=cells[cid].compile, runs=runs[cid],
                       device=caps.device, smoke=cells[cid].is_smoke, precision=cells[cid].precision)
            for cid, _ in jobs]


def estimate_jobs(cells: dict[str, Cell], jobs: Sequence[tuple[str, int]], caps: Capabilities, *,
                  roots: Iterable[Path], key: str, slots: int = 1, ab_sides: bool = False) -> Estimate:
    """The estimate of running `jobs` of `cells` here, from the past under `roots` on environment `key` (A/B sides
    too when `ab_sides`)."""
    past = read_past(roots, cells, key, cells=cells, device=caps.device, ab_sides=ab_sides)
    return estimate(planned(cells, jobs, caps), past, slots)


def ab_estimate(cells: Sequence[Cell], pairs: int, caps: Capabilities, *, roots: Iterable[Path],
                keys: Sequence[str]) -> Estimate:
    """An A/B of `cells` at `pairs` repeats a side: both sides' jobs in turn (one at a time, as the pairs run),
    each side from the past of its own environment (`keys`, env_key of A and of B)."""
    by_id = {c.cell_id: c for c in cells}
    jobs = [(cid, r) for r in range(pairs) for cid in by_id]
    roots = list(roots)
    return in_sequence([estimate_jobs(by_id, jobs, caps, roots=roots, key=key, ab_sides=True) for key in keys])


def ab_line(first: Estimate, last: Estimate | None, pairs: Sequence[int]) -> str:
    """'estimated X for N pairs a side (up to Y if every cell runs to M pairs) ...: where the figures came from'."""
    more = (f" (up to {duration_text(last.wall_s)} if every cell runs to {pairs[-1]} pairs)"
            if last is not None and len(pairs) > 1 else "")
    return (f"estimated {duration_text(first.wall_s)} for {pairs[0]} pairs a side{more} on this machine with "
            f"{first.slots_text()}: {first.source_text()}")


def took_line(manifest: dict[str, Any]) -> str | None:
    """'took Y; estimated X (+Z %) with N slots: where X came from' of a run's last session with an estimate, or
    None when none recorded one."""
    sessions = [s for s in manifest.get("sessions") or [] if s.get("estimate")]
    if not sessions:
        return None
    session, = sessions[-1:]
    est = session["estimate"]
    slots = f"{est['slots']} slot{'s' if est['slots'] != 1 else ''}"
    if not session.get("finished_at"):
        return f"not finished; estimated {duration_text(est['wall_s'])} with {slots}: {est['source']}"
    took = (datetime.fromisoformat(session["finished_at"]) - datetime.fromisoformat(session[col.started_at])).total_seconds()
    off = f" ({100 * (took / est['wall_s'] - 1):+.0f} %)" if est["wall_s"] > 0 else ""
    return f"took {duration_text(took)}; estimated {duration_text(est['wall_s'])}{off} with {slots}: {est['source']}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.orchestrate.cost.pricing RUN_DIR", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        line = took_line(store.read_json(Path(argv[0]) / MANIFEST))
    except (OSError, store.UnreadableFile) as exc:
        print(f"harness.orchestrate.cost.pricing: {exc}".splitlines()[0], file=sys.stderr)
        return EXIT_BAD_INPUT
    print(line or f"{argv[0]}: no estimate recorded")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
