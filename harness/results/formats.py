"""The one reader of nvbench's versioned files: each format declares once where its version lives, the versions this
nvbench reads and a migration per step (a `Format`); `read_parquet` and `read_json` read any of them through it, and
a file that cannot be read as its format raises `UnreadableFile`, one line naming the file, its version and ours."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def versions_text(readable: Sequence[int]) -> str:
    """`1-6`, or `1` where one version is read."""
    return f"{readable[0]}-{readable[-1]}" if len(readable) > 1 else f"{readable[0]}"


class UnreadableFile(ValueError):
    """A file nvbench wrote (or should have) that cannot be read as such. `path`: the file; `found`: the version it
    holds (None: none, or not one this nvbench could find); `readable`: the versions this nvbench reads of its format
    (None: a file of no versioned format, manifest.json); `why`: what else is wrong with it. The message is one line
    naming them: `reports/x/verdicts.parquet: version 9, this nvbench reads 1-6`, what else is wrong before them
    (`...: not a readable verdicts table (...); version unknown, this nvbench reads 1-6`)."""

    def __init__(self, path: Path | str, why: str | None = None, *, found: int | None = None,
                 readable: Sequence[int] | None = None):
        self.path, self.why, self.found = Path(path), why, found
        self.readable = tuple(readable) if readable is not None else None
        super().__init__(self.line())

    def line(self) -> str:
        if self.readable is None:
            return f"{self.path}: {self.why}"
        why = f"{self.why}; " if self.why else ""
        found = self.found if self.found is not None else "unknown"
        return f"{self.path}: {why}version {found}, this nvbench reads {versions_text(self.readable)}"


Migration = Callable[[Any], Any]
"""One step of a format's history: its data (a pa.Table, a JSON object) at version v, as version v + 1's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Format:
    """A versioned file's declaration, made once beside its columns: its version (`current`), the oldest this
    nvbench still reads, and `steps`: version v -> the migration from v to v + 1 (a step that only adds columns
    needs none: the reader's caller fills them null)."""

    name: str
    """What the file holds (nvbench result, verdicts, nvbench alarms): the errors' words."""
    kind: str = "table"
    """`table` (Parquet) or `file` (JSON): the errors' words."""
    key: str
    """Where the version is: the Parquet schema metadata key (nvbench.verdicts_version), or the JSON object's key."""
    current: int
    oldest: int = 1
    steps: Mapping[int, Migration] = field(default_factory=dict)

    @property
    def readable(self) -> range:
        return range(self.oldest, self.current + 1)

    def unreadable(self, path: Path, why: str | None = None, found: int | None = None) -> UnreadableFile:
        return UnreadableFile(path, why, found=found, readable=self.readable)

    def not_one(self, path: Path, why: str, found: int | None = None) -> UnreadableFile:
        """`PATH: not a verdicts table (WHY); version ...`."""
        return self.unreadable(path, f"not {_article(self.name)} {self.name} {self.kind} ({why})", found)

    def version(self, path: Path, raw: Any, where: str = "") -> int:
        """The version `raw` names (metadata bytes, a JSON value), checked readable; UnreadableFile otherwise."""
        if isinstance(raw, bytes):
            raw = int(raw) if raw.strip().isdigit() else None
        if not isinstance(raw, int) or isinstance(raw, bool):
            raise self.not_one(path, f"no {self.key}{where}")
        if raw not in self.readable:
            raise self.unreadable(path, found=raw)
        return raw

    def migrate(self, data: Any, version: int) -> Any:
        """`data` of a readable `version` as the current version's, step by step."""
        for v in range(version, self.current):
            if v in self.steps:
                data = self.steps[v](data)
        return data


def _article(name: str) -> str:
    return "an" if name[:1] in "aeiou" or name.startswith("nvbench") else "a"


def parquet_version(path: Path, fmt: Format, schema: pa.Schema) -> int:
    return fmt.version(path, (schema.metadata or {}).get(fmt.key.encode()), " in its metadata")


def read_parquet(path: Path, fmt: Format, columns: Sequence[str] | None = None) -> pa.Table:
    """A Parquet file of `fmt`, migrated to its current version; UnreadableFile when it is not one this nvbench reads.
    `columns`: of a current file only those are read (those it has); an older one is read whole and migrated (its
    names may be the old ones). The schema metadata is kept."""
    path = Path(path)
    try:
        with pq.ParquetFile(path) as pf:
            schema = pf.schema_arrow
            version = parquet_version(path, fmt, schema)
            if columns and version == fmt.current:
                present = set(schema.names)
                return pf.read(columns=[c for c in columns if c in present]).replace_schema_metadata(schema.metadata)
            table = pf.read()
    except (pa.ArrowException, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise fmt.unreadable(path, f"not a readable {fmt.name} table ({reason})") from None
    return fmt.migrate(table, version)


def read_parquet_metadata(path: Path, fmt: Format) -> dict[bytes, bytes]:
    """The schema metadata of a Parquet file of `fmt`, its version checked; UnreadableFile otherwise."""
    path = Path(path)
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise fmt.unreadable(path, f"not a readable {fmt.name} table ({reason})") from None
    parquet_version(path, fmt, schema)
    return dict(schema.metadata or {})


def load_json(path: Path) -> Any:
    """The JSON document at `path`; UnreadableFile when it is not UTF-8 JSON (FileNotFoundError stays)."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, f"not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise UnreadableFile(path, f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


def read_json(path: Path, fmt: Format) -> dict[str, Any]:
    """A JSON object of `fmt` (its version under fmt.key), migrated to its current version; UnreadableFile when it
    is not one this nvbench reads (FileNotFoundError stays)."""
    path = Path(path)
    try:
        data = load_json(path)
    except UnreadableFile as exc:
        raise fmt.unreadable(path, exc.why) from None
    if not isinstance(data, dict):
        raise fmt.not_one(path, "a JSON object")
    return fmt.migrate(data, fmt.version(path, data.get(fmt.key), " key"))
