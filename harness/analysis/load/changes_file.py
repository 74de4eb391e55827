"""changes.parquet: the change points and drifts of a history (harness.analysis.nights.history), its Arrow schema,
the table written from a history, and reading it back as Changes (an older version migrated)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa

from harness.analysis.load.columns import change_docs, described
from harness.analysis.nights.history import CHANGE_COLUMNS, CHANGES_VERSION, Change, History
from harness.catalogue.cells import CELL_COLUMNS
from harness.catalogue.changes import CHANGE_FIELDS
from harness.results import formats


def change_schema() -> pa.Schema:
    """changes.parquet's columns, typed as harness.catalogue.changes declares them (the id and axes as the cells'),
    in CHANGE_COLUMNS order."""
    declared = {c.name: c.type for c in (*CELL_COLUMNS, *CHANGE_FIELDS)}
    return pa.schema([pa.field(name, pa.type_for_alias(declared[name])) for name in CHANGE_COLUMNS])


def _with_nulls(*names: str):
    """A migration that adds `names` (those the table lacks) as null columns."""
    def step(table: pa.Table) -> pa.Table:
        for name in (n for n in names if n not in table.column_names):
            field = change_schema().field(name)
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
        return table
    return step


CHANGES = formats.Format(name="changes", key="nvbench.changes_version", current=CHANGES_VERSION, steps={
    1: _with_nulls("p_floor", "confirmation", "confirmation_note"),  # not known, not asked
    2: _with_nulls("model")})  # the model was not an axis
"""changes.parquet as the one reader reads it (history.CHANGES_VERSION has the history)."""
VERSION_KEY = CHANGES.key.encode()


def change_table(history: History) -> pa.Table:
    """One row per change point or drift; the metadata carries the version, the nights and the settings, each
    field its unit and meaning (harness.analysis.load.columns)."""
    schema = described(change_schema(), change_docs()).with_metadata({
        VERSION_KEY: str(CHANGES_VERSION).encode(), b"nvbench.table": b"changes",
        b"nvbench.history": history.folder.encode(),
        b"nvbench.nights": json.dumps([n.run_id for n in history.nights]).encode(),
        b"nvbench.settings": json.dumps(asdict(history.settings), sort_keys=True).encode()})
    rows = [asdict(c) for c in history.changes]
    return pa.Table.from_arrays([pa.array([r[f.name] for r in rows], type=f.type) for f in schema], schema=schema)


def read_changes(path: Path) -> list[Change]:
    """The changes of a changes.parquet this nvbench or an older one wrote; UnreadableFile when it is not one this
    nvbench reads."""
    table = formats.read_parquet(Path(path), CHANGES)
    return [Change(**row) for row in table.select(list(CHANGE_COLUMNS)).to_pylist()]
