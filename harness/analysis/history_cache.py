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
from typing import Any, Mapping

import numpy as np
from scipy import special as _special

from harness.analysis.runs import RunInputError
from harness.matrix.sections import AXES
from harness.stats.core import Interval
from harness.catalogue import col

CACHE_DIR = ".nvbench-cache"
"""Beside the run folders (history skips names starting with '.')."""
CACHE_VERSION = 2
"""Bump when a summary's or a detection's content changes meaning: every entry of another version is dropped."""
NIGHTS_FILE, DETECT_FILE = "nights.json", "detections.json"

METRIC_COLUMNS = (col.throughput_img_per_s, col.fast_step_img_per_s, "top1", col.exposed_data_wait_frac)
"""The cell columns a history follows (history.METRICS' columns, read from here to keep the import one way)."""
RELATIVE = {col.throughput_img_per_s, col.fast_step_img_per_s}
THROUGHPUT = col.throughput_img_per_s
CONFIDENCE = 0.95
"""Level of a night's interval (inference.mean_interval's default, as history has always drawn it)."""
COLUMNS = [col.cell_id, "repeat", "status", *AXES, *METRIC_COLUMNS, col.throughput_ci_low_img_per_s,
           col.throughput_ci_high_img_per_s, col.fire_drill_pct]
"""The only columns history reads of a run."""


def night_key(run_dir: Path) -> str:
    """What a night's summary depends on: its manifest's bytes and every cells/ file's size and modification time
    (the folded one's, or each job's). Any of them changed, added or removed: another key."""
    digest = hashlib.sha256()
    digest.update((run_dir / "manifest.json").read_bytes())
    listing = sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(run_dir / "cells")
                     if e.is_file()) if (run_dir / "cells").is_dir() else None
    digest.update(json.dumps([CACHE_VERSION, str(run_dir.resolve()), listing]).encode())
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


def summarise(run_dir: Path, manifest: Mapping[str, Any], rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """A night as history needs it (JSON): its identity, its fire drill, and each cell's axes and points."""
    cells: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row["status"] == "ok" and (row.get(col.throughput_img_per_s) or 0) > 0:
            cells.setdefault(row[col.cell_id], []).append(row)
    points = _points(cells)
    return {"path": str(run_dir), col.run_id: str(manifest.get(col.run_id) or run_dir.name),
            "created_at": str(manifest.get("created_at") or ""),
            "environment": manifest.get("environment") or {},
            col.fire_drill_pct: max((float(r.get(col.fire_drill_pct) or 0.0) for r in rows), default=0.0),
            "cells": {cid: {"axes": {a: rs[0].get(a) for a in AXES}, "points": points[cid]}
                      for cid, rs in cells.items()}}


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The run's cell rows, history's columns only; RunInputError naming the file when they cannot be read."""
    from harness.results import store

    if not (run_dir / "cells").is_dir():
        raise RunInputError([f"{run_dir}: not an nvbench run folder (needs manifest.json and cells/)"])
    try:
        rows = store.read_cells(run_dir, columns=COLUMNS).to_pylist()
    except store.UnreadableFile as exc:
        raise RunInputError([str(exc)]) from None
    if not rows:
        raise RunInputError([f"{run_dir / 'cells'}: no result rows (the run has not finished a job)"])
    return rows


class Cache:
    """The folder's two caches, loaded once and written once; `folder` None: nothing kept (a cold run)."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.nights = self._load(NIGHTS_FILE)
        self.detections = self._load(DETECT_FILE)
        self.used_nights: dict[str, Any] = {}
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
        hit = self.nights.get(key)
        if hit is not None:
            self.used_nights[key] = hit
        return hit

    def keep_night(self, key: str, summary: dict[str, Any]) -> None:
        self.used_nights[key] = summary

    def detection(self, key: str) -> Any:
        hit = self.detections.get(key)
        if hit is not None:
            self.used_detections[key] = hit
        return hit

    def keep_detection(self, key: str, value: Any) -> None:
        self.used_detections[key] = value

    def save(self) -> None:
        """Only what this history used: a removed night's entries, and detections of series no longer made,
        leave the cache. A folder that cannot be written keeps no cache (the answer is the same)."""
        if self.folder is None:
            return
        from harness.results import store

        try:
            for name, entries, loaded in ((NIGHTS_FILE, self.used_nights, self.nights),
                                          (DETECT_FILE, self.used_detections, self.detections)):
                if entries.keys() == loaded.keys():
                    continue  # nothing added or dropped: the file on disk already says it
                store.write_bytes(self.folder / name, json.dumps({"version": CACHE_VERSION, "entries": entries},
                                                                 sort_keys=True).encode())
        except OSError:
            pass


def series_key(parts: Any) -> str:
    """A detection's key: the settings, the series' identity and every value it was made of."""
    return hashlib.sha256(json.dumps([CACHE_VERSION, parts], default=repr).encode()).hexdigest()


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
    return str(sha)[:12] + ("+dirty" if environment.get("nvbench_git_dirty") else "")
