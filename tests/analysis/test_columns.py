"""`nvbench columns`: the data dictionary of every table nvbench writes, from the field metadata the files carry
(or, for a file written without it, from the declarations of its kind)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_export import hand_made_run

from harness import cli
from harness.catalogue.verdicts import VERDICT_COLUMNS
from harness.analysis.load import columns, verdicts_file
from harness.analysis.load import changes_file
from harness.results.schema import CELL_COLUMNS, STEP_COLUMNS


def entries(text: str) -> dict[str, tuple[str, str]]:
    """name -> (unit, meaning) from the command's output: a line per column, its meaning indented below."""
    lines = text.splitlines()[1:]
    return {head.split()[0]: (head.split()[-1], doc.strip()) for head, doc in zip(lines[::2], lines[1::2])}


@pytest.mark.documented("nvbench columns reports/<run_id>/cells", bound_s=60)
def test_columns_prints_every_column_of_cells_and_steps_with_its_unit_and_meaning(tmp_path, documented_run):
    run = hand_made_run(tmp_path / "run")
    proc = documented_run(["columns", str(run / "cells"), str(run / "steps" / "all.parquet")])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    cells_text, steps_text = proc.stdout.rstrip("\n").split("\n\n")
    assert cells_text.startswith(f"{run / 'cells' / 'all.parquet'}: cells table, {len(CELL_COLUMNS)} columns")
    for text, declared in ((cells_text, CELL_COLUMNS), (steps_text, STEP_COLUMNS)):
        shown = entries(text)
        assert list(shown) == [c.name for c in declared]
        assert all(shown[c.name] == (c.unit or "-", c.doc) for c in declared)
    assert entries(cells_text)["throughput_img_per_s"][0] == "images/s"


@pytest.mark.parametrize("kind", ["verdicts", "changes"])
def test_a_verdicts_or_changes_file_without_field_metadata_is_described_from_its_declarations(tmp_path, capsys,
                                                                                              kind):
    """A file of an older nvbench (no field metadata) still gets its dictionary: every column means something."""
    schema = verdicts_file.verdict_schema() if kind == "verdicts" else changes_file.change_schema()
    schema = pa.schema([f.remove_metadata() for f in schema])  # as an older nvbench wrote it
    path = tmp_path / f"{kind}.parquet"
    pq.write_table(schema.with_metadata({b"nvbench.table": kind.encode()}).empty_table(), path)
    assert all(f.metadata is None for f in pq.read_schema(path))
    assert cli.main(["columns", str(path)]) == 0
    shown = entries(capsys.readouterr().out)
    assert list(shown) == schema.names and all(doc and doc != "(no description)" for _, doc in shown.values())
    docs = {c.name: c.doc for c in VERDICT_COLUMNS} if kind == "verdicts" else columns.change_docs()
    assert all(shown[name][1] == docs[name] for name in schema.names)


def test_the_unit_is_read_from_the_name_as_the_house_names_columns():
    names = ("effect_pct", "phase_change_ms", "candidate_fast_img_per_s", "num_baseline", "candidate_top1", "p_value")
    assert [columns.unit_of(n) for n in names] == ["%", "ms", "images/s", "count", "fraction", ""]


def test_columns_of_a_file_that_is_no_table_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "x.parquet").write_text("not parquet")
    assert cli.main(["columns", str(tmp_path / "x.parquet"), str(tmp_path / "none.parquet")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {tmp_path / 'x.parquet'}: not a readable Parquet file (")
    assert err[1:] == [f"error: {tmp_path / 'none.parquet'}: no such file"]

