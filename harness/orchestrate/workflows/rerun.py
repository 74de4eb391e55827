"""A/B re-runs: a repeat whose window was taken under interference or opened in a start transient runs again
(under interference, once the neighbour has left or a bounded wait has passed), as a fresh process, so it stays
beside its pair; the spoiled row stays in the run folder as `superseded`. At
most a stated number per cell and side."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from harness.orchestrate.session import job
from harness.results import store
from harness.results.procstat import read_proc_stat, tree_cpu_ticks
from harness.results.interference import row_interference
from harness.results.schema import SUPERSEDED, SUPERSEDED_STEPS, cell_table
from harness.catalogue.cells import INTERFERENCE_THRESHOLD
from harness.matrix.cells import Cell, job_key
from harness.matrix.job import parse_cpu_list
from harness.catalogue import col


def has_start_transient(row: dict[str, Any]) -> bool:
    """The row ran to the end and its window opened in a transient (harness.stats.settle)."""
    return row.get("status") == "ok" and (row.get(col.start_transient_steps) or 0) > 0


def spoiled(row: dict[str, Any]) -> str | None:
    """Why an ok row's window cannot stand for its cell, or None: taken under interference (another process on its
    cores: harness.results.interference), or opened in a start transient."""
    if row.get("status") != "ok":
        return None
    if busy := row_interference(row):
        return f"window taken under interference ({busy})"
    if has_start_transient(row):
        return f"window opened in a start transient ({_transient_words(row)})"
    return None


BUSY_RERUNS = 6
"""Re-runs of a window taken under interference per cell and side of an A/B, apart from the start transients'
budget: a neighbour is the machine's doing, not the side's, and a burst of it spoils several pairs in a row. Once
spent, the spoiled rows stay, are left out of the comparison, and the verdict says the machine was busy."""


@dataclass(slots=True)
class Reruns:
    """The re-run budgets of an A/B per cell and side (run folder): `limit` for start transients, `busy_limit` for
    interference, counted from the folders' superseded rows, so a resumed A/B keeps what it spent. Per side: a side
    whose every window opens in a transient (its code's, not the machine's) cannot spend the other side's budget."""

    limit: int
    busy_limit: int = BUSY_RERUNS
    used: dict[tuple[str, str, bool], int] = field(default_factory=dict)
    """(run folder, cell id, for interference) -> re-runs spent."""

    @classmethod
    def of(cls, run_dirs: Sequence[Path], limit: int, busy_limit: int = BUSY_RERUNS) -> Reruns:
        used: dict[tuple[str, str, bool], int] = {}
        for run_dir in map(Path, run_dirs):
            for path in sorted((run_dir / "cells").glob(f"*-{SUPERSEDED}*.parquet")):
                row = pq.read_table(path, columns=[col.cell_id, "reason"]).to_pylist()[0]
                key = (str(run_dir), row[col.cell_id], "interference" in (row["reason"] or ""))
                used[key] = used.get(key, 0) + 1
        return cls(limit=limit, busy_limit=busy_limit, used=used)

    def _key(self, run_dir: Path, row: dict[str, Any]) -> tuple[str, str, bool]:
        return str(run_dir), row[col.cell_id], row_interference(row) is not None

    def wanted(self, run_dir: Path, row: dict[str, Any]) -> bool:
        if spoiled(row) is None:
            return False
        key = self._key(run_dir, row)
        return self.used.get(key, 0) < (self.busy_limit if key[2] else self.limit)

    def supersede(self, run_dir: Path, row: dict[str, Any]) -> str:
        """Keep `row` (its steps in SUPERSEDED_STEPS, its log) under a name of its own, status superseded, and take
        its job's row away so the job runs again; returns the reason written. The kept copy is written before the
        original goes: an interruption in between leaves the job done with its transient row beside it."""
        cid, budget = row[col.cell_id], self._key(run_dir, row)
        n = self.used[budget] = self.used.get(budget, 0) + 1
        key = job_key(cid, row["repeat"])
        kept = f"{key}-{SUPERSEDED}{n}{'b' if budget[2] else ''}"
        limit = self.busy_limit if budget[2] else self.limit
        reason = f"{spoiled(row)}: run again (re-run {n} of at most {limit} for this cell on this side)"
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


