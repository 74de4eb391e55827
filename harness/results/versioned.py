"""A table nvbench writes in parts and gathers per run folder (kernels.parquet, work.parquet): its schema with a
version in the metadata, building it from rows, reading one (an older version migrated: harness.results.formats), gathering parts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa

from harness.catalogue.columns import Column
from harness.results import formats, store
from harness.results.schema import arrow_field


@dataclass(frozen=True)
class VersionedTable:
    """One such table: `name` (kernels, work) names its version key, its file and its errors."""

    name: str
    version: int
    columns: Sequence[Column]
    key_columns: tuple[str, ...]
    """The columns one part's rows share (a repeat's, a process's): a newer part replaces the rows of its keys."""
    steps: Mapping[int, formats.Migration] = field(default_factory=dict)
    """Version v -> the migration of a v table to v + 1 (harness.results.formats.Format; none: columns added only)."""

    @property
    def version_key(self) -> bytes:
        return f"nvbench.{self.name}_version".encode()

    @property
    def file(self) -> str:
        return f"{self.name}.parquet"

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([arrow_field(c) for c in self.columns],
                         metadata={self.version_key: str(self.version).encode(), b"nvbench.table": self.name.encode()})

    def table(self, rows: list[dict[str, Any]]) -> pa.Table:
        """Rows (dicts with every column) as this table; an unknown or missing key is an error."""
        schema = self.schema
        names = set(schema.names)
        for row in rows:
            if set(row) != names:
                raise KeyError(f"{self.name} rows: unknown {sorted(set(row) - names)}, "
                               f"missing {sorted(names - set(row))}")
        return pa.Table.from_arrays([pa.array([r[f.name] for r in rows], type=f.type) for f in schema], schema=schema)

    @property
    def format(self) -> formats.Format:
        """Its declaration for the one reader: every version up to this one read, its later columns null."""
        return formats.Format(name=self.name, key=self.version_key.decode(), current=self.version, steps=self.steps)

    def conform(self, table: pa.Table) -> pa.Table:
        """A table of this version's (or an older one's) columns in this version's (later columns null)."""
        schema = self.schema
        arrays = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(len(table), f.type)
                  for f in schema]
        return pa.Table.from_arrays(arrays, schema=schema)

    def read(self, path: Path) -> pa.Table:
        """The file (or a part), migrated; UnreadableFile naming it when it is not one this nvbench reads."""
        return self.conform(formats.read_parquet(Path(path), self.format))

    def _keys(self, table: pa.Table) -> list[tuple]:
        return list(zip(*(table.column(c).to_pylist() for c in self.key_columns)))

    def gather(self, run_dir: Path, parts_dir: Path) -> Path | None:
        """Every part under `parts_dir` (and the rows RUN/<file> already holds for other keys) into RUN/<file>,
        written atomically; None when there is nothing to gather."""
        parts = sorted(Path(parts_dir).glob("*.parquet"))
        if not parts:
            return None
        tables = [self.read(p) for p in parts]
        keys = {key for t in tables for key in self._keys(t)}
        out = Path(run_dir) / self.file
        if out.exists():  # a later session's parts replace the same keys, keep the others
            old = self.read(out)
            keep = [key not in keys for key in self._keys(old)]
            tables.insert(0, old.filter(pa.array(keep, type=pa.bool_())))
        store.write_table(out, pa.concat_tables(tables))
        return out
