"""A finished run's cell rows as one table (cells.parquet beside cells/), written once at the run's end; readers
of many runs read it instead of one file per (cell, repeat), for as long as cells/ is what it was sealed from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.results import store
from harness.results.schema import CELL_SCHEMA

SEALED = "cells.parquet"
"""The run's rows in one table, in cells/'s file order (what store.read_cells reads from cells/ too)."""
SOURCES_KEY = b"nvbench.sealed_from"
"""Table metadata: {file name: [size, mtime_ns]} of every cells/*.parquet the table was made from."""


def _sources(cells: Path) -> dict[str, list[int]]:
    out = {}
    for entry in os.scandir(cells):
        if entry.name.endswith(".parquet") and not entry.name.startswith(".") and entry.is_file():
            st = entry.stat()
            out[entry.name] = [st.st_size, st.st_mtime_ns]
    return out


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
    sources = _sources(Path(run_dir) / "cells")
    meta = dict(table.schema.metadata or {}) | {SOURCES_KEY: json.dumps(sources, sort_keys=True).encode()}
    store.write_table(Path(run_dir) / SEALED, table.replace_schema_metadata(meta))
    return Path(run_dir) / SEALED


def read_sealed(run_dir: Path, columns: list[str] | None = None) -> pa.Table | None:
    """The sealed table (only `columns`, each migrated to the current schema), or None when there is none or
    cells/ changed since it was sealed (a file added, removed or rewritten): then cells/ is the truth."""
    path = Path(run_dir) / SEALED
    if not path.is_file():
        return None
    try:
        schema = pq.read_schema(path)
        recorded = json.loads((schema.metadata or {}).get(SOURCES_KEY, b"null"))
    except (pa.ArrowException, OSError, ValueError):
        return None  # a half-copied or foreign file: the per-job files still say it all
    cells = Path(run_dir) / "cells"
    if not isinstance(recorded, dict) or not cells.is_dir() or _sources(cells) != recorded:
        return None
    wanted = columns or CELL_SCHEMA.names
    target = pa.schema([CELL_SCHEMA.field(name) for name in wanted], metadata=CELL_SCHEMA.metadata)
    present = set(schema.names)
    try:
        table = pq.read_table(path, columns=[c for c in wanted if c in present])
    except (pa.ArrowException, OSError) as exc:
        raise store.UnreadableFile(f"{path}: not a readable nvbench result table ({exc})") from None
    return store.migrate(table.replace_schema_metadata(schema.metadata), target)
