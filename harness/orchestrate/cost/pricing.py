"""The past a run's estimate rests on: earlier run folders of this machine's environment (a reports folder, a
history, an A/B's sides, a bisect's A/Bs) read for the planned cells' job and warm-up seconds; and the estimate
of planned jobs (harness/orchestrate/cost/estimate.py does the arithmetic).

    python -m harness.orchestrate.cost.pricing RUN_DIR   # the run's estimate beside what it took (the nightly's log line)
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.orchestrate.session.capabilities import Capabilities, skip_reason
from harness.orchestrate.session.compile_cache import record_path
from harness.orchestrate.cost.estimate import Estimate, Past, PlannedJob, duration_text, estimate, in_sequence
from harness.orchestrate.session.runfolder import MANIFEST
from harness.results import store
from harness.results.env import env_key
from harness.matrix.cells import Cell
from harness.catalogue import col

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


def read_past(roots: Iterable[Path], cell_ids: Iterable[str], key: str) -> Past:
    """What the newest run folders under `roots` measured on this environment (`key`, env_key) for `cell_ids`:
    the seconds of their ok jobs (profiled ones left out) and compile warm-ups, and the runner's own seconds
    per job; a folder that does not read back is passed over."""
    wanted = list(dict.fromkeys(cell_ids))
    job_s: dict[str, list[float]] = {}
    warmup_s: dict[str, list[float]] = {}
    between, used = [], []
    for run_dir, manifest in _same_env(run_folders(roots), key):
        rows = _rows(run_dir, [c for c in wanted if len(job_s.get(c, ())) < MAX_JOBS_PER_CELL])
        warm = {c: store.read_json(record_path(run_dir, c)) for c in wanted
                if c not in warmup_s and record_path(run_dir, c).is_file()}
        if not rows and not warm:
            continue
        used.append(run_dir.name)
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
    return Past(job_s={c: v[:MAX_JOBS_PER_CELL] for c, v in job_s.items()}, warmup_s=warmup_s,
                between_jobs_s=statistics.median(between) if between else None, runs=tuple(used))


def _same_env(folders: Sequence[Path], key: str) -> list[tuple[Path, dict[str, Any]]]:
    """(folder, manifest) of the folders measured on environment `key`, newest first."""
    out = []
    for folder in folders:
        try:
            manifest = store.read_json(folder / MANIFEST)
        except (OSError, store.UnreadableFile):
            continue
        if isinstance(manifest, dict) and env_key(manifest.get("environment") or {}) == key:
            out.append((folder, manifest))
    out.sort(key=lambda item: str(item[1].get("created_at") or ""), reverse=True)
    return out[:MAX_RUNS]


def _rows(run_dir: Path, cell_ids: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for cid in cell_ids:
        for path in sorted((run_dir / "cells").glob(f"{cid}-r*.parquet")):
            row = _cost_row(path)
            if row is not None and row["status"] == "ok" and row[col.duration_s] and not row[col.profile_tool]:
                rows.append(row)
    return rows


def _cost_row(path: Path) -> dict[str, Any] | None:
    """The columns the estimate reads, or None: an unreadable or foreign file says nothing about cost."""
    try:
        return pq.read_table(path, columns=[col.cell_id, "status", col.duration_s, col.profile_tool]).to_pylist()[0]
    except (OSError, ValueError, KeyError, IndexError, pa.ArrowException):
        return None


def _between_per_job(run_dir: Path, manifest: dict[str, Any]) -> float | None:
    spent = manifest.get("time_breakdown_s") or {}
    jobs = len(list((run_dir / "cells").glob("*.parquet")))
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
                  roots: Iterable[Path], key: str, slots: int = 1) -> Estimate:
    """The estimate of running `jobs` of `cells` here, from the past under `roots` on environment `key`."""
    return estimate(planned(cells, jobs, caps), read_past(roots, cells, key), slots)


def ab_estimate(cells: Sequence[Cell], pairs: int, caps: Capabilities, *, roots: Iterable[Path],
                keys: Sequence[str]) -> Estimate:
    """An A/B of `cells` at `pairs` repeats a side: both sides' jobs in turn (one at a time, as the pairs run),
    each side from the past of its own environment (`keys`, env_key of A and of B)."""
    by_id = {c.cell_id: c for c in cells}
    jobs = [(cid, r) for r in range(pairs) for cid in by_id]
    roots = list(roots)
    return in_sequence([estimate_jobs(by_id, jobs, caps, roots=roots, key=key) for key in keys])


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
        return 2
    try:
        line = took_line(store.read_json(Path(argv[0]) / MANIFEST))
    except (OSError, store.UnreadableFile) as exc:
        print(f"harness.orchestrate.cost.pricing: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    print(line or f"{argv[0]}: no estimate recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
