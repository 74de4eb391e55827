"""kernels.parquet: where a profiled repeat's step time goes, per (phase, operator, kernel); its columns, its
version history, writing one repeat's part and gathering the parts into the run folder's table.

Version history (bump KERNELS_VERSION and give TABLE's `steps` the migration when a column is renamed
or recomputed; a column added reads null from older files):
  1: first release: one row per (cell, repeat, rank, phase, operator, kernel) of a profiled repeat
     (`nvbench ab --kernels`, or an A/B that called a change): calls and time per profiled step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from harness.catalogue.kernels import KERNEL_COLUMNS
from harness.results.versioned import VersionedTable
from harness.catalogue import col

KERNELS_VERSION = 1
PARTS_DIR = "kernels"
"""RUN/profile/kernels/: one part per profiled (cell, repeat, rank), gathered into RUN/kernels.parquet."""

BETWEEN_OPS = "(outside aten ops)"
"""The operator of time a phase spent outside every aten op (Python, the autograd engine, a sleep)."""
GRAPH_REPLAY = "(CUDA graph replay)"
"""Operator and kernel of a captured CUDA graph's replay: its kernels' device time as one item."""
NO_OP = "(no launching op)"
"""Operator of a device kernel the profiler linked to no CPU op."""
OTHER_PHASE = "other"
"""Phase of work inside a step but outside its data, h2d, forward, backward and optimizer ranges."""

TABLE = VersionedTable(name="kernels", version=KERNELS_VERSION, columns=KERNEL_COLUMNS,
                       key_columns=(col.cell_id, "repeat"))
KERNELS_SCHEMA = TABLE.schema
VERSION_KEY = TABLE.version_key
KERNELS_FILE = TABLE.file


def kernels_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows (dicts with every column) as a kernels table; an unknown or missing key is an error."""
    return TABLE.table(rows)


def read_kernels(path: Path) -> pa.Table:
    """kernels.parquet (or a part), migrated; UnreadableFile naming it when it is not one."""
    return TABLE.read(path)


def gather(run_dir: Path, parts_dir: Path) -> Path | None:
    """Every part under `parts_dir` gathered into RUN/kernels.parquet (harness.results.versioned)."""
    return TABLE.gather(run_dir, parts_dir)
