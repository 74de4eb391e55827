"""Reading a history's run folders once, as per-night summaries (each cell's points), and what earlier nights
computed, kept beside the history (HISTORY/.nvbench-cache/): summaries keyed by the files they came from,
change detections keyed by the series they were made of. A cached answer is the cold one, never an estimate."""

from __future__ import annotations

import hashlib
import json
import math
import os
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import special as _special

from harness.analysis.load.runs import RunInputError, check_run_folder
from harness.results.work import WORK_FILE
from harness.matrix.sections import AXES
from harness.stats.core import Interval
from harness.catalogue import col
from harness.catalogue.tracked import TRACKED
from harness.results.env import short_commit

CACHE_DIR = ".nvbench-cache"
"""Beside the run folders (history skips names starting with '.')."""
CACHE_VERSION = 7
"""Bump when a summary's or a detection's content changes meaning: every entry of another version is dropped.
4: a night's summary holds its counted work (work.parquet), and its key the file's size and time. 5: windows taken
under interference are left out of a night's points, and a cell with too few clean ones is busy that night. 6: a
night's summary counts its rows, its windows and those taken under interference (what history's line says it left
out). 7: each cell's label, as its rows recorded it."""
NIGHTS_DIR, DETECT_FILE = "nights", "detections.json"
OLD_NIGHTS_FILE = "nights.json"
"""Where cache version 2 kept every night's summary in one file (removed when a newer history saves)."""

METRIC_COLUMNS = tuple(m.column for m in TRACKED)
"""The cell columns a history follows (harness.catalogue.tracked)."""
RELATIVE = {m.column for m in TRACKED if m.relative}
THROUGHPUT = col.throughput_img_per_s
CONFIDENCE = 0.95
"""Level of a night's interval (inference.mean_interval's default, as history has always drawn it)."""
INTERFERENCE_COLUMNS = (col.foreign_cpu_frac, col.steal_frac, col.foreign_cpu_s, col.steal_s)
"""What tells a window taken under interference (harness.results.interference.row_interference)."""
COLUMNS = [col.cell_id, col.cell_label, "repeat", "status", *AXES, *METRIC_COLUMNS, col.throughput_ci_low_img_per_s,
           col.throughput_ci_high_img_per_s, col.fire_drill_pct, *INTERFERENCE_COLUMNS]
"""The only columns history reads of a run."""


def night_key(run_dir: Path) -> str:
    """What a night's summary depends on: its manifest's bytes and every cells/ file's size and modification time
    (the folded one's, or each job's). Any of them changed, added or removed: another key."""
    digest = hashlib.sha256()
    digest.update((run_dir / "manifest.json").read_bytes())
    listing = sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(run_dir / "cells")
                     if e.is_file()) if (run_dir / "cells").is_dir() else None
    work = run_dir / WORK_FILE
    counted = [work.stat().st_size, work.stat().st_mtime_ns] if work.is_file() else None
    digest.update(json.dumps([CACHE_VERSION, str(run_dir.resolve()), listing, counted]).encode())
    return digest.hexdigest()


def _points(cells: dict[str, list[Mapping[str, Any]]]) -> dict[str, dict[str, list[Any]]]:
    """cell -> column -> [value, low, high, repeats, [values]]: each cell's estimate over its ok repeats (the
    mean with its t interval, as inference.mean_interval gives it), every cell of the night in one pass."""
    out: dict[str, dict[str, list[Any]]] = {cid: {} for cid in cells}
    ids = list(cells)
    q = (1 + CONFIDENCE) / 2
    for column in METRIC_COLUMNS:
        which, values = [], []
        for k, cid in enumerate(ids):
            for r in cells[cid]:
                v = r.get(column)
                if v is not None and math.isfinite(v) and (v > 0 or column not in RELATIVE):
                    which.append(k)
                    values.append(float(v))
        if not values:
            continue
        idx, x = np.array(which), np.array(values)
        n = np.bincount(idx, minlength=len(ids))
        mean = np.bincount(idx, x, minlength=len(ids)) / np.maximum(n, 1)
        ss = np.bincount(idx, (x - mean[idx]) ** 2, minlength=len(ids))
        with np.errstate(divide="ignore", invalid="ignore"):
            half = _special.stdtrit(np.maximum(n - 1, 1), q) * np.sqrt(ss / (n - 1) / n)
        for k in np.flatnonzero(n):
            cid, lo, hi = ids[k], mean[k] - half[k], mean[k] + half[k]
            if n[k] == 1:  # one repeat: its own window's interval (throughput), else none
                first = cells[cid][0]
                lo = (first.get(col.throughput_ci_low_img_per_s) or math.nan) if column == THROUGHPUT else math.nan
                hi = (first.get(col.throughput_ci_high_img_per_s) or math.nan) if column == THROUGHPUT else math.nan
            out[cid][column] = [float(mean[k]), float(lo), float(hi), int(n[k]), x[idx == k].tolist()]
    return out


