"""A regression alarms once (harness.analysis.alarms), on verdicts made by hand: new the first night, open on
the nights after while its interval overlaps the first night's, worse (failing again) when it falls beyond the
floor below it, acknowledged within an `nvbench ack`'s interval, closed by an unchanged night; a drilled
change never stands for a real one. And what CI reads of it: junit.xml fails only the new and the worse."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.analysis import alarm_formats, alarms
from harness.analysis.alarms import ACKNOWLEDGED, NEW, OPEN, WORSE, Ack, judge_night
from harness.analysis.ci_formats import render_junit
from harness.analysis.runs import RunData
from harness.analysis.verdict import CellVerdict, Comparison, MetricVerdict, Thresholds

CELL = "resnet18-synthetic-nchw-fp32-ws1-ga1-eager"


def verdict(word: str, effect: float = -20.0, half: float = 2.0, *, cell: str = CELL, drill: float = 25.0,
            floor: float = 3.0) -> CellVerdict:
    return CellVerdict(cell_id=cell, backend="synthetic", precision="fp32", verdict=word, reason="",
                       decided_by="throughput", floor_pct=floor, fdr_q=0.01, accuracy_tolerance=0.01,
                       fire_drill_pct=drill,
                       metrics={"throughput": MetricVerdict(effect_pct=effect, ci_low_pct=effect - half,
                                                            ci_high_pct=effect + half)})


def night(word_or_verdicts, state, acks=(), name="n", day="2026-11-27"):
    vs = [word_or_verdicts] if isinstance(word_or_verdicts, CellVerdict) else word_or_verdicts
    judged = judge_night(vs, state, acks, night=name, when=f"{day}T03:00:00+00:00")
    return list(judged.alarms), list(judged.open), judged.closed


def test_a_regression_alarms_once_then_stays_open_until_it_worsens_beyond_the_floor():
    found, state, _ = night(verdict("regression", -20), [], name="night2")
    assert [(a.status, a.fails) for a in found] == [(NEW, True)]
    found, state, _ = night(verdict("regression", -21), state, name="night3")  # overlaps night2's [-22, -18]
    assert [(a.status, a.fails, a.since, a.nights) for a in found] == [(OPEN, False, "night2", 2)]
    assert "open since night2, 2 nights" in found[0].text()
    found, again, _ = night(verdict("regression", -21), state, name="night3")  # night3 judged twice: counted once
    assert found[0].nights == 2
    found, state4, _ = night(verdict("regression", -19), state, name="night4")
    assert (found[0].status, found[0].nights) == (OPEN, 3)
    found, state, _ = night(verdict("regression", -33), state4, name="night4b")  # drill 50: below and > 3 % further
    assert [(a.status, a.fails, a.since) for a in found] == [(WORSE, True, "night4b")]
    found, _, _ = night(verdict("regression", -33.5), state, name="night5")  # the worse level is the new reference
    assert (found[0].status, found[0].since, found[0].fails) == (OPEN, "night4b", False)


def test_below_the_first_interval_but_within_the_floor_is_the_same_change():
    _, state, _ = night(verdict("regression", -20, 0.5), [], name="a")
    found, _, _ = night(verdict("regression", -22, 0.5), state, name="b")  # no overlap, 2 % < the 3 % floor
    assert found[0].status == OPEN
    found, _, _ = night(verdict("regression", -22, 0.5, floor=1.0), state, name="b")  # that cell's floor is 1 %
    assert found[0].status == WORSE


def test_an_unchanged_night_closes_the_alarm_and_an_inconclusive_one_keeps_it():
    _, state, _ = night(verdict("regression", -20), [], name="a")
    _, kept, closed = night(verdict("inconclusive", -12, 8), state, name="b")  # [-20, -4] reaches [-22, -18]
    assert (len(kept), closed) == (1, [])
    _, after, closed = night(verdict("unchanged", 0.5, 1), kept, name="c")
    assert after == [] and [(r.alarm.since, r.outcome) for r in closed] == [("a", alarms.FIXED)]
    found, _, _ = night(verdict("regression", -20), after, name="d")
    assert found[0].status == NEW  # back after a fix: a new alarm


def test_an_acknowledged_change_never_fails_within_its_interval_but_a_worse_one_does():
    found, state, _ = night(verdict("regression", -33), [], name="night4b")
    ack = Ack(change=found[0].change, reason="new driver", who="me", when="2026-11-27T01:00:00+00:00",
              expires="2026-12-31")
    for effect in (-33, -20):  # the acknowledged level, and better than it
        found, state, _ = night(verdict("regression", effect), state, [ack], name=f"n{effect}")
        assert (found[0].status, found[0].fails) == (ACKNOWLEDGED, False)
        assert "acknowledged (new driver)" in found[0].text()
    found, state, _ = night(verdict("regression", -50), state, [ack], name="worse")
    assert (found[0].status, found[0].beyond_ack, found[0].fails) == (WORSE, True, True)
    found, _, _ = night(verdict("regression", -50), state, [ack], name="after")  # alarmed once, then open
    assert (found[0].status, found[0].fails) == (OPEN, False)
    expired, _, _ = night(verdict("regression", -33), [], [ack], name="x", day="2027-01-01")
    assert expired[0].status == NEW  # past its date the acknowledgement holds no more


def test_a_drilled_alarm_or_acknowledgement_never_stands_for_a_real_regression():
    found, state, _ = night(verdict("regression", -20, drill=25.0), [], name="drill")
    ack = Ack(change=found[0].change, reason="rehearsal", who="me", when="t")
    found, _, _ = night(verdict("regression", -20, drill=0.0), state, [ack], name="real")
    assert (found[0].status, found[0].fails) == (NEW, True)


def test_cell_filters_match_by_id_or_every_axis_value():
    change = alarms.change_of(verdict("regression"))
    assert alarms.matches(change, CELL) and alarms.matches(change, "backend=synthetic,precision=fp32")
    assert not alarms.matches(change, "backend=synthetic,precision=bf16")
    assert alarms.filter_problem("backnd=synthetic") and alarms.filter_problem(CELL) is None
    assert alarms.from_record(alarms.OpenAlarm, alarms.as_record(alarms.OpenAlarm(change=change, since="a"))) \
        == alarms.OpenAlarm(change=change, since="a")


def test_junit_fails_only_the_new_and_the_worse_and_skips_the_open_saying_so():
    other = "resnet18-pytorch-nchw-fp32-ws1-ga1-eager"
    vs = [verdict("regression", -20), verdict("regression", -20, cell=other)]
    _, state, _ = night(vs[:1], [], name="night2")
    found, _, _ = night(vs, state, name="night3")
    assert {a.change.cell_id: a.status for a in found} == {CELL: OPEN, other: NEW}
    run = RunData(path="r", run_id="night3", created_at="", environment={}, rows=())
    comparison = Comparison(mode="baseline", candidate=run, baseline_label="b", baseline_environment={},
                            thresholds=Thresholds(), verdicts=tuple(vs))
    judged = judge_night(vs, state, (), night="night3", when="2026-11-27")
    root = ET.fromstring(alarm_formats.rewrite_junit(render_junit(comparison), judged))
    cases = {c.get("name").split(" [")[0]: c for c in root.iter("testcase")}
    assert cases[CELL].find("failure") is None
    assert "open since night2, 2 nights" in cases[CELL].find("skipped").get("message")
    assert cases[other].find("failure").get("message").startswith("new: regression")
    assert (root.get("failures"), root.get("skipped"), root.get("tests")) == ("1", "1", "2")
    section = alarm_formats.summary_section(judged, "night3")
    assert "**New tonight (fail the job): 1**" in section and "**Still open" in section
    assert section.index("New tonight") < section.index("Still open")


def test_the_nightly_alarm_step_exits_1_once_then_0_and_refuses_a_corrupt_acks_file_in_one_line(tmp_path, capsys):
    from harness.analysis import verdicts_file
    from harness.orchestrate.workflows import nightly
    from harness.results import store

    report, reports = tmp_path / "night" / "report", tmp_path / "reports"
    run = RunData(path="r", run_id="n", created_at="", environment={}, rows=())
    comparison = Comparison(mode="baseline", candidate=run, baseline_label="b", baseline_environment={},
                            thresholds=Thresholds(), verdicts=(verdict("regression"),))
    store.write_table(report / "verdicts.parquet", verdicts_file.verdict_table(comparison))
    store.write_bytes(report / "junit.xml", render_junit(comparison))
    argv = ["alarms", str(report), "--reports", str(reports)]
    assert nightly.main([*argv, "--night", "night2"]) == 1
    assert nightly.main([*argv, "--night", "night3"]) == 0
    assert "OPEN: " in capsys.readouterr().err and "open since night2, 2 nights" in (report / "summary.md").read_text()
    assert ET.parse(report / "junit.xml").getroot().get("failures") == "0"
    store.write_bytes(reports / "baselines" / "acks.json", b"[1, 2]")
    assert nightly.main([*argv, "--night", "night4"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"nightly alarms: {reports / 'baselines' / 'acks.json'}: not an nvbench acks file (a JSON object with a "
        "`acks` list)"]
