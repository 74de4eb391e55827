"""Valid run folders at a stated scale (nights x cells x repeats, a step of stated size at a stated night), made
from a real run folder's rows or from nothing, for the history benchmark (benchmarks/history_scale.py) and the
tests that the step is found and that incremental history equals a cold one.

    python benchmarks/history_data.py OUT --nights 30 --cells 96 --ok-cells 36 --repeats 3 --step-pct 20
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.results import store  # noqa: E402
from harness.results.schema import CELL_SCHEMA, cell_table  # noqa: E402
from harness.matrix.cells import job_key  # noqa: E402

MATRIX_TEXT = 'version = 1\n[benchmark]\nname = "generated"\n'
"""The matrix every generated night names (history keeps only the newest run's matrix)."""
RATE_COLUMNS = ("throughput_img_per_s", "fast_step_img_per_s", "throughput_ci_low_img_per_s",
                "throughput_ci_high_img_per_s")
"""Columns scaled by a night's level (a rate: img/s)."""
LAYOUTS = ("folded", "per-job", "one-table")
START = datetime(2026, 1, 1, 2, 0, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scale:
    """What to generate: the history's size and the one step in it."""

    nights: int
    cells: int = 96
    """Cells of each night (the mission's --smoke matrix has 96)."""
    ok_cells: int = 36
    """Of which this many ran (status ok); the rest are skipped rows, as a CPU --smoke run leaves them."""
    repeats: int = 3
    step_pct: float = 20.0
    """Size of the step (throughput and fast steps, relative); 0: no step anywhere."""
    step_night: int | None = None
    """0-based night the new level starts (default: five nights before the end)."""
    step_cells: int = 1
    """The first this many ok cells step; every other series is flat."""
    repeat_noise_pct: float = 1.0
    """Spread of a repeat around its night (relative, normal on the log)."""
    night_noise_pct: float = 0.5
    """Spread of a night's level around the series' level."""
    layout: str = "folded"
    """folded: cells/run-rows.parquet, as a finished run leaves it (harness.results.folded); per-job: one file per
    (cell, repeat), as a run in flight (or an nvbench before folding) leaves them; one-table: cells/all.parquet."""
    seed: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.nights < 1 or self.cells < 1 or self.repeats < 1:
            problems.append(f"nights={self.nights}, cells={self.cells}, repeats={self.repeats}: each must be >= 1")
        if not 0 <= self.ok_cells <= self.cells:
            problems.append(f"ok_cells={self.ok_cells}: must be in [0, cells={self.cells}]")
        if not 0 <= self.step_cells <= self.ok_cells:
            problems.append(f"step_cells={self.step_cells}: must be in [0, ok_cells={self.ok_cells}]")
        if self.step_night is not None and not 0 < self.step_night < self.nights:
            problems.append(f"step_night={self.step_night}: must be in [1, nights={self.nights})")
        if self.layout not in LAYOUTS:
            problems.append(f"layout={self.layout!r}: must be one of {', '.join(LAYOUTS)}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def step_at(self) -> int:
        """The night the new level starts."""
        return self.step_night if self.step_night is not None else max(1, self.nights - 5)


def template_rows(scale: Scale, source: Path | None = None) -> list[dict[str, Any]]:
    """One row per cell (repeat 0): a real run folder's (`source`), its first `scale.cells` cells, ok cells
    first; or, without one, rows made here with the axes of the mission's matrix and plausible values."""
    if source is not None:
        rows = [r for r in store.read_cells(source).to_pylist() if r["repeat"] in (0, None)]
        rows.sort(key=lambda r: (r["status"] != "ok", r["cell_id"]))
        if len(rows) < scale.cells:
            raise ValueError(f"{source}: {len(rows)} cells, fewer than cells={scale.cells}")
        return rows[:scale.cells]
    rng = np.random.default_rng(scale.seed)
    out = []
    for i in range(scale.cells):
        backend = ("synthetic", "pytorch", "dali")[i % 3]
        fmt, precision = ("nchw", "nhwc")[(i // 3) % 2], ("fp32", "bf16", "fp16")[(i // 6) % 3]
        cid = f"resnet50_{backend}_{fmt}_{precision}_ws1_ga1_c{i:03d}"
        ok = i < scale.ok_cells
        tput = float(rng.uniform(20, 400)) if ok else None
        out.append({"cell_id": cid, "model": "resnet50", "backend": backend, "memory_format": fmt,
                    "precision": precision, "world_size": 1, "grad_accum": 1, "compile": "eager", "device": "cpu",
                    "status": "ok" if ok else "skipped", "reason": "" if ok else "generated: not on this device",
                    "throughput_img_per_s": tput, "fast_step_img_per_s": tput * 1.1 if ok else None,
                    "throughput_ci_low_img_per_s": tput * 0.99 if ok else None,
                    "throughput_ci_high_img_per_s": tput * 1.01 if ok else None,
                    "exposed_data_wait_frac": float(rng.uniform(0.1, 0.3)) if ok else None,
                    "is_steady": ok, "fire_drill_pct": 0.0})
    return out


def _night_rows(scale: Scale, templates: list[dict[str, Any]], night: int, run_id: str,
                rng: np.random.Generator) -> list[dict[str, Any]]:
    rows = []
    for k, template in enumerate(templates):
        level = 1.0 + (scale.step_pct / 100 if k < scale.step_cells and night >= scale.step_at else 0.0)
        night_effect = math.exp(rng.normal(0, scale.night_noise_pct / 100))
        for r in range(scale.repeats):
            row = dict(template, run_id=run_id, repeat=r)
            if row["status"] == "ok":
                factor = level * night_effect * math.exp(rng.normal(0, scale.repeat_noise_pct / 100))
                for column in RATE_COLUMNS:
                    if row.get(column) is not None:
                        row[column] = float(row[column]) * factor
                if row.get("exposed_data_wait_frac") is not None:  # a fraction: noise in points, kept in [0, 1]
                    row["exposed_data_wait_frac"] = min(1.0, max(0.0, row["exposed_data_wait_frac"]
                                                                 + rng.normal(0, 0.002)))
            rows.append(row)
    return rows


def _write_cells(folder: Path, table: pa.Table, layout: str) -> None:
    # Plain pq.write_table, no fsync per file: generated data is rebuilt at will, and 100,000 fsyncs would
    # make generating a year slower than reading it.
    folder.mkdir(parents=True, exist_ok=True)
    if layout == "one-table":
        pq.write_table(table, folder / "all.parquet", compression="zstd")
        return
    keys = [job_key(cid, r) for cid, r in zip(table.column("cell_id").to_pylist(), table.column("repeat").to_pylist())]
    if layout == "folded":  # in the per-job files' order, as folded.fold_folder writes it
        order = sorted(range(len(keys)), key=lambda i: keys[i])
        meta = dict(table.schema.metadata or {})
        meta[store.FOLDED_FROM_KEY] = json.dumps([[keys[i], 1] for i in order]).encode()
        pq.write_table(table.take(order).replace_schema_metadata(meta), folder / store.FOLDED, compression="zstd")
        return
    for i, key in enumerate(keys):
        pq.write_table(table.slice(i, 1), folder / f"{key}.parquet", compression="zstd")


def write_night(out: Path, scale: Scale, templates: list[dict[str, Any]], night: int) -> Path:
    """Night `night` (0-based) of the history: a run folder with manifest.json and cells/, as `nvbench run`
    leaves a finished run. Deterministic in (scale.seed, night)."""
    rng = np.random.default_rng([scale.seed, night])
    created = START + timedelta(days=night)
    run_id = f"generated-{created:%Y%m%d-%H%M%S}"
    run = out / run_id
    rows = _night_rows(scale, templates, night, run_id, rng)
    known = set(CELL_SCHEMA.names)
    _write_cells(run / "cells", cell_table([{k: v for k, v in r.items() if k in known} for r in rows]), scale.layout)
    sha = f"{night:08x}" + "0" * 32
    manifest = {"run_id": run_id, "created_at": created.isoformat(), "matrix_text": MATRIX_TEXT,
                "matrix_source": "generated", "repeats": scale.repeats, "num_cells": scale.cells,
                "environment": {"nvbench_git_sha": sha, "nvbench_git_dirty": False, "hostname": "generated"}}
    (run / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return run


def generate(out: Path, scale: Scale, source: Path | None = None) -> list[Path]:
    """Every night of `scale` under `out` (made if missing), oldest first."""
    out.mkdir(parents=True, exist_ok=True)
    templates = template_rows(scale, source)
    return [write_night(out, scale, templates, night) for night in range(scale.nights)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="folder the run folders go into")
    p.add_argument("--from", dest="source", type=Path, help="a real run folder whose rows are the template "
                   "(default: none, rows made here)")
    for name, default in (("nights", 30), ("cells", 96), ("ok-cells", 36), ("repeats", 3), ("step-cells", 1),
                          ("seed", 0)):
        p.add_argument(f"--{name}", type=int, default=default, help=f"(default: {default})")
    p.add_argument("--step-pct", type=float, default=20.0, help="(default: 20)")
    p.add_argument("--step-night", type=int, help="0-based (default: five nights before the end)")
    p.add_argument("--layout", choices=LAYOUTS, default="folded", help="(default: folded)")
    a = p.parse_args(argv)
    scale = Scale(nights=a.nights, cells=a.cells, ok_cells=a.ok_cells, repeats=a.repeats, step_pct=a.step_pct,
                  step_night=a.step_night, step_cells=a.step_cells, layout=a.layout, seed=a.seed)
    runs = generate(a.out, scale, a.source)
    print(f"{len(runs)} run folders in {a.out}; step of {scale.step_pct:+g} % at night {scale.step_at} "
          f"in {scale.step_cells} cell(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
