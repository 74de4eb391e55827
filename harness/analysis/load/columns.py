"""Every column nvbench writes, described where it is declared: cells, steps, verdicts and work in harness.catalogue;
changes.parquet's from the dataclass fields it is typed from (unit and meaning as its Parquet fields' `unit`, `doc`
metadata); and the data dictionary `nvbench columns FILE` prints."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.catalogue.cells import CELL_COLUMNS
from harness.catalogue.changes import CHANGE_COLUMNS, CHANGE_FIELDS
from harness.catalogue.steps import STEP_COLUMNS
from harness.catalogue.verdicts import VERDICT_COLUMNS
from harness.catalogue.work import WORK_COLUMNS
from harness.catalogue import col

UNIT_SUFFIXES = (("_img_per_s", "images/s"), ("_pct", "%"), ("_ms", "ms"), ("_bytes", "bytes"), ("_s", "s"),
                 ("_w", "W"), ("_j", "J"))
"""A column's unit read from its name's suffix, the house rule that puts units in names (first match wins)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Described:
    """One column as the data dictionary shows it."""

    name: str
    type: str
    unit: str
    doc: str


def unit_of(name: str) -> str:
    if name.startswith("num_"):
        return "count"
    if "top1" in name or name == col.accuracy_tolerance:
        return "fraction"
    return next((unit for suffix, unit in UNIT_SUFFIXES if name.endswith(suffix)), "")


@functools.cache
def change_docs() -> dict[str, str]:
    """changes.parquet column -> its meaning: harness.catalogue.changes, the cell schema's for the id and axes."""
    docs = _from_cells({c.name: c.doc for c in CHANGE_FIELDS})
    return {name: docs.get(name, "") for name in CHANGE_COLUMNS}


def _from_cells(docs: Mapping[str, str]) -> dict[str, str]:
    """`docs` over the cell schema's: an axis or cell_id means in a verdict or a change what it means in a row."""
    return {c.name: c.doc for c in CELL_COLUMNS} | dict(docs)


def described(schema: pa.Schema, docs: Mapping[str, str]) -> pa.Schema:
    """`schema` with each field's `unit` and `doc` metadata, as cells/ and steps/ carry theirs."""
    fields = [f.with_metadata({b"unit": unit_of(f.name).encode(), b"doc": docs.get(f.name, "").encode()})
              for f in schema]
    return pa.schema(fields, metadata=schema.metadata)


def _declared(kind: str) -> dict[str, tuple[str, str]]:
    """name -> (unit, doc) as this nvbench declares table `kind` (for files written without field metadata)."""
    declared = {"cells": CELL_COLUMNS, "steps": STEP_COLUMNS, "verdicts": VERDICT_COLUMNS,
                "work": WORK_COLUMNS}.get(kind)
    if declared is not None:
        return {c.name: (c.unit, c.doc) for c in declared}
    return {name: (unit_of(name), doc) for name, doc in change_docs().items()} if kind == "changes" else {}


def dictionary(path: Path) -> tuple[str, list[Described]]:
    """(the table's kind, its columns with unit and meaning): the file's own field metadata, else this nvbench's
    declarations of its kind. ValueError naming the file when it is no Parquet table."""
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0] if str(exc) else exc})") \
            from None
    kind = (schema.metadata or {}).get(b"nvbench.table", b"").decode()
    declared = _declared(kind)
    out = []
    for f in schema:
        meta = f.metadata or {}
        unit, doc = declared.get(f.name, ("", ""))
        out.append(Described(name=f.name, type=str(f.type), unit=meta.get(b"unit", unit.encode()).decode(),
                             doc=meta.get(b"doc", doc.encode()).decode()))
    return kind, out


def dictionary_lines(path: Path, columns: Iterable[Described], kind: str) -> list[str]:
    """The data dictionary as text: a header, then a line per column (name, type, unit) and its meaning below."""
    columns = list(columns)
    width = max((len(c.name) for c in columns), default=0)
    lines = [f"{path}: {kind + ' table' if kind else 'Parquet table'}, {len(columns)} columns: name, type, unit; "
             "then what it means"]
    for c in columns:
        lines.append(f"{c.name:<{width}}  {c.type:<12} {c.unit or '-'}")
        lines.append(f"    {c.doc or '(no description)'}")
    return lines
