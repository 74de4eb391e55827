"""A/B re-runs: a repeat whose window opened in a start transient runs again at once, as a fresh process, so it
stays beside its pair; the transient row stays in the run folder as `superseded`. At most a stated number per cell
and side."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from harness.orchestrate.session import job
from harness.results import store
from harness.results.schema import SUPERSEDED, SUPERSEDED_STEPS, cell_table
from harness.matrix.cells import Cell, job_key
from harness.catalogue import col


def has_start_transient(row: dict[str, Any]) -> bool:
    """The row ran to the end and its window opened in a transient (harness.stats.settle)."""
    return row.get("status") == "ok" and (row.get(col.start_transient_steps) or 0) > 0


@dataclass(slots=True)
class Reruns:
    """The re-run budget of an A/B: `limit` per cell and side (run folder), counted from the folders' superseded
    rows, so a resumed A/B keeps what it spent. Per side: a side whose every window opens in a transient (its
    code's, not the machine's) cannot spend the other side's budget."""

    limit: int
    used: dict[tuple[str, str], int] = field(default_factory=dict)

    @classmethod
    def of(cls, run_dirs: Sequence[Path], limit: int) -> Reruns:
        used: dict[tuple[str, str], int] = {}
        for run_dir in map(Path, run_dirs):
            for path in sorted((run_dir / "cells").glob(f"*-{SUPERSEDED}*.parquet")):
                key = (str(run_dir), pq.read_table(path, columns=[col.cell_id]).column(col.cell_id)[0].as_py())
                used[key] = used.get(key, 0) + 1
        return cls(limit=limit, used=used)

    def wanted(self, run_dir: Path, row: dict[str, Any]) -> bool:
        return has_start_transient(row) and self.used.get((str(run_dir), row[col.cell_id]), 0) < self.limit

    def supersede(self, run_dir: Path, row: dict[str, Any]) -> str:
        """Keep `row` (its steps in SUPERSEDED_STEPS, its log) under a name of its own, status superseded, and take
        its job's row away so the job runs again; returns the reason written. The kept copy is written before the
        original goes: an interruption in between leaves the job done with its transient row beside it."""
        cid = row[col.cell_id]
        n = self.used[(str(run_dir), cid)] = self.used.get((str(run_dir), cid), 0) + 1
        key = job_key(cid, row["repeat"])
        kept = f"{key}-{SUPERSEDED}{n}"
        reason = (f"window opened in a start transient ({_transient_words(row)}): run again "
                  f"(re-run {n} of at most {self.limit} for this cell on this side)")
        log = Path(row[col.log_path]) if row.get(col.log_path) else None
        copy = dict(row, status=SUPERSEDED, reason=reason,
                    log_path=str(log.with_name(f"{kept}.log")) if log else row.get(col.log_path))
        store.write_table(run_dir / "cells" / f"{kept}.parquet", cell_table([copy]))
        # its steps leave steps/ (a glob over it must not count the repeat twice); its log stays beside the others
        for folder, target, suffix in (("steps", SUPERSEDED_STEPS, ".parquet"), ("logs", "logs", ".log")):
            source = run_dir / folder / f"{key}{suffix}"
            if source.exists():
                (run_dir / target).mkdir(exist_ok=True)
                os.replace(source, run_dir / target / f"{kept}{suffix}")
        (run_dir / "cells" / f"{key}.parquet").unlink()
        return reason


def _transient_words(row: dict[str, Any]) -> str:
    """The transient as the row's steadiness names it ('first 3 steps at 2.9-7.1x the window's median')."""
    text = row.get("steadiness") or ""
    start = text.find("start transient: ")
    if start < 0:
        return f"first {row[col.start_transient_steps]} step(s) slow"
    return text[start + len("start transient: "):].split(" (")[0]


def runs_of(cell: Cell, repeat: int, ctx: job.JobContext, reruns: Reruns, *, side: str) -> Iterator[dict[str, Any]]:
    """Run one job of a side, then run it again while its window opens in a transient and the cell's budget
    lasts; yields each row as it is written (the superseded ones are rewritten as such before the next run). A
    re-run carries no injected fault (NVBENCH_FAULT): the suite's faults stand for one-off hiccups."""
    while True:
        row = job.run_job(cell, repeat, ctx)
        yield row
        if not reruns.wanted(ctx.run_dir, row):
            return
        reason = reruns.supersede(ctx.run_dir, row)
        ctx.notify(f"{side.upper()} r{repeat} {cell.cell_id}: {reason}")
        ctx = dataclasses.replace(ctx, fault_spec=None)
