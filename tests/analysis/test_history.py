"""nvbench history on hand-made nightly run folders (real Parquet, real manifests): the change point's night and
commit range, A/A left alone, a drift, what is new tonight, the files other tools read, bad input, and the
page in a real browser."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import cli
from harness.analysis.load import changes_file
from harness.analysis.nights import history
from harness.analysis.pages import trend
from harness.analysis.pages.wording import esc_md
from harness.results import store
from harness.results.schema import CELL_SCHEMA, RESULT_SCHEMA_VERSION, cell_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from browser import Browser, chromium_path  # noqa: E402
from report_checks import charts  # noqa: E402

CELL = "synthetic_nchw_fp32_ws1_ga1_abc"
OTHER = "pytorch_nchw_fp32_ws1_ga1_def"
MATRIX = 'version = 1\n[benchmark]\nname = "nightly"\n'


def sha(night: int) -> str:
    return f"{night:02d}" + "c0ffee" * 6 + "00"


def write_night(folder: Path, night: int, cells: dict[str, float], *, repeats: int = 5, noise: float = 0.05,
                seed: int = 0, matrix: str = MATRIX, drill: float = 0.0) -> Path:
    """A run folder as nvbench run leaves it, one cell row per repeat: throughput around `cells[cell]`."""
    rng = np.random.default_rng(seed * 1000 + night)
    run = folder / f"night{night:02d}"
    rows = []
    for cid, level in cells.items():
        for r in range(repeats):
            tput = level * math.exp(rng.normal(0, noise))
            rows.append({"run_id": run.name, "cell_id": cid, "repeat": r, "status": "ok", "reason": "",
                         "backend": cid.split("_")[0], "memory_format": "nchw", "precision": "fp32", "world_size": 1,
                         "grad_accum": 1, "compile": "eager", "throughput_img_per_s": tput,
                         "fast_step_img_per_s": tput * 1.2, "exposed_data_wait_frac": 0.01,
                         "top1": 0.9 if cid == OTHER else None, "fire_drill_pct": drill})
    store.write_table(run / "cells" / "all.parquet", cell_table(rows))
    store.write_json(run / "manifest.json", {
        "run_id": run.name, "created_at": f"2026-01-{night:02d}T02:00:00+00:00", "matrix_text": matrix,
        "environment": {"nvbench_git_sha": sha(night), "nvbench_git_dirty": False, "hostname": "ci"}})
    return run


def nightly_series(folder: Path, levels: list[float], *, other: float = 500.0, **kw) -> Path:
    for night, level in enumerate(levels, start=1):
        write_night(folder, night, {CELL: level, OTHER: other}, **kw)
    return folder


def run_cli(*args: str, capsys) -> tuple[int, str, str]:
    code = cli.main(["history", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def read_changes(path: Path) -> list[dict]:
    table = pq.read_table(path)  # an independent reader: plain pyarrow
    assert table.schema.metadata[b"nvbench.changes_version"] == b"3"
    # every column says its unit and meaning to a reader of the file alone (DuckDB, pandas, nvbench columns)
    assert [f.name for f in pq.read_schema(path) if b"unit" not in (f.metadata or {})
            or not f.metadata.get(b"doc")] == []
    return table.to_pylist()


STEP = [1000.0] * 11 + [950.0] * 19  # a 5 % step at night 12 of 30


def test_a_5pct_step_at_night_12_of_30_is_found_at_night_12_with_its_commit_range(tmp_path, capsys):
    folder = nightly_series(tmp_path / "history", STEP, repeats=10)
    code, out, err = run_cli(str(folder), "--out", str(tmp_path / "out"), capsys=capsys)
    assert code == 0, err
    files, summary = out.splitlines()[:-1], out.splitlines()[-1]  # the files written, then the summary line
    assert files == [str(tmp_path / "out" / name) for name in trend.HISTORY_FILES]
    assert summary.startswith("30 nights, 600 windows: nothing left out; ") and "change(s)" in summary, summary
    changes = read_changes(tmp_path / "out" / "changes.parquet")
    steps = [c for c in changes if c["cell_id"] == CELL and c["metric"] == "throughput"]
    (step,) = steps
    assert step["kind"] == "step" and abs(step["night"] - 12) <= 1
    night = step["night"]
    assert step["run_id"] == f"night{night:02d}" and step["previous_run_id"] == f"night{night - 1:02d}"
    assert (step["commit_from"], step["commit_to"]) == (sha(night - 1)[:12], sha(night)[:12])
    assert step["unit"] == "%" and step["ci_low"] < -5 < step["ci_high"] < 0 and step["p_value"] <= 0.01
    assert step["p_floor"] == pytest.approx(1 / 2000) and step["confirmation"] is None
    assert step["before"] == pytest.approx(1000, rel=0.02) and step["after"] == pytest.approx(950, rel=0.02)
    assert not step["is_new"]  # found without the newest night too
    assert [c for c in changes if c["cell_id"] == OTHER] == []
    md = (tmp_path / "out" / "changes.md").read_text()
    assert esc_md(CELL) in md and f"{sha(night - 1)[:12]}..{sha(night)[:12]}" in md


def test_a_a_nights_give_no_change_point_and_no_drift(tmp_path, capsys):
    folder = nightly_series(tmp_path / "history", [1000.0] * 30, repeats=10, seed=3)
    code, out, err = run_cli(str(folder), capsys=capsys)
    assert code == 0, err
    assert read_changes(folder / "trend" / "changes.parquet") == []
    assert out.splitlines()[-1].endswith(": 0 change(s), 0 new tonight"), out


def test_a_drift_of_half_a_percent_a_night_over_14_nights_is_reported_as_drift(tmp_path, capsys):
    levels = [1000.0] * 16 + [1000.0 * 0.995 ** k for k in range(1, 15)]
    folder = nightly_series(tmp_path / "history", levels, repeats=10, noise=0.02, seed=5)
    code, _, err = run_cli(str(folder), "--out", str(tmp_path / "out"), capsys=capsys)
    assert code == 0, err
    drifts = [c for c in read_changes(tmp_path / "out" / "changes.parquet") if c["kind"] == "drift"]
    assert sorted(c["metric"] for c in drifts) == ["fast steps", "throughput"]  # the fixture's fast steps follow
    (drift,) = [c for c in drifts if c["metric"] == "throughput"]
    assert drift["cell_id"] == CELL and drift["nights_after"] == 14
    assert drift["run_id"] == "night17" and drift["ci_high"] < 0 and drift["change"] < -3
    assert drift["change"] == pytest.approx(100 * (0.995 ** 13 - 1), abs=2.5)  # -6.3 % across the window
    assert drift["p_value"] is None


def test_a_step_only_the_newest_nights_reveal_is_new_tonight_and_the_summary_names_it(tmp_path, capsys):
    # 6 + 2 nights: the fewest the default two nights a side can split; 6 + 1, the history before tonight, cannot
    folder = nightly_series(tmp_path / "history", [1000.0] * 6 + [900.0] * 2, repeats=10, noise=0.02, seed=8)
    summary = tmp_path / "summary.md"
    summary.write_text("# tonight\n")
    code, _, err = run_cli(str(folder), "--summary", str(summary), capsys=capsys)
    assert code == 0, err
    (step,) = [c for c in read_changes(folder / "trend" / "changes.parquet")
               if c["kind"] == "step" and c["metric"] == "throughput"]
    assert step["night"] == 7 and step["is_new"]
    assert f"new step: {CELL} throughput" in err
    text = summary.read_text()
    assert text.startswith("# tonight\n") and "### Change points new tonight" in text and "| night07 **new** |" in text


def test_bad_runs_are_skipped_with_their_reason_and_the_rest_analysed(tmp_path, capsys):
    folder = nightly_series(tmp_path / "history", STEP[:20], repeats=10)
    (folder / "night03" / "cells" / "all.parquet").write_bytes(b"PAR1 not really")  # corrupt
    data = (folder / "night04" / "cells" / "all.parquet").read_bytes()
    (folder / "night04" / "cells" / "all.parquet").write_bytes(data[: len(data) // 2])  # truncated
    newer = pq.read_table(folder / "night05" / "cells" / "all.parquet")
    meta = dict(newer.schema.metadata) | {b"nvbench.schema_version": b"99"}
    pq.write_table(newer.replace_schema_metadata(meta), folder / "night05" / "cells" / "all.parquet")
    write_night(folder, 21, {CELL: 950.0}, matrix='version = 1\n[benchmark]\nname = "other"\n')
    write_night(folder, 22, {CELL: 950.0}, matrix=MATRIX)
    (folder / "README.md").write_text("not a run\n")
    code, out, err = run_cli(str(folder), capsys=capsys)
    assert code == 0, err
    lines = err.splitlines()
    assert any(l.startswith(f"skipped {folder / 'night03'}: ") and "not a readable nvbench result table" in l for l in lines)
    assert any(l.startswith(f"skipped {folder / 'night04'}: ") for l in lines)
    assert any(l.startswith(f"skipped {folder / 'night05'}: ") and f"version 99, this nvbench reads 1-{RESULT_SCHEMA_VERSION}" in l for l in lines)
    assert any(l.startswith(f"skipped {folder / 'night21'}: ") and "matrix 'other' is not the newest run's 'nightly'" in l
               for l in lines)
    assert "Traceback" not in err
    # the summary line, last on stdout, counts what it skipped by kind (three unreadable, one of another matrix)
    assert out.splitlines()[-1].startswith("18 nights, 345 windows: 1 run folder of another matrix, skipped, "
                                           "3 run folders unreadable, skipped; "), out
    page = (folder / "trend" / "history.html").read_text()
    assert "night03" in page and "matrix &#x27;other&#x27;" in page


def test_an_unusable_history_is_one_line_and_exit_2_and_nothing_is_written(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = run_cli(str(empty), "--out", str(tmp_path / "out"), capsys=capsys)
    assert (code, out) == (2, "") and err == f"error: {empty}: no run folders (a run folder holds manifest.json and cells/)\n"
    code, _, err = run_cli(str(tmp_path / "missing"), capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "not a folder" in err
    bad = nightly_series(tmp_path / "bad", [1000.0, 1000.0])
    for night in ("night01", "night02"):
        (bad / night / "cells" / "all.parquet").write_bytes(b"")
    code, _, err = run_cli(str(bad), "--out", str(tmp_path / "out"), capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "no usable run folder (2 skipped" in err
    code, _, err = run_cli(str(bad), "--alpha", "1.5", capsys=capsys)
    assert code == 2 and err == "error: alpha=1.5: must be strictly between 0 and 1\n"
    assert not (tmp_path / "out").exists()


def test_the_page_is_written_whole_or_not_at_all(tmp_path, capsys, monkeypatch):
    folder = nightly_series(tmp_path / "history", STEP[:10], repeats=3)
    out = tmp_path / "out"
    out.mkdir()
    (out / "history.html").write_text("yesterday's page")

    def broken(_history):
        raise ValueError("rendering failed")

    monkeypatch.setattr(trend, "render_markdown", broken)
    code, _, err = run_cli(str(folder), "--out", str(out), capsys=capsys)
    assert code == 2 and "rendering failed" in err
    assert (out / "history.html").read_text() == "yesterday's page" and not (out / "changes.parquet").exists()


def test_changes_parquet_columns_are_the_documented_ones():
    """Declared once (harness.catalogue.changes): a Change has exactly the table's columns, typed as declared."""
    from dataclasses import fields

    from harness.catalogue.changes import CHANGE_COLUMNS, CHANGE_FIELDS

    assert sorted(f.name for f in fields(history.Change)) == sorted(CHANGE_COLUMNS)
    annotated = {f.name: str(f.type).split("|")[0].strip() for f in fields(history.Change)}
    python = {"string": "str", "float64": "float", "int64": "int", "bool": "bool"}
    assert {c.name: python[c.type] for c in CHANGE_FIELDS} == {c.name: annotated[c.name] for c in CHANGE_FIELDS}
    assert [f.name for f in changes_file.change_schema()] == list(history.CHANGE_COLUMNS)
    assert changes_file.change_schema().field("night").type == pa.int64()
    assert changes_file.change_schema().field("p_value").type == pa.float64()


