"""work.parquet: what a counted process's steps did, counted (harness.catalogue.work has the columns and the
counters); its version history, a process's part and gathering the parts into the run folder's table.

Version history (bump WORK_VERSION and teach `migrate` the step when columns change):
  1: first release: one row per (cell, process, rank, phase, counter, key) of a counted process (`nvbench ab`
     --work-repeats, `nvbench run --work-repeats`): the count over its counted steps and per step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.catalogue import col
from harness.catalogue.work import WORK_COLUMNS
from harness.results import store
from harness.results.schema import arrow_field

WORK_VERSION = 1
VERSION_KEY = b"nvbench.work_version"
WORK_FILE = "work.parquet"
COUNTED_DIR = "counted"
"""RUN/counted/: the counted processes' run-like folder (their rows in counted/cells/, flagged profile_tool, logs),
apart from the timed cells/ and from profile/ (the profiled repeats, numbered on their own)."""
PARTS_DIR = "parts"
"""RUN/counted/parts/: one part per counted (cell, process, rank), gathered into RUN/work.parquet."""

WORK_SCHEMA = pa.schema(
    [arrow_field(c) for c in WORK_COLUMNS],
    metadata={VERSION_KEY: str(WORK_VERSION).encode(), b"nvbench.table": b"work"})


def work_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows (dicts with every column) as a work table; an unknown or missing key is an error."""
    names = set(WORK_SCHEMA.names)
    for row in rows:
        if set(row) != names:
            raise KeyError(f"work rows: unknown {sorted(set(row) - names)}, missing {sorted(names - set(row))}")
    return pa.Table.from_arrays([pa.array([r[f.name] for r in rows], type=f.type) for f in WORK_SCHEMA],
                                schema=WORK_SCHEMA)


def migrate(table: pa.Table, source: Path) -> pa.Table:
    """A work table of any version up to this one, in this version's columns (later columns null)."""
    raw = (table.schema.metadata or {}).get(VERSION_KEY)
    if raw is None:
        raise store.UnreadableFile(f"{source}: not a work table (no nvbench.work_version in its metadata)")
    if int(raw) > WORK_VERSION:
        raise store.UnreadableFile(f"{source}: work version {int(raw)} is newer than this nvbench's "
                                   f"{WORK_VERSION}; upgrade nvbench")
    arrays = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(len(table), f.type)
              for f in WORK_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=WORK_SCHEMA)


def read_work(path: Path) -> pa.Table:
    """work.parquet (or a part), migrated; UnreadableFile naming it when it is not one."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise store.UnreadableFile(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    return migrate(table, path)


def _processes(table: pa.Table) -> list[tuple[str, int]]:
    return list(zip(table.column(col.cell_id).to_pylist(), table.column(col.process).to_pylist()))


def gather(run_dir: Path, parts_dir: Path) -> Path | None:
    """Every part under `parts_dir` (and the rows RUN/work.parquet already holds for other processes) into
    RUN/work.parquet, written atomically; None when there is nothing to gather."""
    parts = sorted(Path(parts_dir).glob("*.parquet"))
    if not parts:
        return None
    tables = [read_work(p) for p in parts]
    keys = {key for t in tables for key in _processes(t)}
    out = Path(run_dir) / WORK_FILE
    if out.exists():  # a later session's parts replace the same processes, keep the others
        old = read_work(out)
        keep = [key not in keys for key in _processes(old)]
        tables.insert(0, old.filter(pa.array(keep, type=pa.bool_())))
    store.write_table(out, pa.concat_tables(tables))
    return out
