"""Atomic writes and schema migration of result files."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.results import store
from harness.results.schema import CELL_SCHEMA, METADATA_VERSION_KEY, RESULT_SCHEMA_VERSION, cell_table


def test_write_is_atomic_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "cells" / "a-r0.parquet"
    store.write_table(path, cell_table([{"run_id": "r", "cell_id": "a", "repeat": 0, "status": "ok"}]))
    assert os.listdir(path.parent) == ["a-r0.parquet"]
    assert store.read_cells(tmp_path).column("status").to_pylist() == ["ok"]

    def broken(fh):
        fh.write(b"half a file")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store._atomic(path, broken)
    assert os.listdir(path.parent) == ["a-r0.parquet"]  # the old file intact, no temporary left
    assert pq.read_table(path).num_rows == 1


def test_older_file_gains_new_columns_as_null(tmp_path):
    old = pa.table({"run_id": ["r"], "cell_id": ["a"], "repeat": [0], "status": ["ok"]})
    old = old.replace_schema_metadata({METADATA_VERSION_KEY: b"1"})
    (tmp_path / "cells").mkdir()
    pq.write_table(old, tmp_path / "cells" / "a-r0.parquet")
    table = store.read_cells(tmp_path)
    assert table.schema.names == CELL_SCHEMA.names
    assert table.column("throughput_img_per_s").to_pylist() == [None]


def test_a_version_4_row_reads_its_start_unchecked(tmp_path):
    old = pa.table({"run_id": ["r"], "cell_id": ["a"], "repeat": [0], "status": ["ok"], "is_steady": [True]})
    old = old.replace_schema_metadata({METADATA_VERSION_KEY: b"4"})
    (tmp_path / "cells").mkdir()
    pq.write_table(old, tmp_path / "cells" / "a-r0.parquet")
    (row,) = store.read_cells(tmp_path).to_pylist()
    assert RESULT_SCHEMA_VERSION == 9
    assert row["start_transient_steps"] is None and row["is_steady"] is True  # never checked, not "settled"


def test_a_version_6_superseded_row_reads_no_cause_and_no_transient_size(tmp_path):
    old = pa.table({"run_id": ["r"], "cell_id": ["a"], "repeat": [0], "status": ["superseded"],
                    "start_transient_steps": [3], "foreign_cpu_frac": [0.0]})
    (tmp_path / "cells").mkdir()
    pq.write_table(old.replace_schema_metadata({METADATA_VERSION_KEY: b"6"}), tmp_path / "cells" / "a-r0.parquet")
    (row,) = store.read_cells(tmp_path).to_pylist()
    assert (row["rerun_cause"], row["start_transient_low_x"], row["start_transient_high_x"]) == (None, None, None)
    assert row["start_transient_steps"] == 3


def test_a_version_7_row_reads_its_joined_foreign_pids_as_a_list_of_integers(tmp_path):
    old = pa.table({"run_id": ["r"] * 3, "cell_id": ["a", "b", "c"], "repeat": [0, 0, 0], "status": ["ok"] * 3,
                    "gpu_shared": [True, False, None], "gpu_foreign_pids": ["4242,17", "", None]})
    (tmp_path / "cells").mkdir()
    pq.write_table(old.replace_schema_metadata({METADATA_VERSION_KEY: b"7"}), tmp_path / "cells" / "a-r0.parquet")
    table = store.read_cells(tmp_path)
    assert table.schema.field("gpu_foreign_pids").type == pa.list_(pa.int64())
    assert table.column("gpu_foreign_pids").to_pylist() == [[4242, 17], [], None]  # none named; no NVML
    current = cell_table([{"run_id": "r", "cell_id": "d", "repeat": 0, "status": "ok", "gpu_foreign_pids": [9, 11]}])
    store.write_table(tmp_path / "cells" / "d-r0.parquet", current)
    assert store.read_cells(tmp_path).column("gpu_foreign_pids").to_pylist()[-1] == [9, 11]


def test_a_version_8_row_reads_its_label_from_its_id_and_a_current_row_carries_its_own(tmp_path):
    old = pa.table({"run_id": ["r"] * 2, "cell_id": ["synthetic_nchw_fp32_ws1_ga1_0123456789", "plain"],
                    "repeat": [0, 0], "status": ["ok"] * 2})
    (tmp_path / "cells").mkdir()
    pq.write_table(old.replace_schema_metadata({METADATA_VERSION_KEY: b"8"}), tmp_path / "cells" / "a-r0.parquet")
    assert store.read_cells(tmp_path).column("cell_label").to_pylist() == ["synthetic_nchw_fp32_ws1_ga1", "plain"]
    current = cell_table([{"run_id": "r", "cell_id": "x_0123456789", "cell_label": "written", "repeat": 0,
                           "status": "ok"}])
    store.write_table(tmp_path / "cells" / "x-r0.parquet", current)
    assert store.read_cells(tmp_path).column("cell_label").to_pylist()[-1] == "written"  # never taken from the id


def test_newer_or_foreign_files_are_refused(tmp_path):
    newer = pa.table({"x": [1]}).replace_schema_metadata(
        {METADATA_VERSION_KEY: str(RESULT_SCHEMA_VERSION + 1).encode()})
    pq.write_table(newer, tmp_path / "newer.parquet")
    with pytest.raises(store.UnreadableFile, match=f"newer.parquet: version {RESULT_SCHEMA_VERSION + 1}, "
                                                   f"this nvbench reads 1-{RESULT_SCHEMA_VERSION}$"):
        store.read_table(tmp_path / "newer.parquet", CELL_SCHEMA)
    pq.write_table(pa.table({"x": [1]}), tmp_path / "foreign.parquet")
    with pytest.raises(store.UnreadableFile, match="foreign.parquet: not an nvbench result table \\(no nvbench.schema_version "
                                                   "in its metadata\\); version unknown, this nvbench reads 1-"):
        store.read_table(tmp_path / "foreign.parquet", CELL_SCHEMA)


def test_unknown_column_is_an_error():
    with pytest.raises(KeyError, match="not cells columns"):
        cell_table([{"run_id": "r", "throughput": 3.0}])


def test_version_1_data_wait_becomes_the_host_wait_and_on_cpu_also_the_exposed_wait(tmp_path):
    old = pa.table({"run_id": ["r", "r"], "cell_id": ["a", "b"], "repeat": [0, 0], "status": ["ok", "ok"],
                    "device": ["cpu", "cuda"], "data_wait_s": [0.5, 2.0], "data_wait_frac": [0.05, 0.2],
                    "num_warmup_steps": [30, 30]})
    (tmp_path / "cells").mkdir()
    pq.write_table(old.replace_schema_metadata({METADATA_VERSION_KEY: b"1"}), tmp_path / "cells" / "a.parquet")
    table = store.read_cells(tmp_path).to_pylist()
    assert [(r["host_data_wait_s"], r["host_data_wait_frac"]) for r in table] == [(0.5, 0.05), (2.0, 0.2)]
    # the host wait was the stall on a CPU; a GPU's exposed wait was never measured
    assert [(r["exposed_data_wait_s"], r["exposed_data_wait_frac"]) for r in table] == [(0.5, 0.05), (None, None)]
    assert [r["warmup_steps_used"] for r in table] == [30, 30]  # renamed for auto warmup
    steps = pa.table({"run_id": ["r"], "cell_id": ["a"], "repeat": [0], "step": [0], "data_wait_s": [0.1]})
    (tmp_path / "steps").mkdir()
    pq.write_table(steps.replace_schema_metadata({METADATA_VERSION_KEY: b"1"}), tmp_path / "steps" / "a.parquet")
    (step,) = store.read_steps(tmp_path).to_pylist()
    assert (step["host_data_wait_s"], step["exposed_data_wait_s"]) == (0.1, None)


def test_written_files_get_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        store.write_bytes(tmp_path / "a.json", b"{}")
        store.write_all({tmp_path / "report.html": b"<html>"})
    finally:
        os.umask(umask)
    assert {(tmp_path / n).stat().st_mode & 0o777 for n in ("a.json", "report.html")} == {0o644}


def test_a_version_5_row_reads_its_interference_as_never_measured(tmp_path):
    import pyarrow.parquet as pq

    from harness.results import store
    from harness.results.schema import CELL_SCHEMA, METADATA_VERSION_KEY, cell_table

    table = cell_table([{"run_id": "r", "cell_id": "c", "repeat": 0, "status": "ok", "throughput_img_per_s": 10.0}])
    old = table.drop_columns(["foreign_cpu_frac", "steal_frac", "foreign_cpu_s", "steal_s", "num_involuntary_switches"])
    old = old.replace_schema_metadata({**(old.schema.metadata or {}), METADATA_VERSION_KEY: b"5"})
    pq.write_table(old, tmp_path / "old.parquet")
    (row,) = store.read_table(tmp_path / "old.parquet", CELL_SCHEMA).to_pylist()
    assert row["throughput_img_per_s"] == 10.0
    assert (row["foreign_cpu_frac"], row["steal_frac"], row["num_involuntary_switches"]) == (None, None, None)