def test_the_trend_page_renders_in_a_real_browser_without_a_console_error(tmp_path, capsys):
    binary = chromium_path()
    if binary is None:
        pytest.skip("no chromium on PATH (README's test command installs Debian's chromium): the page is not "
                    "rendered in a browser")
    levels = STEP[:20] + [950.0 * 0.995 ** k for k in range(1, 11)]
    folder = nightly_series(tmp_path / "history", levels, repeats=10, noise=0.03)
    write_night(folder, 31, {CELL: 900.0, OTHER: 500.0}, repeats=10, drill=20.0)
    code, _, err = run_cli(str(folder), capsys=capsys)
    assert code == 0, err
    page = folder / "trend" / "history.html"
    with Browser(binary) as browser:
        load = browser.load(page)
        plotly = (page.parent / "plotly.min.js").resolve().as_uri()
        assert load.errors == [] and load.requests == [page.resolve().as_uri(), plotly]
        assert browser.evaluate("document.querySelectorAll('#cells article.cell').length") == 2
        first = browser.evaluate("document.querySelector('#cells article.cell').id")
        assert first == f"cell-{CELL}"  # what changed most first
        drawn = f"#trend-{CELL}-throughput[data-ready]"
        browser.evaluate(f"document.getElementById('trend-{CELL}-throughput').scrollIntoView()")  # drawn when seen
        assert browser.wait(f"document.querySelector('{drawn}') !== null")
        marks = browser.evaluate(f"document.querySelectorAll('{drawn} .shapelayer path').length")
        assert marks >= 1  # the change point's dashed line, drawn
        rows = browser.evaluate("Array.from(document.querySelectorAll('#changes-table tbody tr')).map("
                                "r => Number(r.cells[0].textContent))")
        assert rows and rows == sorted(rows, reverse=True)  # newest first
        drill = f"document.getElementById('trend-{CELL}-throughput').data.some(t => t.name === 'fire-drill night')"
        assert browser.evaluate(drill)
        width = browser.evaluate(f"document.querySelector('{drawn} .main-svg').getBoundingClientRect().width")
        assert width > 300


