"""Folders a user hands to `nvbench run --resume` and `nvbench report` that are not what they should be: one
line naming the file, exit 2, and nothing written (a report is never half new, half old)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.analysis.pages import ci_formats, report  # noqa: F401  (report: the module other tests patch)
from harness.analysis.product import pipeline
from harness.cli import main
from harness.orchestrate.session import runfolder
from harness.results import folded, store
from harness.matrix.cells import expand, job_key
from harness.matrix.parse import load_matrix


@pytest.fixture
def run_folder(tiny_matrix, tmp_path) -> Path:
    """A run folder as `nvbench run` leaves it, with a skipped row for every job (no cell is trained)."""
    matrix = load_matrix(tiny_matrix('backend = ["synthetic", "pytorch"]'))
    cells = expand(matrix)
    run_dir = runfolder.create_run(matrix, cells, run_dir=tmp_path / "run", reports_root=tmp_path, smoke=False,
                                only=[], env={})
    run_id, jobs, by_id = runfolder.load_plan(run_dir)
    for cid, repeat in jobs:
        runfolder.write_row(run_dir, job_key(cid, repeat), {"run_id": run_id, "cell_id": cid, "repeat": repeat,
                                                          **by_id[cid].axes, "status": "skipped", "reason": "test"})
    folded.fold_run(run_dir)  # finished: its rows one file a folder
    return run_dir


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, argv: list[str], *fragments: str) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and not out
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def _break(run_dir: Path, name: str, data: bytes | None) -> Path:
    path = run_dir / name
    if data is None:
        path.unlink()
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("name, data, fragment", [
    ("plan.json", None, "not an nvbench run folder (no plan.json)"),
    ("manifest.json", None, "not an nvbench run folder (no manifest.json)"),
    ("plan.json", b"\xff\xfe{}", "plan.json: not UTF-8 text"),
    ("plan.json", b'{"run_id": "x",', "plan.json: not valid JSON at line 1, column 16"),
    ("plan.json", b"[]", "plan.json: not an nvbench plan.json (a JSON object)"),
    ("plan.json", b'{"run_id": "x", "jobs": [["c", 0]], "cells": {"c": {"benchmark": {"modle": 1}}}}',
     "plan.json: not a plan this nvbench can read (TypeError"),
    ("plan.json", b'{"run_id": "x", "jobs": [], "cells": {}}', "plan.json: its jobs name no cell"),
    ("manifest.json", b'{"nvbench_version": "0.0.1", "sessions": []}',
     "manifest.json: the run was made by nvbench 0.0.1, this is"),
    ("manifest.json", b'{"nvbench_version": "0.1.0"}', "manifest.json: not an nvbench manifest"),
])
def test_resume_refuses_a_folder_it_cannot_finish(run_folder, capsys, name, data, fragment):
    path = _break(run_folder, name, data)
    before = _tree(run_folder)
    line = _refused(capsys, ["run", "--resume", str(run_folder)], fragment)
    assert str(run_folder) in line and (data is None or str(path) in line)
    assert _tree(run_folder) == before


def test_resume_names_a_result_row_that_does_not_read_back(run_folder, capsys):
    row = sorted((run_folder / "cells").glob("*.parquet"))[0]
    row.write_bytes(row.read_bytes()[:40])
    before = _tree(run_folder)
    _refused(capsys, ["run", "--resume", str(run_folder)], f"{row}: not a readable nvbench result table",
             "delete it to run every job it holds again")  # a finished run's rows, folded into one file
    assert _tree(run_folder) == before


def test_resume_of_an_empty_or_missing_folder(tmp_path, capsys):
    _refused(capsys, ["run", "--resume", str(tmp_path)], f"{tmp_path}: not an nvbench run folder (no plan.json)")
    _refused(capsys, ["run", "--resume", str(tmp_path / "nope")], "not an nvbench run folder")
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------- nvbench report


def test_a_readable_run_reports(run_folder, capsys):
    assert main(["report", str(run_folder)]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in (run_folder / "report").iterdir()) == sorted([*report.REPORT_FILES, "plotly.min.js"])


@pytest.mark.parametrize("damage, fragment", [
    (lambda d: _first_row(d).write_bytes(b"PAR1 not really"), "not a readable nvbench result table"),
    (lambda d: _first_row(d).write_bytes(_first_row(d).read_bytes()[:-9]), "not a readable nvbench result table"),
    (lambda d: _first_row(d).write_bytes(store.table_bytes(store.pa.table({"x": [1]}))),
     "not an nvbench result table (no nvbench.schema_version in its metadata); version unknown, this nvbench reads 1-"),
    (lambda d: (d / "manifest.json").write_bytes(b"\x00\x01"), "manifest.json: not valid JSON"),
    (lambda d: (d / "manifest.json").write_bytes(b'"a string"'), "manifest.json: not an nvbench manifest"),
    (lambda d: shutil.rmtree(d / "cells") or (d / "cells").mkdir(), "cells: no result rows"),
])
def test_report_refuses_a_damaged_run_and_keeps_the_last_report(run_folder, capsys, damage, fragment):
    assert main(["report", str(run_folder)]) == 0  # a report from before the damage
    capsys.readouterr()
    last = _tree(run_folder / "report")
    damage(run_folder)
    _refused(capsys, ["report", str(run_folder)], str(run_folder), fragment)
    assert _tree(run_folder / "report") == last
    _refused(capsys, ["report", str(run_folder), "--out", str(run_folder.parent / "elsewhere")], fragment)
    assert not (run_folder.parent / "elsewhere").exists()


def _first_row(run_dir: Path) -> Path:
    return sorted((run_dir / "cells").glob("*.parquet"))[0]


def test_a_baseline_pointer_that_is_not_text(run_folder, tmp_path, capsys):
    pointer = tmp_path / "current"
    pointer.write_bytes(b"\xff\xfe\x00")
    _refused(capsys, ["report", str(run_folder), "--baseline", str(pointer)], f"{pointer}: cannot read this pointer")
    assert not (run_folder / "report").exists()


def test_a_report_that_fails_to_render_writes_nothing(run_folder, capsys, monkeypatch):
    from harness.analysis.judge.verdict import Thresholds

    assert main(["report", str(run_folder)]) == 0
    capsys.readouterr()
    last = _tree(run_folder / "report")
    other = pipeline.make_report(run_folder, out_dir=run_folder.parent / "other", thresholds=Thresholds(floor_pct=7))
    assert _tree(other.out_dir) != last  # what the failed attempt would have written is new content

    def broken(comparison):
        raise RuntimeError("rendering failed")

    monkeypatch.setattr(ci_formats, "render_junit", broken)  # the last file rendered
    with pytest.raises(RuntimeError, match="rendering failed"):
        pipeline.make_report(run_folder, thresholds=Thresholds(floor_pct=7))
    assert _tree(run_folder / "report") == last


def test_write_all_stages_every_file_before_replacing_any(tmp_path):
    first = tmp_path / "a.txt"
    first.write_bytes(b"old")
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(OSError):
        store.write_all({first: b"new", blocker / "b.txt": b"new"})  # b's folder cannot exist
    assert first.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "file"]
    store.write_all({first: b"new", tmp_path / "c.txt": b"c"})
    assert first.read_bytes() == b"new" and (tmp_path / "c.txt").read_bytes() == b"c"


def test_an_unwritable_report_folder_is_one_line(run_folder, tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"")
    _refused(capsys, ["report", str(run_folder), "--out", str(blocker / "r")], "cannot write the report")
