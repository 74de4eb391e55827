"""An Nsight Systems timeline read back: the nvbench domain's NVTX ranges from `nsys export --type sqlite`.

Pure reading (sqlite3 only), so that a test, `nvbench profile` and a person at a prompt see the same thing:
every push/pop range of the domain with its thread, start, end and parent (the innermost range of the same
thread that encloses it), and a per-name summary of the ranges inside the measured window.
"""

from __future__ import annotations

import sqlite3
import statistics
from dataclasses import dataclass
from pathlib import Path

PUSH_POP = 59
"""ENUM_NSYS_EVENT_TYPE's NvtxPushPopRange: a completed push/pop range."""
DOMAIN_CREATE = 75
"""NvtxDomainCreate: its text is the domain's name, its domainId the id its ranges carry."""


class TimelineReadError(ValueError):
    """The file is not an nsys SQLite export, or holds no range of the domain."""


@dataclass(frozen=True, slots=True)
class Range:
    name: str
    start_ns: int
    end_ns: int | None
    """None: pushed and never popped (nsys 2022.4's exporter ends such a range at the capture's end,
    ANALYSIS_DETAILS.duration; read_ranges counts that end as open)."""
    thread: int
    parent: int | None = None
    """Index of the enclosing range of the same thread in the list read_ranges returns."""

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6 if self.end_ns is not None else float("nan")


def read_ranges(path: Path, domain: str = "nvbench") -> list[Range]:
    """Every push/pop range of `domain`, in start order, each with its parent."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise TimelineReadError(f"{path}: cannot be opened: {exc}") from None
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "NVTX_EVENTS" not in tables:
            raise TimelineReadError(f"{path}: no NVTX_EVENTS table: the capture recorded no NVTX event at all")
        ids = [r[0] for r in con.execute("SELECT domainId FROM NVTX_EVENTS WHERE eventType = ? AND text = ?",
                                         (DOMAIN_CREATE, domain))]
        if not ids:
            raise TimelineReadError(f"{path}: the NVTX domain {domain!r} was never created in this capture")
        marks = ",".join("?" * len(ids))
        text = ("COALESCE(e.text, s.value)" if "StringIds" in tables else "e.text")
        join = "LEFT JOIN StringIds s ON s.id = e.textId" if "StringIds" in tables else ""
        capture_end = None  # nsys 2022.4 ends a range never popped at the capture's end rather than leaving it open
        if "ANALYSIS_DETAILS" in tables:
            capture_end = con.execute("SELECT MAX(duration) FROM ANALYSIS_DETAILS").fetchone()[0]
        rows = con.execute(
            f"SELECT {text}, e.start, e.end, e.globalTid FROM NVTX_EVENTS e {join} "
            f"WHERE e.eventType = ? AND e.domainId IN ({marks}) ORDER BY e.globalTid, e.start, e.end DESC",
            (PUSH_POP, *ids)).fetchall()
    except sqlite3.Error as exc:
        raise TimelineReadError(f"{path}: not an nsys SQLite export: {exc}") from None
    finally:
        con.close()
    out: list[Range] = []
    open_: list[int] = []  # stack of enclosing ranges of the current thread
    for name, start, end, thread in rows:
        while open_ and (out[open_[-1]].thread != thread or _ends_before(out[open_[-1]], start)):
            open_.pop()
        if end is not None and capture_end is not None and int(end) >= int(capture_end):
            end = None  # pushed and never popped: the exporter closed it at the capture's end
        out.append(Range(name=name or "", start_ns=int(start), end_ns=None if end is None else int(end),
                         thread=int(thread), parent=open_[-1] if open_ else None))
        open_.append(len(out) - 1)
    return out


def _ends_before(r: Range, start: int) -> bool:
    return r.end_ns is not None and r.end_ns <= start


def children(ranges: list[Range], index: int) -> list[Range]:
    return [r for r in ranges if r.parent == index]


def ancestors(ranges: list[Range], index: int) -> list[str]:
    """Names of the ranges enclosing ranges[index], innermost first."""
    names, parent = [], ranges[index].parent
    while parent is not None:
        names.append(ranges[parent].name)
        parent = ranges[parent].parent
    return names


@dataclass(frozen=True, slots=True)
class RangeSummary:
    name: str
    count: int
    total_ms: float
    median_ms: float


def window_summary(ranges: list[Range], window: str = "measure") -> list[RangeSummary]:
    """Per range name, the ranges inside the measured window (`window` among their ancestors), in the order
    each name first appears."""
    by_name: dict[str, list[float]] = {}
    for i, r in enumerate(ranges):
        if r.end_ns is not None and window in ancestors(ranges, i):
            by_name.setdefault(r.name, []).append(r.duration_ms)
    return [RangeSummary(name, len(d), sum(d), statistics.median(d)) for name, d in by_name.items()]


def render_summary(summary: list[RangeSummary]) -> str:
    lines = [f"{'range':<12} {'count':>6} {'total ms':>10} {'median ms':>10}"]
    lines += [f"{s.name:<12} {s.count:>6} {s.total_ms:>10.2f} {s.median_ms:>10.3f}" for s in summary]
    return "\n".join(lines)
