"""A/B re-runs: a repeat whose window was taken under interference or opened in a start transient runs again
(under interference, once the neighbour has left or a bounded wait has passed), as a fresh process, so it stays
beside its pair; the spoiled row stays in the run folder as `superseded`. At
most a stated number per cell and side."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.results import store
from harness.host.procstat import Counters, foreign_share, read_proc_stat, tree_cpu_ticks
from harness.results.interference import rerun_cause, row_interference
from harness.results.schema import CELL_SCHEMA, SUPERSEDED, SUPERSEDED_STEPS, cell_table
from harness.stats.settle import transient_steps_text
from harness.catalogue.cells import INTERFERENCE_THRESHOLD, RERUN_INTERFERENCE, RERUN_TRANSIENT
from harness.matrix.cells import job_key
from harness.matrix.job import parse_cpu_list
from harness.catalogue import col


def has_start_transient(row: dict[str, Any]) -> bool:
    """The row ran to the end and its window opened in a transient (harness.stats.settle)."""
    return row.get("status") == "ok" and (row.get(col.start_transient_steps) or 0) > 0


INTERFERENCE, TRANSIENT = RERUN_INTERFERENCE, RERUN_TRANSIENT
"""A superseded row's cause (cells' `rerun_cause`): which re-run budget it spent."""


def spoiled_by(row: dict[str, Any]) -> str | None:
    """Why an ok row's window cannot stand for its cell, as data: INTERFERENCE (another process on its cores:
    harness.results.interference) before TRANSIENT (it opened in a start transient), or None."""
    if row.get("status") != "ok":
        return None
    if row_interference(row):
        return INTERFERENCE
    return TRANSIENT if has_start_transient(row) else None


def spoiled(row: dict[str, Any]) -> str | None:
    """spoiled_by in words, worded from the row's numbers: 'window taken under interference (...)' or 'window
    opened in a start transient (first 3 steps at 2.9-7.1x the window's median)'."""
    cause = spoiled_by(row)
    if cause == INTERFERENCE:
        return f"window taken under interference ({row_interference(row)})"
    if cause == TRANSIENT:
        return f"window opened in a start transient ({_transient_words(row)})"
    return None


BUSY_RERUNS = 6
"""Re-runs of a window taken under interference per cell and side of an A/B, apart from the start transients'
budget: a neighbour is the machine's doing, not the side's, and a burst of it spoils several pairs in a row. Once
spent, the spoiled rows stay, are left out of the comparison, and the verdict says the machine was busy."""


class MachineBusy(Exception):
    """The command's budget for waiting on neighbours is spent and a window was spoiled again: it stops starting
    windows (the spoiled job is pending again, so `--resume` on a quiet machine runs it)."""


@dataclass(slots=True)
class WaitBudget:
    """Seconds a command may spend, over all its re-runs, waiting for neighbours to leave its cores (issue 58: a
    neighbour that stays made an A/B wait two minutes before each of dozens of re-runs)."""

    limit_s: float
    waited_s: float = 0.0

    @property
    def left_s(self) -> float:
        return max(0.0, self.limit_s - self.waited_s)

    @property
    def spent(self) -> bool:
        return self.waited_s >= self.limit_s


@dataclass(slots=True)
class Reruns:
    """The re-run budgets of an A/B per cell and side (run folder): `limit` for start transients, `busy_limit` for
    interference, counted from the folders' superseded rows, so a resumed A/B keeps what it spent. Per side: a side
    whose every window opens in a transient (its code's, not the machine's) cannot spend the other side's budget."""

    limit: int
    busy_limit: int = BUSY_RERUNS
    used: dict[tuple[str, str, bool], int] = field(default_factory=dict)
    """(run folder, cell id, for interference) -> re-runs spent."""
    waits: WaitBudget | None = None
    """The command's budget for waiting on neighbours (None: each wait bounded by QUIET_WAIT_S alone)."""

    @classmethod
    def of(cls, run_dirs: Sequence[Path], limit: int, busy_limit: int = BUSY_RERUNS,
           waits: WaitBudget | None = None) -> Reruns:
        used: dict[tuple[str, str, bool], int] = {}
        for run_dir in map(Path, run_dirs):
            for path in sorted((run_dir / "cells").glob(f"*-{SUPERSEDED}*.parquet")):
                row = store.read_table(path, CELL_SCHEMA).to_pylist()[0]
                key = (str(run_dir), row[col.cell_id], rerun_cause(row) == INTERFERENCE)
                used[key] = used.get(key, 0) + 1
        return cls(limit=limit, busy_limit=busy_limit, used=used, waits=waits)

    def _key(self, run_dir: Path, row: dict[str, Any]) -> tuple[str, str, bool]:
        return str(run_dir), row[col.cell_id], spoiled_by(row) == INTERFERENCE

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
        copy = dict(row, status=SUPERSEDED, reason=reason, rerun_cause=spoiled_by(row),
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
    """The transient in words from the row's numbers ('first 3 steps at 2.9-7.1x the window's median')."""
    steps, low, high = row[col.start_transient_steps], row.get(col.start_transient_low_x), \
        row.get(col.start_transient_high_x)
    if low is None or high is None:  # a row from before schema version 7
        return f"first {steps} step(s) slow"
    return f"{transient_steps_text(steps, low, high)} the window's median"


QUIET_WAIT_S = 120.0
"""Longest wait for a neighbour to leave before a window it spoiled runs again: a re-run beside the same neighbour
is spoiled too and spends the budget for nothing (one A/B spent all six re-runs of a repeat so). After it, the
re-run goes ahead and the budget bounds what the neighbour can cost."""
QUIET_SAMPLE_S = 1.0


def others_share(cores: Sequence[int], seconds: float = QUIET_SAMPLE_S) -> float | None:
    """Share of `cores`' time over the next `seconds` that processes other than this one and its descendants used
    (None: /proc/stat said nothing)."""
    before = tree_reading(cores)
    time.sleep(seconds)
    return foreign_share(before, tree_reading(cores))


def tree_reading(cores: Sequence[int]) -> Counters:
    """`cores`' ticks now, and this process's and its descendants' own (what others_share leaves out)."""
    busy, total, steal = read_proc_stat(cores)
    return Counters(time.monotonic(), busy, total, steal, tree_cpu_ticks(os.getpid()))


def wait_for_quiet(cores: Sequence[int], notify, *, max_wait_s: float = QUIET_WAIT_S,
                   sample: Callable[[Sequence[int]], float | None] = others_share,
                   budget: WaitBudget | None = None) -> float:
    """Wait, up to `max_wait_s` (and what is left of the command's `budget`, which the wait spends), until other
    processes use at most INTERFERENCE_THRESHOLD of `cores`; returns the seconds spent (one reading's,
    QUIET_SAMPLE_S, when the machine is quiet at once). Says when it starts waiting, who holds the cores, how much of
    the budget it has waited, and what it ended on."""
    limit = min(max_wait_s, budget.left_s) if budget is not None else max_wait_s
    start, said = time.monotonic(), False

    def spend(waited: float) -> float:
        if budget is not None:
            budget.waited_s += waited
        return waited

    while (share := sample(cores)) is not None and share > INTERFERENCE_THRESHOLD:
        waited = time.monotonic() - start
        if waited >= limit:
            spend(waited)
            of_budget = f"; {budget.waited_s:.0f} of the {budget.limit_s:.0f} s budget waited" if budget else ""
            notify(f"  still busy after {waited:.0f} s (other processes used {share:.0%} of the cores{of_budget})"
                   + ("" if budget is not None and budget.spent else ": running it again anyway"))
            return waited
        if not said:
            held = holders_text(cores)
            of_budget = f"; {budget.left_s:.0f} s of the {budget.limit_s:.0f} s budget left" if budget else ""
            notify(f"  waiting for the neighbour to leave (other processes use {share:.0%} of the cores"
                   f"{': ' + held if held else ''}; at most {limit:.0f} s{of_budget})")
            said = True
    waited = spend(time.monotonic() - start)
    if said:
        notify(f"  quiet after {waited:.0f} s")
    return waited


def holders_text(cores: Sequence[int], seconds: float = 0.5, top: int = 3) -> str:
    """`stress-ng (pid 812) 98%, python3 (pid 90) 41%`: the processes outside this command's own tree that used the
    most CPU over `seconds` (share of one core), as /proc tells; '' where it tells nothing. A process may run on
    other cores too: this names who is busy, the share of `cores` is others_share's."""
    own = _own_tree(os.getpid())
    first = _ticks_by_pid(own)
    time.sleep(seconds)
    second = _ticks_by_pid(own)
    hz = os.sysconf("SC_CLK_TCK")
    used = sorted(((second[pid][1] - first[pid][1], pid, second[pid][0]) for pid in second.keys() & first.keys()),
                  reverse=True)
    return ", ".join(f"{name} (pid {pid}) {ticks / hz / seconds:.0%}" for ticks, pid, name in used[:top] if ticks > 0)


def _own_tree(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += children.get(pid, [])
    return tree


def _parents() -> dict[int, int]:
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def _ticks_by_pid(skip: set[int]) -> dict[int, tuple[str, int]]:
    """pid -> (command name, user + system ticks) of every process not in `skip`."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        head, tail = stat.rsplit(")", 1)
        fields = tail.split()
        out[int(entry.name)] = (head.split("(", 1)[1], int(fields[11]) + int(fields[12]))
    return out


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
        waits = reruns.waits
        if waits is not None and waits.spent:  # its job is pending again: a --resume runs it
            raise MachineBusy(f"{label}: the wait budget ({waits.limit_s:.0f} s) is spent")
        cores = parse_cpu_list(row[col.cpu_affinity]) if row.get(col.cpu_affinity) else sorted(os.sched_getaffinity(0))
        (quiet or (lambda c: wait_for_quiet(c, notify, budget=waits)))(cores)
        if waits is not None and waits.spent:
            raise MachineBusy(f"{label}: still busy when the wait budget ({waits.limit_s:.0f} s) was spent")
    return True


def busy_summary(run_dirs: Sequence[Path]) -> str:
    """`the machine was busy: 11 of 16 windows taken under interference (other processes 48-76 % of the cell's
    cores)`: every window the folders hold, superseded ones included."""
    rows = [r for d in run_dirs for r in store.read_cells(d).to_pylist() if r["status"] in ("ok", SUPERSEDED)]
    hit = [r for r in rows if row_interference(r) is not None]
    shares = [r[col.foreign_cpu_frac] for r in hit if r.get(col.foreign_cpu_frac) is not None]
    others = f" (other processes {min(shares):.0%}-{max(shares):.0%} of the cell's cores)" if shares else ""
    return f"the machine was busy: {len(hit)} of {len(rows)} windows taken under interference{others}"
