"""`nvbench history` names the night a cell's counted work changed: consecutive nights' work.parquet diffed exactly
(no statistics), a night without one passed over, a varying item never a step; the page, changes.md and the
console say it; the per-night cache knows when a night's work.parquet came or changed."""

from __future__ import annotations

import json

from test_baselines import CELLS, cli, run_folder
from test_work_diff import SYNC, step
from test_work_report import folder

from harness.analysis.nights import history

CELL = CELLS["synthetic"]
MM = {"forward|op_calls|aten::mm": 20}


def nights(root, tmp_path, works):
    """One run folder per night under `root` (night1, night2, ...), each with its work rows (None: no work.parquet)."""
    for i, work in enumerate(works, start=1):
        folder(root / f"night{i}", tmp_path, work=work)
        manifest = root / f"night{i}" / "manifest.json"  # the nights in order, each on its own commit
        doc = json.loads(manifest.read_text())
        doc["created_at"] = f"2026-11-{i:02d}T02:00:00+00:00"
        doc["environment"] = dict(doc["environment"], nvbench_git_sha=f"{i:040x}")
        manifest.write_text(json.dumps(doc))
    return root


def test_the_history_names_the_night_the_work_changed_and_skips_a_night_without_work(tmp_path):
    hist = nights(tmp_path / "hist", tmp_path, [step(), step(), step(**MM), step(**MM), None,
                                                step(**MM, **{f"optimizer|host_syncs|{SYNC}": 1})])
    h = history.load_history(hist)
    assert [(w.night, w.previous_run_id, w.words) for w in h.work_steps] == [
        (6, "night4", f"optimizer +1 host sync per step ({SYNC})"), (3, "night2", "forward +16 aten::mm per step")]
    assert h.work_steps[0].is_new and not h.work_steps[1].is_new
    assert (h.work_steps[1].commit_from, h.work_steps[1].commit_to) == (f"{2:040x}"[:12], f"{3:040x}"[:12])
    proc = cli("history", hist, "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "out" / "changes.md").read_text()
    assert f"- work changed at night 3 (night3): {CELL}: forward +16 aten::mm per step (commits " in md
    assert f"new: work changed at night 6 (night6): {CELL}: optimizer +1 host sync per step ({SYNC})" in proc.stderr
    page = (tmp_path / "out" / "history.html").read_text()
    assert 'id="work-table"' in page and "forward +16 aten::mm per step" in page


def test_a_varying_item_is_never_a_step_and_an_unchanged_history_has_no_work_section(tmp_path):
    varying = step(0) + step(1, **{f"optimizer|host_syncs|{SYNC}": 1})  # 0..1 across the processes
    hist = nights(tmp_path / "hist", tmp_path, [step(0) + step(1), varying, step(0) + step(1)])
    assert history.load_history(hist).work_steps == ()
    proc = cli("history", hist, "--out", tmp_path / "out")
    assert proc.returncode == 0 and "work changed" not in (tmp_path / "out" / "changes.md").read_text()
    assert 'id="work-table"' not in (tmp_path / "out" / "history.html").read_text()


def test_the_cache_sees_a_nights_work_parquet_come_and_gives_the_cold_answer(tmp_path):
    hist = nights(tmp_path / "hist", tmp_path, [step(), step(), None, step(**MM)])
    assert [w.night for w in history.load_history(hist).work_steps] == [4]
    folder(tmp_path / "late", tmp_path, work=step(**MM))  # night 3's work.parquet arrives after it was cached
    (tmp_path / "late" / "work.parquet").rename(hist / "night3" / "work.parquet")
    cached = history.load_history(hist)
    assert [w.night for w in cached.work_steps] == [3]
    assert cached.work_steps == history.load_history(hist, use_cache=False).work_steps
