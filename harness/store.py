"""Atomic writes of results (temporary file, fsync, rename) and reads that migrate older schemas."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.records import CELL_SCHEMA, METADATA_VERSION_KEY, RESULT_SCHEMA_VERSION, STEP_SCHEMA


def _atomic(path: Path, write) -> None:
    # The temporary name starts with "." so dataset readers (pyarrow, pandas, DuckDB globs on *.parquet)
    # never list it, and it lives in the target folder so os.replace is a same-filesystem rename.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def write_bytes(path: Path, data: bytes) -> None:
    _atomic(Path(path), lambda fh: fh.write(data))


def write_json(path: Path, obj: Any) -> None:
    write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def write_table(path: Path, table: pa.Table) -> None:
    _atomic(Path(path), lambda fh: pq.write_table(table, fh, compression="zstd"))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def migrate(table: pa.Table, target: pa.Schema) -> pa.Table:
    """Bring a table written by any earlier nvbench to the current schema (version 1 is the first)."""
    meta = table.schema.metadata or {}
    version = int(meta.get(METADATA_VERSION_KEY, b"0"))
    if version > RESULT_SCHEMA_VERSION:
        raise ValueError(f"results written by a newer nvbench (schema {version} > {RESULT_SCHEMA_VERSION}); "
                         "upgrade nvbench to read them")
    if version < 1:
        raise ValueError("not an nvbench result table (no schema version in its metadata)")
    # Columns added in later versions arrive as nulls; this is where renames will be mapped.
    arrays = [table.column(f.name) if f.name in table.column_names else pa.nulls(len(table), f.type)
              for f in target]
    return pa.Table.from_arrays(arrays, schema=target)


def _read_dir(folder: Path, target: pa.Schema) -> pa.Table:
    files = sorted(Path(folder).glob("*.parquet"))
    tables = [migrate(pq.read_table(f), target) for f in files]
    return pa.concat_tables(tables) if tables else target.empty_table()


def read_cells(run_dir: Path) -> pa.Table:
    return _read_dir(Path(run_dir) / "cells", CELL_SCHEMA)


def read_steps(run_dir: Path) -> pa.Table:
    return _read_dir(Path(run_dir) / "steps", STEP_SCHEMA)