QUIET_WAIT_S = 120.0
"""Longest wait for a neighbour to leave before a window it spoiled runs again: a re-run beside the same neighbour
is spoiled too and spends the budget for nothing (one A/B spent all six re-runs of a repeat so). After it, the
re-run goes ahead and the budget bounds what the neighbour can cost."""
QUIET_SAMPLE_S = 1.0


def others_share(cores: Sequence[int], seconds: float = QUIET_SAMPLE_S) -> float | None:
    """Share of `cores`' time over the next `seconds` that processes other than this one and its descendants used
    (None: /proc/stat said nothing)."""
    busy0, total0, _ = read_proc_stat(cores)
    own0 = tree_cpu_ticks(os.getpid())
    time.sleep(seconds)
    busy1, total1, _ = read_proc_stat(cores)
    own1 = tree_cpu_ticks(os.getpid())
    if total1 <= total0:
        return None
    return min(1.0, max(0.0, ((busy1 - busy0) - (own1 - own0)) / (total1 - total0)))


def wait_for_quiet(cores: Sequence[int], notify, *, max_wait_s: float = QUIET_WAIT_S,
                   sample: Callable[[Sequence[int]], float | None] = others_share) -> float:
    """Wait, up to `max_wait_s`, until other processes use at most INTERFERENCE_THRESHOLD of `cores`; returns the
    seconds spent (one reading's, QUIET_SAMPLE_S, when the machine is quiet at once). Says when it starts waiting
    and what it ended on."""
    start, said = time.monotonic(), False
    while (share := sample(cores)) is not None and share > INTERFERENCE_THRESHOLD:
        waited = time.monotonic() - start
        if waited >= max_wait_s:
            notify(f"  still busy after {waited:.0f} s (other processes used {share:.0%} of the cores): "
                   "running it again anyway")
            return waited
        if not said:
            notify(f"  waiting for the neighbour to leave (other processes use {share:.0%} of the cores; at most "
                   f"{max_wait_s:.0f} s)")
            said = True
    waited = time.monotonic() - start
    if said:
        notify(f"  quiet after {waited:.0f} s")
    return waited


def again(run_dir: Path, row: dict[str, Any], reruns: Reruns, notify: Callable[[str], None], label: str, *,
          quiet: Callable[[Sequence[int]], float] | None = None) -> bool:
    """Whether the job of `row` runs again: its window was spoiled (a start transient, interference) and the
    cell's budget lasts. If so its row is kept as superseded first and said (`label: reason`), and before a
    re-run of a window taken under interference this waits for the neighbour to leave (`quiet`, given the row's
    cores; default wait_for_quiet)."""
    if not reruns.wanted(run_dir, row):
        return False
    busy = row_interference(row) is not None
    notify(f"{label}: {reruns.supersede(run_dir, row)}")
    if busy:
        cores = parse_cpu_list(row[col.cpu_affinity]) if row.get(col.cpu_affinity) else sorted(os.sched_getaffinity(0))
        (quiet or (lambda c: wait_for_quiet(c, notify)))(cores)
    return True


def runs_of(cell: Cell, repeat: int, ctx: job.JobContext, reruns: Reruns, *, side: str,
            quiet: Callable[[Sequence[int]], float] | None = None) -> Iterator[dict[str, Any]]:
    """Run one job of a side, then again while `again` says so; yields each row as it is written (the superseded
    ones are rewritten as such before the next run). A re-run carries no injected fault (NVBENCH_FAULT): the
    suite's faults stand for one-off hiccups. (nvbench ab's lanes call `again` themselves: ab._again.)"""
    while True:
        row = job.run_job(cell, repeat, ctx)
        yield row
        if not again(ctx.run_dir, row, reruns, ctx.notify, f"{side.upper()} r{repeat} {cell.cell_id}", quiet=quiet):
            return
        ctx = dataclasses.replace(ctx, fault_spec=None)
