"""Atomic writes of results (temporary file, fsync, rename) and reads that migrate older schemas."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

from harness.results import formats
from harness.results.formats import UnreadableFile  # noqa: F401  (store.UnreadableFile: what its callers catch)
from harness.results.schema import CELL_SCHEMA, METADATA_VERSION_KEY, RESULT_SCHEMA_VERSION, STEP_SCHEMA, SUPERSEDED
from harness.catalogue import col
from harness.catalogue.cells import label_from_id


def _file_mode() -> int:
    """What open() would give a new file under this process's umask (mkstemp's files are 0600: a report on a
    shared server must stay readable by its readers). Linux reports the umask in /proc; setting it to read it
    back is the fallback, since a file another thread creates in between would get no umask at all."""
    try:
        status = Path("/proc/self/status").read_text()
        umask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Umask:")), 8)
    except (OSError, StopIteration, IndexError, ValueError):
        umask = os.umask(0)
        os.umask(umask)
    return 0o666 & ~umask


FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
"""A write that failed for want of room: the disk is full, or the user's quota spent."""


class CannotWrite(OSError):
    """A file nvbench must write cannot be (a read-only folder, a full disk): not a cell's failure but the
    command's, which stops with one line (`line`) naming the folder and the command that goes on (`resume`)."""

    def __init__(self, path: Path, code: int, strerror: str | None = None):
        super().__init__(code, strerror or os.strerror(code), str(path))
        self.path = Path(path)
        self.resume: str | None = None
        """The command that goes on from where this one stopped (set by the command that knows it: `nvbench run
        --resume RUN`); None: the same command again (it keeps nothing half-written)."""

    when = "once it can be written"
    """When the command that goes on can: the words before `resume` in the command's line."""

    def line(self) -> str:
        return f"{self.path.parent}: {self.strerror.lower()}: {self.path.name} cannot be written there"


class NoSpace(CannotWrite):
    """A result file could not be written for want of room. Nothing is half-written (the temporary file is gone);
    the line names the folder, the bytes the file needed and what is free there."""

    when = "once there is room"

    def __init__(self, path: Path, needed_bytes: int | None, code: int = errno.ENOSPC):
        super().__init__(path, code)
        self.needed_bytes = needed_bytes
        try:
            self.free_bytes: int | None = shutil.disk_usage(self.path.parent).free
        except OSError:
            self.free_bytes = None

    def line(self) -> str:
        free = f"{self.free_bytes:,} bytes free" if self.free_bytes is not None else "free space unknown"
        if self.needed_bytes is None:  # a cell process's files: their size is in its own line, in its log
            return f"{self.path.parent}: {self.strerror.lower()}: a cell could not write its results, {free}"
        return (f"{self.path.parent}: {self.strerror.lower()}: writing {self.path.name} needed "
                f"{self.needed_bytes:,} bytes, {free}")


def _atomic(path: Path, write, size: int | None = None) -> None:
    # The temporary name starts with "." so dataset readers (pyarrow, pandas, DuckDB globs on *.parquet)
    # never list it, and it lives in the target folder so os.replace is a same-filesystem rename.
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fchmod(fh.fileno(), _file_mode())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if exc.errno in FULL_ERRNOS and not isinstance(exc, NoSpace):
            raise NoSpace(path, size, exc.errno) from None
        raise
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def write_bytes(path: Path, data: bytes) -> None:
    _atomic(Path(path), lambda fh: fh.write(data), len(data))


def write_all(files: dict[Path, bytes]) -> None:
    """Write several files as one: every file is complete on disk under a temporary name before any is
    renamed into place, so a failure leaves all of the old versions (or none) rather than a mix."""
    staged: list[tuple[str, Path]] = []
    path, data = Path("."), b""
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), _file_mode())
                os.fsync(fh.fileno())
        for tmp, path in staged:
            os.replace(tmp, path)
    except OSError as exc:
        if exc.errno in FULL_ERRNOS and not isinstance(exc, NoSpace):
            raise NoSpace(path, sum(map(len, files.values())), exc.errno) from None
        raise
    finally:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
    for folder in {Path(path).parent for path in files}:
        fsync_dir(folder)


