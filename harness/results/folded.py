"""A finished run's rows, one file a folder: at the end of `nvbench run` the per-(cell, repeat) files of cells/ and
steps/ (what a run in flight writes, and what --resume reads) become one table each, cells/FOLDED and
steps/FOLDED, and go. The folders keep their names, so `cells/*.parquet` still reads every row once (pyarrow,
DuckDB, nvbench alike) at a few KB a row instead of ~64 KB a file; a resumed run unfolds them first.

The folded file records the stems it holds and their row counts (its metadata, FOLDED_FROM_KEY), so a job's own
file beside it replaces that job's folded rows (store._read_dir): a fold or an unfold cut short reads each row
once (the two copies are the same), a row rewritten after the fold reads as rewritten, and unfolding gives
back the very files the fold was made from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa

from harness.results import store
from harness.results.schema import CELL_SCHEMA, STEP_SCHEMA, SUPERSEDED

FOLDED, FOLDED_FROM_KEY = store.FOLDED, store.FOLDED_FROM_KEY
FOLDERS = (("cells", CELL_SCHEMA), ("steps", STEP_SCHEMA))


def fold_run(run_dir: Path) -> None:
    """Fold cells/ and steps/ of a finished run (each folder with at least one per-job file)."""
    for name, schema in FOLDERS:
        fold_folder(Path(run_dir) / name, schema)


def fold_folder(folder: Path, schema: pa.Schema) -> Path | None:
    """Every per-job file of `folder` (and what an earlier fold holds) into folder/FOLDED, written atomically, then
    the per-job files removed; None when there is nothing to fold. A superseded attempt's file (an A/B's older
    folders kept them in steps/) stays as it is: readers leave those out by name."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    files = [f for f in store.job_files(folder) if SUPERSEDED not in f.stem]
    if not files:
        return None
    pieces = {f.stem: store.read_table(f, schema) for f in files}  # a job's own file is the newer copy
    held = store.folded_stems(folder)
    if held:
        before, at = store.read_table(folder / FOLDED, schema), 0
        for stem, rows in held.items():
            pieces.setdefault(stem, before.slice(at, rows))
            at += rows
    stems = sorted(pieces)  # the per-job files' order, as a folder of them reads
    table = pa.concat_tables([pieces[stem] for stem in stems])
    stems = [(stem, pieces[stem].num_rows) for stem in stems]
    meta = dict(table.schema.metadata or schema.metadata or {})
    meta[FOLDED_FROM_KEY] = json.dumps(stems).encode()
    store.write_table(folder / FOLDED, table.replace_schema_metadata(meta))
    for f in files:
        f.unlink(missing_ok=True)
    store.fsync_dir(folder)
    return folder / FOLDED


def unfold_run(run_dir: Path) -> None:
    """Give cells/ and steps/ back their per-job files (a finished run resumed: --resume reads them)."""
    for name, schema in FOLDERS:
        unfold_folder(Path(run_dir) / name, schema)


def unfold_folder(folder: Path, schema: pa.Schema) -> None:
    """folder/FOLDED split back into the files it was made from (each written unless it exists), then removed."""
    held = store.folded_stems(folder)
    if not held:
        return
    table = store.read_table(folder / FOLDED, schema).replace_schema_metadata(schema.metadata)
    at = 0
    for stem, rows in held.items():
        if not (folder / f"{stem}.parquet").exists():
            store.write_table(folder / f"{stem}.parquet", table.slice(at, rows))
        at += rows
    os.unlink(folder / FOLDED)
    store.fsync_dir(folder)
