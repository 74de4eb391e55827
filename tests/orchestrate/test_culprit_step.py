"""The nightly's culprit step (issue 70) on constructed nights and a real git repository: an alarm opened tonight with
a work change, the baseline one first-parent commit behind tonight, is named that commit directly (no bisect), in
alarms.json (data), summary.md and the night's last lines; a range wider than the budget allows says what it would
need and bisects nothing; an alarm without a work change is left to NVBENCH_BISECT=auto; the step never fails the
night (exit 0)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from harness.analysis.judge.verdict import CellVerdict, MetricVerdict
from harness.analysis.judge.work_diff import SideWork, diff_sides
from harness.analysis.nights import baselines
from harness.analysis.nights.alarms import judge_night
from harness.orchestrate.workflows.culprit_step import culprit_lines, culprit_step, only_flags
from harness.results import store
from harness.results.schema import cell_table

CELL = "synthetic_nchw_fp32_ws1_ga1_abc"
MM = ("forward", "ops", "aten::mm")


def verdict(effect: float) -> CellVerdict:
    return CellVerdict(cell_id=CELL, backend="synthetic", precision="fp32", verdict="regression", reason="",
                       decided_by="throughput", floor_pct=3.0, fdr_q=0.01, accuracy_tolerance=0.01,
                       metrics={"throughput": MetricVerdict(effect_pct=effect, ci_low_pct=effect - 2,
                                                             ci_high_pct=effect + 2)})


def diff(mm: float):
    side = lambda v: SideWork(processes=1, ranges={MM: (v, v)})
    return diff_sides(CELL, side(40.0), side(mm))


def write_night(reports: Path, night: int, sha: str) -> Path:
    run = reports / f"night{night:02d}"
    store.write_table(run / "cells" / "all.parquet", cell_table([
        {"run_id": run.name, "cell_id": CELL, "repeat": 0, "status": "ok", "reason": "", "backend": "synthetic",
         "memory_format": "nchw", "precision": "fp32", "world_size": 1, "grad_accum": 1, "compile": "eager",
         "throughput_img_per_s": 1000.0}]))
    store.write_json(run / "manifest.json", {"run_id": run.name, "created_at": f"2026-01-0{night}T02:00:00+00:00",
                                             "environment": {"nvbench_git_sha": sha, "nvbench_git_dirty": False}})
    return run


def _repo(root: Path, commits: int) -> list[str]:
    root.mkdir()
    run = lambda *a: subprocess.run(["git", "-C", str(root), *a], check=True, capture_output=True, text=True).stdout
    run("init", "-q")
    run("config", "user.email", "t@example.com")
    run("config", "user.name", "t")
    shas = []
    for k in range(1, commits + 1):
        (root / "NOTES").write_text(f"{k}\n")
        run("add", "-A")
        run("commit", "-q", "-m", f"commit {k}")
        shas.append(run("rev-parse", "HEAD").strip())
    return shas


def _nights(tmp_path: Path, base_sha: str, head_sha: str, *, work: bool = True) -> tuple[Path, Path, Path]:
    reports = tmp_path / "reports"
    base, head = write_night(reports, 1, base_sha), write_night(reports, 2, head_sha)
    judged = judge_night([verdict(-20.0)], [], [], night="night02", when="2026-01-02T03:00:00+00:00", run=str(head),
                         work={CELL: diff(56.0)} if work else {})
    baselines.write_open(reports, judged.open, judged.events)
    (head / "report").mkdir()
    (head / "report" / "summary.md").write_text("# tonight\n")
    return reports, base, head


def _step(reports: Path, base: Path, head: Path, repo: Path, *extra: str) -> int:
    return culprit_step(["--reports", str(reports), "--night", "night02", "--run", str(head),
                         "--baseline", str(base), "--matrix", "m.toml", "--repo", str(repo),
                         "--summary", str(head / "report" / "summary.md"), *extra])


def test_a_one_commit_range_names_that_commit_in_the_record_the_summary_and_the_last_lines(tmp_path, capsys):
    shas = _repo(tmp_path / "repo", 2)
    reports, base, head = _nights(tmp_path, shas[0], shas[1])
    assert _step(reports, base, head, tmp_path / "repo") == 0
    (alarm,) = baselines.read_open(reports)
    (culprit,) = alarm.culprits
    assert (culprit.point, culprit.subject, culprit.by) == (shas[1], "commit 2", "range")
    assert culprit.words == "work changed: forward +16 aten::mm per step (the range is this one commit)"
    record = json.loads(baselines.alarms_path(reports).read_text())["open"][0]["culprits"]
    assert record == [{"point": shas[1], "subject": "commit 2", "by": "range", "words": culprit.words}]
    assert f"first bad commit {shas[1][:12]} commit 2: work changed" in (head / "report" / "summary.md").read_text()
    (line,) = culprit_lines(head)
    assert line == (f"NEW: {CELL} throughput -20.0% [-22.0, -18.0]: first bad commit {shas[1][:12]} commit 2: "
                    "work changed: forward +16 aten::mm per step (the range is this one commit)")


def test_a_budget_too_small_says_what_it_would_need_and_names_the_range_still_open(tmp_path, capsys):
    shas = _repo(tmp_path / "repo", 9)
    reports, base, head = _nights(tmp_path, shas[0], shas[-1])
    assert _step(reports, base, head, tmp_path / "repo", "--budget-s", "10") == 0
    err = capsys.readouterr().err
    assert "(8 first-parent commits) by work for 1 alarmed cell(s): about 8 counted process(es) a cell, ~480 s" in err
    assert f"no bisect: the budget (10 s) is too small; it would need ~480 s (NVBENCH_BISECT_BUDGET_S); the range " \
           f"still open: {shas[0][:12]}..{shas[-1][:12]}" in err, err
    assert baselines.read_open(reports)[0].culprits == ()  # nothing named, nothing guessed


def test_an_alarm_without_a_work_change_waits_for_auto_and_the_filters_name_its_cells(tmp_path, capsys):
    shas = _repo(tmp_path / "repo", 2)
    reports, base, head = _nights(tmp_path, shas[0], shas[1], work=False)
    assert _step(reports, base, head, tmp_path / "repo") == 0
    assert baselines.read_open(reports)[0].culprits == ()  # by work: not this one
    assert _step(reports, base, head, tmp_path / "repo", "--mode", "auto") == 0
    assert baselines.read_open(reports)[0].culprits[0].point == shas[1]
    (alarm,) = baselines.read_open(reports)
    assert only_flags([alarm]) == ["--only=backend=synthetic", "--only=precision=fp32"]


def test_each_alarm_of_a_cell_gets_its_own_culprit_line(tmp_path):
    """A cell with a timing alarm and a gate alarm opened the same night: one culprit line each, never one per cell
    twice."""
    from harness.analysis.judge.work_diff import GateCheck

    shas = _repo(tmp_path / "repo", 2)
    reports, base, head = _nights(tmp_path, shas[0], shas[1])
    gate = GateCheck(label='work gate op_calls = "no-rise"', broken=True, words="", counter="ops")
    judged = judge_night([verdict(-20.0)], [], [], night="night02", when="2026-01-02T03:00:00+00:00", run=str(head),
                         work={CELL: diff(56.0)}, gates={CELL: [gate]})
    baselines.write_open(reports, judged.open, judged.events)
    assert _step(reports, base, head, tmp_path / "repo") == 0
    lines = culprit_lines(head)
    assert [line.split(": first bad commit")[0] for line in lines] == [
        f"NEW: {CELL} throughput -20.0% [-22.0, -18.0]", f'NEW: {CELL} work gate op_calls = "no-rise" broken (+16 per step)']
    assert all(f"first bad commit {shas[1][:12]} commit 2: " in line for line in lines)
    assert all(len(a.culprits) == 1 for a in baselines.read_open(reports))


def test_baseline_show_names_an_alarms_work_and_its_culprit(tmp_path):
    shas = _repo(tmp_path / "repo", 2)
    reports, base, head = _nights(tmp_path, shas[0], shas[1])
    assert _step(reports, base, head, tmp_path / "repo") == 0
    lines = baselines.alarm_lines(reports)
    assert lines[1].endswith("; work changed: forward +16 aten::mm per step"), lines
    assert lines[2] == f"    first bad commit {shas[1][:12]} commit 2: work changed: forward +16 aten::mm per step " \
                       "(the range is this one commit)"
