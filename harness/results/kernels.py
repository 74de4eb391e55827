"""kernels.parquet: where a profiled repeat's step time goes, per (phase, operator, kernel); its columns, its
version history, writing one repeat's part and gathering the parts into the run folder's table.

Version history (bump KERNELS_VERSION and teach `migrate` the step when columns change):
  1: first release: one row per (cell, repeat, rank, phase, operator, kernel) of a profiled repeat
     (`nvbench ab --kernels`, or an A/B that called a change): calls and time per profiled step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.results import store
from harness.catalogue.kernels import KERNEL_COLUMNS
from harness.results.schema import arrow_field
from harness.catalogue import col

KERNELS_VERSION = 1
VERSION_KEY = b"nvbench.kernels_version"
KERNELS_FILE = "kernels.parquet"
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

KERNELS_SCHEMA = pa.schema(
    [arrow_field(c) for c in KERNEL_COLUMNS],
    metadata={VERSION_KEY: str(KERNELS_VERSION).encode(), b"nvbench.table": b"kernels"})


def kernels_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows (dicts with every column) as a kernels table; an unknown or missing key is an error."""
    names = set(KERNELS_SCHEMA.names)
    for row in rows:
        if set(row) != names:
            raise KeyError(f"kernels rows: unknown {sorted(set(row) - names)}, missing {sorted(names - set(row))}")
    return pa.Table.from_arrays([pa.array([r[f.name] for r in rows], type=f.type) for f in KERNELS_SCHEMA],
                                schema=KERNELS_SCHEMA)


def migrate(table: pa.Table, source: Path) -> pa.Table:
    """A kernels table of any version up to this one, in this version's columns (later columns null)."""
    raw = (table.schema.metadata or {}).get(VERSION_KEY)
    if raw is None:
        raise store.UnreadableFile(f"{source}: not a kernels table (no nvbench.kernels_version in its metadata)")
    if int(raw) > KERNELS_VERSION:
        raise store.UnreadableFile(f"{source}: kernels version {int(raw)} is newer than this nvbench's "
                                   f"{KERNELS_VERSION}; upgrade nvbench")
    arrays = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(len(table), f.type)
              for f in KERNELS_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=KERNELS_SCHEMA)


def read_kernels(path: Path) -> pa.Table:
    """kernels.parquet (or a part), migrated; UnreadableFile naming it when it is not one."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise store.UnreadableFile(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    return migrate(table, path)


def gather(run_dir: Path, parts_dir: Path) -> Path | None:
    """Every part under `parts_dir` (and the rows RUN/kernels.parquet already holds for other repeats) into
    RUN/kernels.parquet, written atomically; None when there is nothing to gather."""
    parts = sorted(Path(parts_dir).glob("*.parquet"))
    if not parts:
        return None
    tables = [read_kernels(p) for p in parts]
    keys = {(c, r) for t in tables for c, r in zip(t.column(col.cell_id).to_pylist(), t.column("repeat").to_pylist())}
    out = Path(run_dir) / KERNELS_FILE
    if out.exists():  # a later session's parts replace the same repeats, keep the others
        old = read_kernels(out)
        keep = [(c, r) not in keys for c, r in zip(old.column(col.cell_id).to_pylist(), old.column("repeat").to_pylist())]
        tables.insert(0, old.filter(pa.array(keep, type=pa.bool_())))
    store.write_table(out, pa.concat_tables(tables))
    return out