ISSUE_NIGHTS = [123.0, 130.0, 133.0, 133.0, 95.0, 101.0, 116.0, 116.0]
"""The issue's eight real nights (img/s; the last four with --fire-drill 20)."""


def test_a_history_shorter_than_the_drift_window_says_so_instead_of_a_slope(tmp_path, capsys):
    folder = nightly_series(tmp_path / "history", ISSUE_NIGHTS, repeats=3, noise=0.02, seed=2)
    code, _, err = run_cli(str(folder), "--out", str(tmp_path / "out"), capsys=capsys)
    assert code == 0, err
    changes = read_changes(tmp_path / "out" / "changes.parquet")
    assert [c for c in changes if c["kind"] == "drift"] == []  # was: drift +41.6 % over these 8 nights
    note = "drift not assessed: a drift is a slope over the last 14 nights, and no series has that many (at most 8)"
    assert note in (tmp_path / "out" / "history.html").read_text()
    assert "Drift not assessed" in (tmp_path / "out" / "changes.md").read_text()
    code, _, err = run_cli(str(folder), "--out", str(tmp_path / "out8"), "--drift-nights", "8", capsys=capsys)
    assert code == 0 and "drift not assessed" not in (tmp_path / "out8" / "history.html").read_text()


def test_a_version_1_changes_table_reads_with_no_floor_and_no_confirmation_and_a_newer_one_is_refused(tmp_path, capsys):
    folder = nightly_series(tmp_path / "history", STEP[:16], repeats=5, noise=0.02, seed=1)
    assert run_cli(str(folder), "--out", str(tmp_path / "out"), capsys=capsys)[0] == 0
    path = tmp_path / "out" / "changes.parquet"
    table = pq.read_table(path)
    v1 = table.drop_columns(["model", "p_floor", "confirmation", "confirmation_note"]).replace_schema_metadata(
        {**table.schema.metadata, b"nvbench.changes_version": b"1"})  # as issue 28's release wrote it
    store.write_table(tmp_path / "v1.parquet", v1)
    (old,) = [c for c in changes_file.read_changes(tmp_path / "v1.parquet") if c.metric == "throughput" and c.cell_id == CELL]
    assert (old.model, old.p_floor, old.confirmation, old.confirmation_note) == (None,) * 4 and old.p_value <= 0.01
    assert trend.significance_text(old).startswith("p = ") and trend.confirmation_text(old) == ""
    assert [c.night for c in changes_file.read_changes(path)] == [c.night for c in changes_file.read_changes(tmp_path / "v1.parquet")]
    newer = table.replace_schema_metadata({**table.schema.metadata, b"nvbench.changes_version": b"9"})
    store.write_table(tmp_path / "v9.parquet", newer)
    with pytest.raises(store.UnreadableFile, match=r"v9.parquet: version 9, this nvbench reads 1-3$"):
        changes_file.read_changes(tmp_path / "v9.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 no")
    with pytest.raises(store.UnreadableFile, match="junk.parquet: not a readable changes table .*; version unknown"):
        changes_file.read_changes(tmp_path / "junk.parquet")


