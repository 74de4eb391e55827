"""A finished run's cell rows as one table (cells.parquet beside cells/), written once at the run's end; readers
of many runs read it (store.read_sealed) instead of one file per (cell, repeat), while cells/ is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from harness.results import store
from harness.results.schema import CELL_SCHEMA

SEALED, SOURCES_KEY = store.SEALED, store.SOURCES_KEY


def seal_cells(run_dir: Path) -> Path | None:
    """Write cells.parquet from cells/*.parquet, atomically; None (and nothing written) when cells/ holds no row.
    The per-(cell, repeat) files stay: --resume, the estimate and the A/B's reruns read them."""
    run_dir = Path(run_dir)
    if not (run_dir / "cells").is_dir():
        return None
    table = store._read_dir(run_dir / "cells", CELL_SCHEMA)
    return write_sealed(run_dir, table) if table.num_rows else None


def write_sealed(run_dir: Path, table: pa.Table) -> Path:
    """`table` (cells/'s rows, in its files' order) as the run's sealed table, recording cells/ as it is now."""
    sources = store.cell_sources(Path(run_dir) / "cells")
    meta = dict(table.schema.metadata or {}) | {SOURCES_KEY: json.dumps(sources, sort_keys=True).encode()}
    store.write_table(Path(run_dir) / SEALED, table.replace_schema_metadata(meta))
    return Path(run_dir) / SEALED