def table_bytes(table: pa.Table) -> bytes:
    """A table as the bytes of a Parquet file (zstd), as write_table writes it."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def write_json(path: Path, obj: Any) -> None:
    write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def write_table(path: Path, table: pa.Table) -> None:
    write_bytes(path, table_bytes(table))  # its size known before a byte is written (what a full disk needed)


def read_json(path: Path) -> Any:
    """The JSON document at `path`; UnreadableFile when it is not UTF-8 JSON (FileNotFoundError stays)."""
    return formats.load_json(path)


RENAMED_IN_2 = {"data_wait_s": col.host_data_wait_s, "data_wait_frac": col.host_data_wait_frac,
                "num_warmup_steps": col.warmup_steps_used}
"""Version 1 name -> version 2 name, in both tables."""


def _nodes_from_hostname(table: pa.Table) -> pa.Table:
    """Version 2's jobs all ran on the runner's machine: a cell row's `nodes` is its `hostname`."""
    if "hostname" in table.column_names and "nodes" not in table.column_names:
        table = table.append_column("nodes", table.column("hostname"))
    return table


def conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """A table of the current version in `target`'s columns: those added in later versions (or a file does not hold)
    arrive as nulls (names looked up in a set: a row's file has 109 columns)."""
    present = set(table.column_names)
    arrays = [table.column(f.name) if f.name in present else pa.nulls(len(table), f.type) for f in target]
    return pa.Table.from_arrays(arrays, schema=target)


def _from_version_1(table: pa.Table) -> pa.Table:
    """Version 1 measured data wait on the host only: renamed; a CPU row's is also its exposed wait (step
    rows do not say their device: their exposed wait stays null)."""
    names = [RENAMED_IN_2.get(name, name) for name in table.column_names]
    table = table.rename_columns(names)
    if "device" not in names:
        return table
    on_cpu = pa.compute.equal(table.column("device"), "cpu")
    for host, exposed in ((col.host_data_wait_s, col.exposed_data_wait_s), (col.host_data_wait_frac, col.exposed_data_wait_frac)):
        if host in names and exposed not in names:
            column = table.column(host)
            table = table.append_column(exposed, pa.compute.if_else(on_cpu, column, pa.nulls(len(table), column.type)))
    return table


def _pids_as_list(table: pa.Table) -> pa.Table:
    """Version 7 joined a row's foreign pids with commas: each text split into its integers (an empty text: none;
    null stays null: no NVML)."""
    name = col.gpu_foreign_pids
    if name not in table.column_names:
        return table
    texts = table.column(name).to_pylist()
    pids = [None if t is None else [int(p) for p in str(t).split(",") if p.strip()] for t in texts]
    at = table.column_names.index(name)
    return table.set_column(at, pa.field(name, pa.list_(pa.int64())), pa.array(pids, pa.list_(pa.int64())))


def _labels_from_ids(table: pa.Table) -> pa.Table:
    """Version 8 had no `cell_label`: an older row's label is its id without the hash (catalogue.cells.label_from_id)."""
    if col.cell_label in table.column_names or col.cell_id not in table.column_names:
        return table
    labels = [None if cid is None else label_from_id(str(cid)) for cid in table.column(col.cell_id).to_pylist()]
    at = table.column_names.index(col.cell_id) + 1
    return table.add_column(at, pa.field(col.cell_label, pa.string()), pa.array(labels, pa.string()))


RESULTS = formats.Format(name="nvbench result", key=METADATA_VERSION_KEY.decode(), current=RESULT_SCHEMA_VERSION,
                         oldest=1, steps={1: _from_version_1, 2: _nodes_from_hostname, 7: _pids_as_list,
                                                 8: _labels_from_ids})
"""cells/ and steps/ files (schema.py has the history): version 1 renamed, 2 given `nodes`, 7's foreign pids split
into a list, 8's labels taken from the ids, later columns null."""


