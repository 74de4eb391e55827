"""work.parquet: what a counted process's steps did, counted (harness.catalogue.work has the columns and the
counters); its version history, a process's part and gathering the parts into the run folder's table.

Version history (bump WORK_VERSION and give TABLE's `steps` the migration when a column is renamed
or recomputed; a column added reads null from older files):
  1: first release: one row per (cell, process, rank, phase, counter, key) of a counted process (`nvbench ab`
     --work-repeats, `nvbench run --work-repeats`): the count over its counted steps and per step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from harness.catalogue import col
from harness.catalogue.work import WORK_COLUMNS
from harness.results.versioned import VersionedTable

WORK_VERSION = 1
COUNTED_DIR = "counted"
"""RUN/counted/: the counted processes' run-like folder (their rows in counted/cells/, flagged profile_tool, logs),
apart from the timed cells/ and from profile/ (the profiled repeats, numbered on their own)."""
PARTS_DIR = "parts"
"""RUN/counted/parts/: one part per counted (cell, process, rank), gathered into RUN/work.parquet."""

TABLE = VersionedTable(name="work", version=WORK_VERSION, columns=WORK_COLUMNS,
                       key_columns=(col.cell_id, col.process))
WORK_SCHEMA = TABLE.schema
VERSION_KEY = TABLE.version_key
WORK_FILE = TABLE.file


def work_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows (dicts with every column) as a work table; an unknown or missing key is an error."""
    return TABLE.table(rows)


def read_work(path: Path) -> pa.Table:
    """work.parquet (or a part), migrated; UnreadableFile naming it when it is not one."""
    return TABLE.read(path)


def gather(run_dir: Path, parts_dir: Path) -> Path | None:
    """Every part under `parts_dir` gathered into RUN/work.parquet (harness.results.versioned)."""
    return TABLE.gather(run_dir, parts_dir)