def work_summary(work_rows: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """cell -> {processes, digest, ranges: [[phase, counter, key, low, high], ...]}: each cell's counted work as
    the diff reads it (work_diff.side_work); the digest lets consecutive nights be compared without the ranges."""
    from harness.analysis.judge.work_diff import side_work

    out = {}
    for cid in sorted({r[col.cell_id] for r in work_rows or ()}):
        side = side_work(work_rows, cid)
        ranges = sorted([*item, lo, hi] for item, (lo, hi) in side.ranges.items())
        digest = hashlib.sha256(json.dumps([side.processes, ranges]).encode()).hexdigest()
        out[cid] = {"processes": side.processes, "digest": digest, "ranges": ranges}
    return out


def summarise(run_dir: Path, manifest: Mapping[str, Any], rows: list[Mapping[str, Any]],
              work_rows: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """A night as history needs it (JSON): its identity, its fire drill, each cell's axes and points, and each
    cell's counted work where the night has a work.parquet."""
    from harness.results.interference import clean_rows, too_busy

    cells: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row["status"] == "ok" and (row.get(col.throughput_img_per_s) or 0) > 0:
            cells.setdefault(row[col.cell_id], []).append(row)
    clean = {cid: clean_rows(rs) for cid, rs in cells.items()}
    busy = {cid: busy_record(rs, len(clean[cid])) for cid, rs in cells.items() if too_busy(rs)}
    points = _points({cid: rs for cid, rs in clean.items() if cid not in busy and rs})
    counts = {"rows": len(rows), "windows": sum(map(len, cells.values())),
              "spoiled": sum(len(rs) - len(clean[cid]) for cid, rs in cells.items())}
    return {"path": str(run_dir), col.run_id: str(manifest.get(col.run_id) or run_dir.name),
            "created_at": str(manifest.get("created_at") or ""),
            "environment": manifest.get("environment") or {},
            col.fire_drill_pct: max((float(r.get(col.fire_drill_pct) or 0.0) for r in rows), default=0.0),
            "cells": {cid: {"axes": {a: rs[0].get(a) for a in AXES}, "label": rs[0].get(col.cell_label) or "",
                            "points": points.get(cid, {})}
                      for cid, rs in cells.items()}, "work": work_summary(work_rows), "busy": busy,
            "counts": counts}


def busy_record(rows: Sequence[Mapping[str, Any]], clean: int) -> dict[str, Any]:
    """{windows, spoiled, share: [low, high]}: a busy cell's night as the page says it (other processes' share of
    the cell's cores over its spoiled windows; None where no window recorded one)."""
    from harness.results.interference import row_interference

    shares = [float(r[col.foreign_cpu_frac]) for r in rows if row_interference(r) is not None
              and r.get(col.foreign_cpu_frac) is not None and math.isfinite(r[col.foreign_cpu_frac])]
    spoiled = len(rows) - clean
    return {"windows": len(rows), "spoiled": spoiled, "share": [min(shares), max(shares)] if shares else None}


def busy_words(busy: Mapping[str, Any]) -> str:
    """`busy: c1 (3 of 5 windows under interference, others 48%-76% of its cores); ...`, or '' (a night's busy
    cells as summarise recorded them)."""
    parts = []
    for cid, b in sorted(busy.items()):
        share = b.get("share")
        others = f", others {share[0]:.0%}-{share[1]:.0%} of its cores" if share else ""
        parts.append(f"{cid} ({b['spoiled']} of {b['windows']} windows under interference{others})")
    return ("busy: " + "; ".join(parts)) if parts else ""


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The run's cell rows, history's columns only; RunInputError naming the file when they cannot be read."""
    from harness.results import store

    check_run_folder(run_dir)
    try:
        rows = store.read_cells(run_dir, columns=COLUMNS).to_pylist()
    except store.UnreadableFile as exc:
        raise RunInputError([str(exc)]) from None
    if not rows:
        raise RunInputError([f"{run_dir / 'cells'}: no result rows (the run has not finished a job)"])
    return rows


class Cache:
    """The folder's caches: each night's summary in a file of its own (NIGHTS_DIR/KEY.json, read when asked
    for, so that tonight's history writes one new file, not a year of them again), and the detections in one
    file, loaded once and written once. `folder` None: nothing kept (a cold run)."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.detections = self._load(DETECT_FILE)
        self.used_nights: dict[str, Any] = {}
        self.new_nights: set[str] = set()
        self.used_detections: dict[str, Any] = {}

    def _load(self, name: str) -> dict[str, Any]:
        if self.folder is None:
            return {}
        try:
            doc = json.loads((self.folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: recomputed, then rewritten
        return doc.get("entries", {}) if isinstance(doc, dict) and doc.get("version") == CACHE_VERSION else {}

    def night(self, key: str) -> dict[str, Any] | None:
        if self.folder is None:
            return None
        try:
            doc = json.loads((self.folder / NIGHTS_DIR / f"{key}.json").read_bytes())
        except (OSError, ValueError):
            return None  # none yet, or unreadable: summarised again, then rewritten
        if not (isinstance(doc, dict) and doc.get("version") == CACHE_VERSION and isinstance(doc.get("night"), dict)):
            return None
        self.used_nights[key] = doc["night"]
        return doc["night"]

    def keep_night(self, key: str, summary: dict[str, Any]) -> None:
        self.used_nights[key] = summary
        self.new_nights.add(key)

    def detection(self, key: str) -> Any:
        hit = self.detections.get(key)
        if hit is not None:
            self.used_detections[key] = hit
        return hit

    def keep_detection(self, key: str, value: Any) -> None:
        self.used_detections[key] = value

    def save(self) -> None:
        """Only what this history used: a removed night's summary, and detections of series no longer made,
        leave the cache. A folder that cannot be written keeps no cache (the answer is the same)."""
        if self.folder is None:
            return
        try:
            nights = self.folder / NIGHTS_DIR
            for key in sorted(self.new_nights):
                _replace(nights / f"{key}.json",
                         json.dumps({"version": CACHE_VERSION, "night": self.used_nights[key]}).encode())
            for entry in os.scandir(nights) if nights.is_dir() else ():
                if entry.name.endswith(".json") and entry.name[:-5] not in self.used_nights:
                    os.unlink(entry.path)  # a night removed or rewritten since: its summary goes
            if self.used_detections.keys() != self.detections.keys():  # else the file on disk already says it
                _replace(self.folder / DETECT_FILE, json.dumps(
                    {"version": CACHE_VERSION, "entries": self.used_detections}, sort_keys=True).encode())
            (self.folder / OLD_NIGHTS_FILE).unlink(missing_ok=True)  # version 2's one file of every night
        except OSError:
            pass


def _replace(path: Path, data: bytes) -> None:
    """Written under a temporary name, then renamed: a reader sees the old file or the new one. Not synced to
    disk (a year of nights' summaries would pay a sync each): a file a crash left empty or cut short does not
    parse, and is recomputed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def series_key(parts: Any, counts: Sequence[int], values: Sequence[float]) -> str:
    """A detection's key: the settings and the series' identity (`parts`, as JSON), and every value it was made
    of, as the bytes of its floats (a year of nights' repeats hash in microseconds, where JSON took a millisecond)
    with each night's count of them."""
    digest = hashlib.sha256(json.dumps([CACHE_VERSION, parts], default=repr).encode())
    digest.update(np.asarray(counts, dtype=np.int64).tobytes())
    digest.update(np.asarray(values, dtype=np.float64).tobytes())
    return digest.hexdigest()


def to_plain(obj: Any) -> dict[str, Any]:
    """A detection's dataclass (ChangePoint, Trend) as JSON-able fields; its intervals as their fields."""
    return {f.name: (to_plain(v) if isinstance(v := getattr(obj, f.name), Interval) else v) for f in fields(obj)}


def from_plain(kind: type, plain: Mapping[str, Any]) -> Any:
    return kind(**{k: Interval(**v) if isinstance(v, dict) else v for k, v in plain.items()})


def matrix_name(manifest: Mapping[str, Any]) -> str:
    """The matrix's benchmark name (manifest's matrix_text), or its source path."""
    text = manifest.get("matrix_text")
    if isinstance(text, str):
        try:
            name = tomllib.loads(text).get("benchmark", {}).get("name")
            if isinstance(name, str) and name:
                return name
        except tomllib.TOMLDecodeError:
            pass
    return str(manifest.get("matrix_source") or "?")


def commit(environment: Mapping[str, Any]) -> str:
    """The harness's commit a run recorded (short), `+dirty` with uncommitted changes; `?` unknown."""
    sha = environment.get("nvbench_git_sha")
    if not sha:
        return "?"
    return short_commit(sha) + ("+dirty" if environment.get("nvbench_git_dirty") else "")