def read_table(path: Path, target: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    """One result file migrated to `target` (only `columns` of it, when given); UnreadableFile naming it when
    it is not one."""
    table = formats.read_parquet(path, RESULTS, columns)
    if columns:
        return conform(table, pa.schema([target.field(c) for c in columns], metadata=target.metadata))
    return conform(table, target)


FOLDED = "run-rows.parquet"
"""A finished run's rows of one folder (cells/, steps/) in one file (harness.results.folded); a per-job file is
`<cell id>-r<repeat>.parquet`, which this name can never be."""
FOLDED_FROM_KEY = b"nvbench.folded_from"
"""The folded file's metadata: [[stem, rows], ...] of the per-job files it holds, in its rows' order."""


def job_files(folder: Path) -> list[Path]:
    """The per-job files of a results folder, sorted (the folded file and temporary '.' files left out)."""
    return sorted(f for f in Path(folder).glob("*.parquet") if f.name != FOLDED and not f.name.startswith("."))


def folded_stems(folder: Path) -> dict[str, int]:
    """{stem: rows} of the per-job files folder/FOLDED holds, in its rows' order; {} when there is none."""
    path = Path(folder) / FOLDED
    if not path.is_file():
        return {}
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RESULTS.unreadable(path, f"not a readable nvbench result table ({reason})") from None
    version = formats.parquet_version(path, RESULTS, schema)
    try:
        return {str(stem): int(rows) for stem, rows in json.loads((schema.metadata or {})[FOLDED_FROM_KEY])}
    except KeyError:
        raise RESULTS.not_one(path, f"no {FOLDED_FROM_KEY.decode()} in its metadata", version) from None
    except (ValueError, TypeError) as exc:
        raise RESULTS.not_one(path, f"its {FOLDED_FROM_KEY.decode()} is no list of [stem, rows]: {exc}", version) from None


def _read_dir(folder: Path, target: pa.Schema, columns: list[str] | None = None, *,
              skip: str | None = None, left_out: list[str] | None = None) -> pa.Table:
    """Every row of a results folder once: its folded file's, less those of a job that also has a file of its
    own, then every per-job file's (such a file is the newer: a row rewritten after the fold, or a fold or
    unfold cut short, whose two copies are the same); `skip`: leave out the per-job files whose stem holds it.
    `left_out` given: a per-job file that cannot be read is left out and said there (UnreadableFile's line), the
    other rows still read; otherwise it raises. An unreadable folded file always raises (it holds every row)."""
    files = [f for f in job_files(folder) if not (skip and skip in f.stem)]
    tables = [folded_rows(folder, target, columns, without={f.stem for f in files})]
    for f in files:
        try:
            tables.append(read_table(f, target, columns))
        except UnreadableFile as exc:
            if left_out is None:
                raise
            left_out.append(str(exc))
    tables = [t for t in tables if t is not None]
    if tables:
        return pa.concat_tables(tables)
    return target.empty_table().select(columns) if columns else target.empty_table()


def folded_rows(folder: Path, target: pa.Schema, columns: list[str] | None = None, *,
                without: set[str] = frozenset()) -> pa.Table | None:
    """The rows folder/FOLDED holds (None when there is none), less those of the stems in `without`."""
    held = folded_stems(folder)
    if not held:
        return None
    table = read_table(Path(folder) / FOLDED, target, columns)
    if without & held.keys():
        keep = np.repeat([stem not in without for stem in held], list(held.values()))
        table = table.filter(pa.array(keep))
    return table


def row_stems(folder: Path) -> set[str]:
    """The stems (job keys) of every row file of a results folder, folded or not."""
    return set(folded_stems(folder)) | {f.stem for f in job_files(folder)}


def read_cells(run_dir: Path, columns: list[str] | None = None, *, left_out: list[str] | None = None) -> pa.Table:
    """The run's cell rows (folded or one file per job); `columns`: only those (the reader of many runs needs a
    few); `left_out`: where a job's unreadable file is said instead of raised (_read_dir)."""
    return _read_dir(Path(run_dir) / "cells", CELL_SCHEMA, columns, left_out=left_out)


def read_steps(run_dir: Path) -> pa.Table:
    """The steps of the attempts kept: a superseded repeat's live in steps-superseded/ (A/B folders written before
    it kept them in steps/, named `...-superseded<n>`: left out here too)."""
    return _read_dir(Path(run_dir) / "steps", STEP_SCHEMA, skip=f"-{SUPERSEDED}")
