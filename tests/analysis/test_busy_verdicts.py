"""A cell whose windows were mostly taken under interference is not judged (issue 58, item 4): on constructed rows,
exactly at the rule's edge (harness.results.interference.MIN_CLEAN_FRAC), its verdict is inconclusive and busy,
whatever its clean windows say; an open alarm is neither ended nor a new one opened by it; verdicts.parquet keeps
the flag; summary.md and the console list such cells apart from the inconclusive ones, and the nightly's alarm step
exits 3 with its alarms as they were."""

from __future__ import annotations

import json

from test_alarms import CELL as ALARM_CELL, verdict as alarm_verdict, write_night_report
from test_compare import BASE, CELL, one, rows, run

from harness.analysis.nights import alarms, baselines
from harness.analysis.judge import compare
from harness.analysis.load import verdicts_file
from harness.analysis.nights.alarms import BUSY, GONE, OPEN, judge_night
from harness.analysis.pages.ci_formats import render_markdown
from harness.analysis.pages.ci_formats import verdict_lines
from harness.analysis.judge.verdict import INCONCLUSIVE, REGRESSION, Comparison, Thresholds
from harness.results import store

QUIET = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.7, 99.3, 100.1]


def spoiled(row_list, which):
    """The rows with those repeats' windows taken under interference (a neighbour on 60 % of the cell's cores)."""
    return [dict(r, foreign_cpu_frac=0.6, foreign_cpu_s=2.0) if r["repeat"] in which else
            dict(r, foreign_cpu_frac=0.01, foreign_cpu_s=0.01) for r in row_list]


def test_a_side_with_fewer_than_half_its_windows_clean_is_not_judged_whatever_its_clean_ones_say():
    slower = [50.0 + 0.1 * i for i in range(10)]  # half the baseline's speed: a regression, if it were judged
    th = Thresholds(min_repeats=3)
    judged = one(spoiled(rows(slower), range(5)), spoiled(rows(QUIET, ), ()), th)  # 5 of 10 clean: enough
    assert judged.verdict == REGRESSION and judged.busy is False and judged.num_candidate == 5
    v = one(spoiled(rows(slower), range(6)), spoiled(rows(QUIET), ()), th)  # 4 of 10 clean: too few
    assert (v.verdict, v.busy, v.num_candidate) == (INCONCLUSIVE, True, 4)
    assert v.reason.startswith("not judged: the machine was busy (6 of 10 windows of the candidate taken under "
                               "interference); run it again on a quiet machine"), v.reason
    assert "other processes used 60% of the cell's cores in repeat(s) 0, 1, 2, 3, 4, 5 of the candidate" in v.reason
    assert v.throughput.candidate_value is not None and v.throughput.effect_pct is None  # figures, no test
    # the baseline's side counts the same; an A/B names its sides B and A
    base = one(spoiled(rows(QUIET), ()), spoiled(rows(QUIET), range(6)), th)
    assert base.busy and "6 of 10 windows of the baseline taken under interference" in base.reason
    (ab,) = compare.compare_runs(run(spoiled(rows(QUIET), range(7))), run(spoiled(rows(QUIET), range(6)),
                                 run_id="base"), th, mode="ab").verdicts
    assert ab.reason.startswith("not judged: the machine was busy (7 of 10 windows of B taken under interference; "
                                "6 of 10 windows of A taken under interference)")
    # rows without the interference columns (written before schema 6) were never measured: judged as before
    assert one(rows(slower), rows(QUIET), th).busy is False


def test_the_busy_flag_survives_verdicts_parquet(tmp_path):
    v = one(spoiled(rows(QUIET), range(6)), rows(BASE), Thresholds(min_repeats=3))
    comparison = Comparison(mode="baseline", candidate=run(rows(QUIET)), baseline_label="b", baseline_environment={},
                            thresholds=Thresholds(), verdicts=(v,))
    store.write_table(tmp_path / "verdicts.parquet", verdicts_file.verdict_table(comparison))
    (back,) = verdicts_file.read_verdicts(tmp_path / "verdicts.parquet")
    assert back.busy is True and back.verdict == INCONCLUSIVE and back.cell_id == CELL


def test_a_busy_night_neither_ends_an_open_alarm_nor_opens_one():
    opened = judge_night([alarm_verdict("regression", drill=0)], [], (), night="night1",
                         when="2026-11-27T03:00:00+00:00")
    state = list(opened.open)
    # tonight's clean windows would read wholly above the regression (gone), but the night was busy
    busy = alarm_verdict("inconclusive", 5.4, low=-5.8, high=17.3, drill=0)
    quiet_reading = judge_night([busy], state, (), night="night2", when="2026-11-28T03:00:00+00:00")
    assert [r.outcome for r in quiet_reading.readings] == [GONE]  # the rule it must not fall to
    from dataclasses import replace
    tonight = judge_night([replace(busy, busy=True)], state, (), night="night2", when="2026-11-28T03:00:00+00:00")
    (reading,) = tonight.readings
    assert (reading.outcome, reading.verdict, reading.tonight) == (OPEN, BUSY, None)
    assert reading.text().endswith("still open, the machine was busy tonight: no evidence either way")
    assert tonight.open == opened.open and tonight.events == () and tonight.alarms == ()
    # a busy cell with no alarm opens none
    other = replace(alarm_verdict("inconclusive", -30.0, drill=0, cell="other"), busy=True)
    assert judge_night([other], [], (), night="night2", when="2026-11-28T03:00:00+00:00").open == ()


def test_summary_and_console_list_busy_cells_apart_and_the_alarm_step_keeps_its_alarms(tmp_path, capsys):
    from harness.orchestrate.workflows.alarm_step import alarm_step

    th = Thresholds(min_repeats=3)
    comparison = compare.compare_runs(run(spoiled(rows(QUIET), range(8))), run(rows(BASE), run_id="base"), th)
    md = render_markdown(comparison)
    assert "**Not judged, the machine was busy: 1 cell(s)** (fewer than half of a side's windows clean" in md
    assert "**Inconclusive" not in md  # a busy cell is not one more repeats would decide
    assert any(line.startswith("NOT JUDGED: 1 cell, the machine was busy, not a pass")
               for line in verdict_lines(comparison, 100))

    reports = tmp_path / "reports"
    reports.mkdir()
    first = tmp_path / "night1"
    write_night_report(first, [alarm_verdict("regression", drill=0)], "night1")
    assert alarm_step([str(first), "--reports", str(reports), "--night", "night1"]) == 1
    before = json.loads(baselines.alarms_path(reports).read_text())["open"]
    second = tmp_path / "night2"
    from dataclasses import replace
    write_night_report(second, [replace(alarm_verdict("inconclusive", 5.4, low=-5.8, high=17.3, drill=0),
                                        busy=True)], "night2")
    capsys.readouterr()
    assert alarm_step([str(second), "--reports", str(reports), "--night", "night2"]) == 3
    err = capsys.readouterr().err
    assert f"OPEN: {ALARM_CELL}: open since night1" in err and "the machine was busy tonight" in err
    assert json.loads(baselines.alarms_path(reports).read_text())["open"] == before
    assert [e.kind for e in baselines.read_events(reports)] == [alarms.OPENED]
