"""A finished run's rows folded into one file a folder: read once whatever state a fold is in, given back
file for file by unfolding, and a few KB a row."""

from __future__ import annotations

import pyarrow.parquet as pq

from harness.orchestrate.session.runfolder import pending
from harness.results import folded, store
from harness.results.schema import CELL_SCHEMA, cell_table


def row(cid: str, repeat: int, tput: float, status: str = "ok") -> dict:
    return {"run_id": "r", "cell_id": cid, "repeat": repeat, "status": status, "throughput_img_per_s": tput,
            "reason": "a reason long enough to repeat in every row " * 2}


def write_rows(run, rows):
    for r in rows:
        store.write_table(run / "cells" / f"{r['cell_id']}-r{r['repeat']}.parquet", cell_table([r]))


def names(folder):
    return sorted(p.name for p in folder.glob("*.parquet"))


def test_a_folded_folder_reads_as_its_files_did_and_unfolds_to_them(tmp_path):
    rows = [row(c, r, 100.0 + 10 * i + r) for i, c in enumerate(("a", "b")) for r in range(12)]
    write_rows(tmp_path, rows)
    before = store.read_cells(tmp_path)
    files = {p.name: pq.read_table(p) for p in (tmp_path / "cells").glob("*.parquet")}
    assert folded.fold_folder(tmp_path / "cells", CELL_SCHEMA) == tmp_path / "cells" / store.FOLDED
    assert names(tmp_path / "cells") == [store.FOLDED]
    assert store.read_cells(tmp_path).equals(before)  # nvbench's reader, in the files' order
    assert pq.read_table(tmp_path / "cells").num_rows == len(rows)  # pyarrow alone: every row once
    assert store.read_cells(tmp_path, ["repeat"]).column("repeat").to_pylist() == sorted(
        range(12), key=lambda r: f"-r{r}.") * 2  # a-r0, a-r1, a-r10, a-r11, a-r2, ...
    # a finished run holds every job: nothing pending, though no per-job file is left
    jobs = [(c, r) for c in ("a", "b") for r in range(12)]
    assert pending(tmp_path, jobs) == [] and pending(tmp_path, [*jobs, ("a", 12)]) == [("a", 12)]
    folded.unfold_folder(tmp_path / "cells", CELL_SCHEMA)
    assert names(tmp_path / "cells") == sorted(files)
    for name, table in files.items():
        assert pq.read_table(tmp_path / "cells" / name).equals(table), name


def test_a_jobs_own_file_beside_the_fold_replaces_its_folded_row_and_the_next_fold_takes_it(tmp_path):
    write_rows(tmp_path, [row("a", r, 100.0 + r) for r in range(3)])
    leftover = pq.read_table(tmp_path / "cells" / "a-r1.parquet")
    folded.fold_folder(tmp_path / "cells", CELL_SCHEMA)
    # as if the fold had died after writing its file, before removing a-r1's: each row once
    store.write_table(tmp_path / "cells" / "a-r1.parquet", leftover)
    assert store.read_cells(tmp_path).column("throughput_img_per_s").to_pylist() == [100.0, 102.0, 101.0]
    # a row rewritten after the fold reads as rewritten, and a row added (a resume) is read too
    write_rows(tmp_path, [row("a", 1, 50.0), row("a", 3, 103.0)])
    assert sorted(store.read_cells(tmp_path).column("throughput_img_per_s").to_pylist()) == [50.0, 100.0, 102.0, 103.0]
    folded.fold_folder(tmp_path / "cells", CELL_SCHEMA)
    assert names(tmp_path / "cells") == [store.FOLDED]
    assert store.read_cells(tmp_path).column("throughput_img_per_s").to_pylist() == [100.0, 50.0, 102.0, 103.0]


def test_a_row_costs_a_few_kb_folded_against_tens_a_file(tmp_path):
    rows = [row(f"c{i:02d}", r, 100.0 + r, "ok" if i % 3 else "skipped") for i in range(36) for r in range(10)]
    write_rows(tmp_path, rows)
    per_file = sum(p.stat().st_size for p in (tmp_path / "cells").glob("*.parquet")) / len(rows)
    folded.fold_folder(tmp_path / "cells", CELL_SCHEMA)
    per_row = (tmp_path / "cells" / store.FOLDED).stat().st_size / len(rows)
    assert per_file > 20_000 and per_row < 1_000, (per_file, per_row)
