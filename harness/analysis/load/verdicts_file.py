"""verdicts.parquet: its Arrow schema (its columns and version history: harness.catalogue.verdicts), the table
written from a comparison, and reading it back as CellVerdicts (older versions' missing columns read as null)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from harness.analysis.judge.verdict import CellVerdict, Comparison
from harness.catalogue import col
from harness.catalogue.cells import label_from_id
from harness.catalogue.verdicts import VERDICT_COLUMNS, VERDICTS_VERSION
from harness.results import formats
from harness.results.schema import arrow_field

def _gate_flag(table: pa.Table) -> pa.Table:
    """Version 13 -> 14: before the flag, a gate's words were set only when one broke (null where no work was
    diffed); the other columns version 14 added read empty (from_row's defaults)."""
    names = table.column_names
    if col.work_gate_broken in names or col.work not in names or col.work_gate not in names:
        return table
    flags = [bool(gate) if work is not None else None
             for work, gate in zip(table.column(col.work).to_pylist(), table.column(col.work_gate).to_pylist())]
    return table.append_column(pa.field(col.work_gate_broken, pa.bool_()), pa.array(flags, type=pa.bool_()))


def _labels(table: pa.Table) -> pa.Table:
    """Version 14 -> 15: the label, before it was data, was the id without its hash."""
    if col.cell_label in table.column_names:
        return table
    labels = [label_from_id(str(cid)) for cid in table.column(col.cell_id).to_pylist()]
    return table.append_column(pa.field(col.cell_label, pa.string()), pa.array(labels, pa.string()))


VERDICTS = formats.Format(name="verdicts", key="nvbench.verdicts_version", current=VERDICTS_VERSION,
                          steps={13: _gate_flag, 14: _labels})
"""verdicts.parquet as the one reader reads it: every version; a column a version added reads null (from_row)."""
VERSION_KEY = VERDICTS.key.encode()

CANDIDATE_KEY, BASELINE_KEY = b"nvbench.candidate_path", b"nvbench.baseline_path"
"""verdicts.parquet's metadata: the run folders the report compared (the baseline's empty where it had none), so a
step after it (the nightly's alarms) reads their work and repeats from the folders, never from the report's words."""


def verdict_schema() -> pa.Schema:
    """verdicts.parquet's columns as harness.catalogue.verdicts declares them, each with its unit and meaning."""
    return pa.schema([arrow_field(c) for c in VERDICT_COLUMNS])


def verdict_table(comparison: Comparison) -> pa.Table:
    """One row per cell; schema metadata carries the version, mode, baseline and thresholds, each field its unit
    and meaning (harness.catalogue.verdicts)."""
    schema = verdict_schema().with_metadata({
        VERSION_KEY: str(VERDICTS_VERSION).encode(), b"nvbench.table": b"verdicts",
        b"nvbench.mode": comparison.mode.encode(), b"nvbench.baseline": comparison.baseline_label.encode(),
        b"nvbench.thresholds": json.dumps(asdict(comparison.thresholds), sort_keys=True).encode(),
        b"nvbench.run_id": comparison.candidate.run_id.encode(),
        CANDIDATE_KEY: comparison.candidate.path.encode(),
        BASELINE_KEY: (comparison.baseline.path if comparison.baseline is not None else "").encode()})
    rows = [v.to_row() for v in comparison.verdicts]
    arrays = [pa.array([r[f.name] for r in rows], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def compared_runs(path: Path) -> tuple[str | None, str | None]:
    """(baseline run folder, candidate run folder) a verdicts.parquet compared; None where it did not record one
    (written before these keys, or no baseline)."""
    meta = formats.read_parquet_metadata(path, VERDICTS)
    base, cand = meta.get(BASELINE_KEY, b"").decode(), meta.get(CANDIDATE_KEY, b"").decode()
    return base or None, cand or None


def read_thresholds(path: Path, *, nested: bool = False) -> dict[str, Any]:
    """The settings of the comparison a verdicts.parquet holds: its scalars (level, floor, repeats, seed ...), and
    with `nested` its lists too (work_gates, floor_overrides) as the JSON holds them."""
    meta = formats.read_parquet_metadata(path, VERDICTS)
    raw = json.loads(meta.get(b"nvbench.thresholds", b"{}"))
    return {k: v for k, v in raw.items() if nested or isinstance(v, (int, float, bool, str)) or v is None}


def read_verdicts(path: Path) -> list[CellVerdict]:
    """verdicts.parquet back as CellVerdicts. Older versions lack the speed-adjustment (2), fast-step (3),
    compile (4), repeats_needed (5), phase (6), model (7), per-metric verdict (8), energy (9),
    floor_source (10), work (11), busy (12), operators (13) and reasons-as-data (14) columns: they read as null
    (texts: empty; work_gate_broken: whether work_gate holds words, VERDICTS' step 13). UnreadableFile when it is
    not one this nvbench reads."""
    return [CellVerdict.from_row(row) for row in formats.read_parquet(path, VERDICTS).to_pylist()]