def test_the_page_and_changes_md_say_which_change_the_ab_confirmed(tmp_path):
    folder = nightly_series(tmp_path / "history", STEP[:16], repeats=5, noise=0.02, seed=1)
    h = history.load_history(folder)
    steps = [i for i, c in enumerate(h.changes) if c.kind == "step"]
    assert len(steps) >= 2  # throughput and fast steps of the cell
    words = {steps[0]: (history.CONFIRMED, "A/B: regression -5.1% [-6.0, -4.2] in 10 pairs"),
             steps[1]: (history.COULD_NOT_CONFIRM, "commit 0123 cannot be checked out")}
    confirmed = history.with_confirmations(h, words)
    trend.write_history(confirmed, tmp_path / "out")
    md = (tmp_path / "out" / "changes.md").read_text()
    assert "| A/B of the commits |" in md
    assert f"**{esc_md('confirmed (A/B: regression -5.1% [-6.0, -4.2] in 10 pairs)')}**" in md
    assert "could not confirm (commit 0123 cannot be checked out)" in md
    page = (tmp_path / "out" / "history.html").read_text()
    assert '<td class="confirmation confirmed bad"><b>confirmed</b>' in page and "1 confirmed by A/B" in page
    assert '<td class="confirmation unknown"><b>could not confirm</b>' in page
    rows = {(c.metric, c.confirmation) for c in changes_file.read_changes(tmp_path / "out" / "changes.parquet")}
    assert {(h.changes[steps[0]].metric, "confirmed"), (h.changes[steps[1]].metric, "could not confirm")} <= rows


