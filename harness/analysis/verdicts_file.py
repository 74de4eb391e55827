"""verdicts.parquet: its version history, its Arrow schema, the table written from a comparison, and reading it
back as CellVerdicts (older versions' missing columns read as null)."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.analysis.verdict import METRIC_COLUMNS, VERDICT_COLUMNS, CellVerdict, Comparison, MetricVerdict
from harness.results import store

VERDICTS_VERSION = 8
"""Version of verdicts.parquet (schema metadata nvbench.verdicts_version). 1: first release. 2: the
speed-adjustment columns unadjusted_effect_pct, speed_probe_change_pct and speed_slope. 3: the fast-step
rate (decided_by, throughput_p_value, fast_effect_pct, fast_ci_low_pct, fast_ci_high_pct, fast_p_value,
candidate_fast_img_per_s, baseline_fast_img_per_s); p_value is the cell's (Bonferroni over its metrics). 4: the
compile axis (`compile`; null when read from an older file). 5: the verdict `inconclusive` (a cell that is
neither shown changed nor shown inside the floor; `unchanged` now means equivalence shown) and its
`repeats_needed`; older files read with repeats_needed null, their verdicts as they were written. 6: the
phase the change sits in (phase, phase_change_ms with its interval, step_change_ms, attribution); null or
empty when read from an older file. 7: the model axis (`model`, after cell_id; null when read from an older
file). 8: floor_source, the rule that set the cell's floor (the matrix's [judge]; empty when read from an older
file)."""

VERSION_KEY = b"nvbench.verdicts_version"

_ARROW_TYPES = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}


def verdict_schema() -> pa.Schema:
    """verdicts.parquet's columns (VERDICT_COLUMNS), typed from the CellVerdict and MetricVerdict fields."""
    types = {f.name: f.type for f in fields(CellVerdict)}
    metric = {f.name: f.type for f in fields(MetricVerdict)}
    types |= {column: metric[name] for columns in METRIC_COLUMNS.values() for name, column in columns.items()}
    return pa.schema([pa.field(name, _ARROW_TYPES[str(types[name]).split("|")[0].strip()])
                      for name in VERDICT_COLUMNS])


def verdict_table(comparison: Comparison) -> pa.Table:
    """One row per cell; schema metadata carries the version, mode, baseline and thresholds."""
    schema = verdict_schema().with_metadata({
        VERSION_KEY: str(VERDICTS_VERSION).encode(), b"nvbench.table": b"verdicts",
        b"nvbench.mode": comparison.mode.encode(), b"nvbench.baseline": comparison.baseline_label.encode(),
        b"nvbench.thresholds": json.dumps(asdict(comparison.thresholds), sort_keys=True).encode(),
        b"nvbench.run_id": comparison.candidate.run_id.encode()})
    rows = [v.to_row() for v in comparison.verdicts]
    arrays = [pa.array([r[f.name] for r in rows], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def read_verdicts(path: Path) -> list[CellVerdict]:
    """verdicts.parquet back as CellVerdicts. Older versions lack the speed-adjustment (2), fast-step (3),
    compile (4), repeats_needed (5), phase (6), model (7) and floor_source (8) columns: they read as null
    (floor_source: empty). store.UnreadableFile,
    naming the file, when it is no verdicts table."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise store.UnreadableFile(f"{path}: not a readable verdicts table ({type(exc).__name__})") from None
    version = int((table.schema.metadata or {}).get(VERSION_KEY, b"0"))
    if not 1 <= version <= VERDICTS_VERSION:
        why = "no nvbench.verdicts_version in its metadata" if version < 1 else \
            f"version {version} is newer than this nvbench's {VERDICTS_VERSION}; upgrade nvbench"
        raise store.UnreadableFile(f"{path}: not a verdicts table this nvbench reads ({why})")
    return [CellVerdict.from_row(row) for row in table.to_pylist()]
