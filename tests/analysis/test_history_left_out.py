"""No silent empty answer (issue 68): `nvbench history`, `nvbench dashboard` and the nightly's history step end with
one line on stdout saying what they read and what they left out and why; where nothing could be judged (every night
busy, or no ok window anywhere) it says `nothing to judge` and exits 3, never a bare `0 series` with exit 0."""

from __future__ import annotations

from pathlib import Path

from test_history import CELL, MATRIX, write_night
from test_history_busy import write_busy_night

from harness import cli
from harness.orchestrate.workflows import confirm
from harness.results import store
from harness.results.schema import cell_table

NIGHTS = 20


def _history(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["history", *args])
    return code, capsys.readouterr().out


def test_a_year_of_busy_nights_is_named_left_out_and_exits_3(tmp_path, capsys):
    folder = tmp_path / "reports" / "history"
    for night in range(1, NIGHTS + 1):
        write_busy_night(folder, night, 1000.0, spoiled=5)  # every window taken under interference
    code, out = _history(capsys, str(folder), "--out", str(tmp_path / "trend"))
    assert code == 3, out
    assert out.splitlines()[-1] == f"{NIGHTS} nights, {5 * NIGHTS} windows: all taken under interference, left out: " \
                                   "nothing to judge"
    # the dashboard over the same nights says the same, and so does the nightly's history step
    assert cli.main(["dashboard", str(tmp_path / "reports"), "--out", str(tmp_path / "dash")]) == 3
    assert capsys.readouterr().out.splitlines()[-1].endswith("all taken under interference, left out: nothing to judge")
    code = confirm.history_step(folder, tmp_path / "nightly", matrix=Path("m.toml"), no_ab="test")
    assert code == 3
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        f"{NIGHTS} nights, {5 * NIGHTS} windows: all taken under interference, left out: nothing to judge; trend in ")


def test_some_busy_nights_are_counted_and_the_rest_judged(tmp_path, capsys):
    folder = tmp_path / "history"
    for night in range(1, 9):  # nights 3 and 7: three of five windows spoiled (busy); night 4: one (left out)
        write_busy_night(folder, night, 1000.0, spoiled=3 if night in (3, 7) else 1 if night == 4 else 0)
    code, out = _history(capsys, str(folder), "--out", str(tmp_path / "trend"))
    assert code == 0, out
    assert out.splitlines()[-1] == ("8 nights, 40 windows: 2 of 8 nights busy, left out (2 cell-nights; 7 "
                                           "windows under interference); 3 series: 0 change(s), 0 new tonight"), out


def test_nights_with_no_ok_window_are_counted_not_silent(tmp_path, capsys):
    folder = tmp_path / "history"
    for night in range(1, 4):
        run = folder / f"night{night:02d}"
        store.write_table(run / "cells" / "all.parquet", cell_table([
            {"run_id": run.name, "cell_id": CELL, "repeat": 0, "status": "failed", "reason": "out of memory",
             "backend": "synthetic", "memory_format": "nchw", "precision": "fp32", "world_size": 1, "grad_accum": 1,
             "compile": "eager"}]))
        store.write_json(run / "manifest.json", {"run_id": run.name, "created_at": f"2026-01-0{night}T02:00:00+00:00",
                                                 "matrix_text": MATRIX, "environment": {}})
    code, out = _history(capsys, str(folder), "--out", str(tmp_path / "trend"))
    assert (code, out.splitlines()[-1]) == (3, "3 nights, 0 windows: 3 of 3 nights with no ok window, left out: "
                                               "nothing to judge")
    write_night(folder, 4, {CELL: 1000.0})  # one good night: judged, the three still counted
    code, out = _history(capsys, str(folder), "--out", str(tmp_path / "trend"))
    assert code == 0 and out.splitlines()[-1].startswith("4 nights, 5 windows: 3 of 4 nights with no ok window, left "
                                                         "out; "), out


def test_a_history_with_nothing_left_out_says_so():
    from harness.analysis.nights.coverage import Coverage
    from harness.analysis.pages.wording import coverage_line

    c = Coverage(num_nights=100, num_windows=800, num_busy_windows=0, num_busy_nights=0, num_busy_cell_nights=0,
                 num_empty_nights=0, num_unreadable=0, num_other_matrix=0, num_series=8, num_points=800)
    assert coverage_line(c, ": 0 change(s)") == "100 nights, 800 windows: nothing left out; 8 series: 0 change(s)"