def test_the_trend_marks_promotions_on_every_cell_and_an_acknowledgement_on_its_own(tmp_path):
    """The marks sit between the nights they fell between (a promotion after night 2 before night 3), each with
    its words in the plot's tooltip and in the list under the cell."""
    nights, skipped = history.load_nights(nightly_series(tmp_path / "h", [100.0] * 4))
    h = history.analyse(str(tmp_path / "h"), nights, skipped)
    marks = [{"kind": "promotion", "when": "2026-01-02T12:00:00+00:00", "cell_id": None,
              "text": "baseline promoted: night02 by me: new normal"},
             {"kind": "ack", "when": "2026-01-03T12:00:00+00:00", "cell_id": CELL, "text": "acknowledged by me: ok"}]
    page = trend.render_html(h, marks)
    drawn = {cid: marks_on(page, cid) for cid in (CELL, OTHER)}
    assert [m[1] for m in drawn[OTHER]] == ["P"]  # the promotion on every cell, the ack on its own only
    assert sorted(m[1] for m in drawn[CELL]) == ["A", "P"]
    said = {m[1]: m[2] for m in drawn[CELL]}
    assert said == {"P": "baseline promoted: night02 by me: new normal", "A": "acknowledged by me: ok"}
    listed = cell_html(page, CELL)
    assert "baseline promoted: night02 by me: new normal" in listed and "acknowledged by me: ok" in listed
    promoted = next(m[0] for m in drawn[CELL] if m[1] == "P")
    nights = night_points(page, CELL)
    assert nights[1] < promoted < nights[2]  # between night 2 and night 3


def cell_html(page: str, cid: str) -> str:
    return page.split(f'<article class="cell" id="cell-{cid}">')[1].split("</article>")[0]


def throughput_chart(page: str, cid: str) -> dict:
    return charts(cell_html(page, cid))[f"trend-{cid}-throughput"]


def marks_on(page: str, cid: str) -> list[tuple[float, str, str]]:
    """(x, letter, words) of every change and mark the cell's throughput chart draws."""
    trace = [t for t in throughput_chart(page, cid)["data"] if t["name"] == "changes and marks"]
    return list(zip(trace[0]["x"], trace[0]["text"], trace[0]["customdata"])) if trace else []


def night_points(page: str, cid: str) -> list[float]:
    """The x of every night the cell's throughput chart draws, in order."""
    return sorted(x for t in throughput_chart(page, cid)["data"] if "night" in t["name"] for x in t["x"])


def test_an_alarms_steps_sit_on_their_own_nights_on_the_cells_trend_and_in_its_list(tmp_path):
    """An alarm's history (harness.analysis.nights.baselines.event_marks): opened on night 2, gone on night 4, each mark
    on its night's point (its run id, not its time), lettered, in its cell's list and nowhere else."""
    nights, skipped = history.load_nights(nightly_series(tmp_path / "h", [100.0] * 4))
    h = history.analyse(str(tmp_path / "h"), nights, skipped)
    marks = [{"kind": "alarm", "event": event, "when": "2026-01-09T12:00:00+00:00", "run_id": night, "cell_id": CELL,
              "text": f"alarm {night} {event}: throughput"} for event, night in (("opened", "night02"),
                                                                                 ("gone", "night04"))]
    page = trend.render_html(h, marks)
    assert marks_on(page, OTHER) == []
    at = {letter: x for x, letter, _ in marks_on(page, CELL)}
    points = night_points(page, CELL)
    assert (at["O"], at["G"]) == (points[1], points[3]) and len(at) == 2
    figures = {CELL: cell_html(page, CELL)}
    assert "<li>G: 2026-01-09T12:00 alarm night04 gone: throughput</li>" in figures[CELL]
