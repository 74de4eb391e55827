"""Every versioned file nvbench reads goes through the one reader (harness.results.formats): a file of a version this
nvbench does not know yet is refused in one line naming the file, its version and the versions read, and the oldest
version each format still reads does read (the migrations themselves are tested beside each format)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.analysis.load import changes_file, verdicts_file
from harness.analysis.nights import baselines
from harness.catalogue import col
from harness.results import formats, kernels, store, work


@dataclass(frozen=True)
class Case:
    fmt: formats.Format
    file: str
    """Where the file lies under the test's folder."""
    write: Callable[[Path, int], None]
    """Writes a small file of the format at the version given."""
    read: Callable[[Path], Any]
    """Reads it as nvbench does, from the folder."""


def _parquet(table: pa.Table, key: str) -> Callable[[Path, int], None]:
    def write(path: Path, version: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.replace_schema_metadata({key.encode(): str(version).encode()}), path)
    return write


def _json(doc: dict[str, Any]) -> Callable[[Path, int], None]:
    def write(path: Path, version: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"version": version, **doc}))
    return write


ROW = pa.table({col.cell_id: ["a"], "repeat": [0]})
VERDICT_V1 = pa.table({col.cell_id: ["a"], "verdict": ["unchanged"], "reason": [""], "floor_pct": [1.0],
                       "fdr_q": [0.05], "accuracy_tolerance": [0.01]})
CHANGES_V1 = pa.schema([f for f in changes_file.change_schema()
                        if f.name not in ("p_floor", "confirmation", "confirmation_note", "model")]).empty_table()

CASES = {
    "cells": Case(store.RESULTS, "run/cells/a-r0.parquet", _parquet(ROW.append_column("status", pa.array(["ok"])),
                                                                        store.RESULTS.key),
                  lambda d: store.read_cells(d / "run")),
    "steps": Case(store.RESULTS, "run/steps/a-r0.parquet", _parquet(ROW, store.RESULTS.key),
                  lambda d: store.read_steps(d / "run")),
    "work": Case(work.TABLE.format, work.WORK_FILE, _parquet(ROW, work.TABLE.format.key),
                 lambda d: work.read_work(d / work.WORK_FILE)),
    "kernels": Case(kernels.TABLE.format, kernels.KERNELS_FILE, _parquet(ROW, kernels.TABLE.format.key),
                    lambda d: kernels.read_kernels(d / kernels.KERNELS_FILE)),
    "verdicts": Case(verdicts_file.VERDICTS, "verdicts.parquet",
                     _parquet(VERDICT_V1, verdicts_file.VERDICTS.key),
                     lambda d: verdicts_file.read_verdicts(d / "verdicts.parquet")),
    "changes": Case(changes_file.CHANGES, "changes.parquet", _parquet(CHANGES_V1, changes_file.CHANGES.key),
                    lambda d: changes_file.read_changes(d / "changes.parquet")),
    "acks": Case(baselines.ACKS, "baselines/acks.json", _json({"acks": []}), baselines.read_acks),
    "promotions": Case(baselines.PROMOTIONS, "baselines/promotions.json", _json({"promotions": []}),
                       baselines.read_promotions),
    "alarms": Case(baselines.ALARMS, "alarms.json", _json({"open": [], "closed": []}), baselines.read_open),
}


@pytest.mark.parametrize("name", CASES)
def test_a_version_from_the_future_is_refused_in_one_line_naming_the_file_its_version_and_ours(tmp_path, name):
    case = CASES[name]
    future = case.fmt.current + 1
    case.write(tmp_path / case.file, future)
    versions = f"{case.fmt.oldest}-{case.fmt.current}" if case.fmt.oldest < case.fmt.current else f"{case.fmt.current}"
    line = f"{tmp_path / case.file}: version {future}, this nvbench reads {versions}"
    with pytest.raises(formats.UnreadableFile, match=f"^{re.escape(line)}$") as caught:
        case.read(tmp_path)
    assert (caught.value.path, caught.value.found, caught.value.readable) == (
        tmp_path / case.file, future, tuple(range(case.fmt.oldest, case.fmt.current + 1)))
    assert isinstance(caught.value, store.UnreadableFile)  # what every caller catches, the commands included


@pytest.mark.parametrize("name", CASES)
def test_the_oldest_version_a_format_declares_still_reads(tmp_path, name):
    case = CASES[name]
    case.write(tmp_path / case.file, case.fmt.oldest)
    case.read(tmp_path)
    case.write(tmp_path / case.file, case.fmt.oldest - 1)  # older than any nvbench wrote: refused like the future
    with pytest.raises(formats.UnreadableFile, match=f"version {case.fmt.oldest - 1}, this nvbench reads"):
        case.read(tmp_path)

