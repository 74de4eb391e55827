"""Living with a nightly, end to end (ci/nightly.sh, real cells, one tiny CPU cell of 3 repeats a night): against
one baseline, a fire drill from night 2 on alarms once (night 2 exits 1 naming it; night 3 exits 0 listing it open
since night 2; a worse night failing again is tests/analysis/test_alarms.py's); after `nvbench ack` the drilled
night's verdicts exit 0 listed as acknowledged; `nvbench baseline promote` refuses the drill unless told it is a
rehearsal, and a drilled run is then judged against the promoted one; the trend marks both; the alarm's history
(opened, acknowledged once) is listed by `nvbench baseline show` and marked too. The drills are +300 % (-75 %
throughput, each step's own time in its own process made four times as long): on this shared 2-core machine a
3-step window's repeats spread by 25 % and two nights an hour apart by up to 19 %, and a +25 % drill was
inconclusive (the issue's +25 % and +50 % are decided on constructed verdicts in tests/analysis/test_alarms.py).
What this test once asserted of timing alone, that two drilled nights read `unchanged` or `inconclusive` at a 25 %
floor, is the machine's chance (19 % apart seen), not a fact: the judged night is only asserted to be judged
against the promoted run."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_nightly import night

from harness.analysis.nights import baselines
from harness.orchestrate.workflows.alarm_step import alarm_step
from harness.orchestrate.workflows.confirm import history_step

KNOBS = {"NVBENCH_CONFIRM": "sequential", "NVBENCH_SLOTS": "1",  # test_nightly's night: 3 repeats, in turn
         # 3 + 3 repeats at --fdr 0.1 can decide; others' jobs on this machine moved the speed probe by +96 % in
         # one night, which a machine-speed adjustment cannot extrapolate over: judged unadjusted
         "NVBENCH_REPORT_ARGS": "--min-repeats 3 --fdr 0.1 --no-speed-adjust"}
CELL = "synthetic_nchw_fp32_ws1_ga1"


def nvbench(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def drilled(matrix, reports, run_id, pct, **extra):
    return night(matrix, reports, run_id, NVBENCH_RUN_ARGS=f"--fire-drill {pct}", **KNOBS | extra)


def junit_counts(reports, run_id):
    root = ET.parse(reports / run_id / "report" / "junit.xml").getroot()
    return root.get("failures"), root.get("skipped"), root


@pytest.mark.slow
def test_a_regression_alarms_once_is_acknowledged_and_a_promoted_baseline_ends_it(tmp_path, tiny_matrix, capsys):
    matrix, reports = tiny_matrix(), tmp_path / "reports"
    first = night(matrix, reports, "night1", **KNOBS)
    assert first.returncode == 0, first.stderr
    (reports / "baselines").mkdir()
    (reports / "baselines" / "current").write_text("../night1\n")

    second = drilled(matrix, reports, "night2", 300)
    assert second.returncode == 1, second.stderr
    assert f"NEW: {CELL}" in second.stderr and "new regression" in second.stderr
    assert junit_counts(reports, "night2")[:2] == ("1", "0")
    third = drilled(matrix, reports, "night3", 300, NVBENCH_REPEATS="5")  # 5: a run that may be promoted
    if third.returncode == 1 and f"WORSE: {CELL}" in third.stderr:
        # The same drill read worse than night 2 by more than the floor, whole intervals apart: the machine moved
        # between the nights (two runs an hour apart differ by 10-16 % here, below; a fresh-clone suite saw night 3
        # at -57.7 % [-63.3, -52.4] against night 2's -48.1 % [-50.8, -44.8]). Failing again is then the rule's
        # answer (tests/analysis/test_alarms.py tests it), and it must say against what.
        assert "worse than when it opened (throughput -" in third.stderr, third.stderr
    else:
        assert third.returncode == 0, third.stderr
        assert f"OPEN: {CELL}" in third.stderr and "open since night2, 2 nights" in third.stderr
        failures, skipped, root = junit_counts(reports, "night3")
        assert (failures, skipped) == ("0", "1") and "open since night2" in root.find(".//skipped").get("message")
        summary = (reports / "night3" / "report" / "summary.md").read_text()
        assert "**Still open (alarmed before; not failing again): 1**" in summary
    # a worse change failing again is the alarm step's own rule (tests/analysis/test_alarms.py): not a night more
    # the alarm's history: opened on night 2 (and worse on night 3 where it read worse), listed by baseline show
    assert [(e.kind, e.night) for e in baselines.read_events(reports)][-1] == ("opened", "night2")
    shown = nvbench("baseline", "show", "--reports", reports)
    assert shown.returncode == 0 and f"night2 opened: {CELL}" in shown.stdout, shown.stdout + shown.stderr

    ack = nvbench("ack", "backend=synthetic", "--reason", "rehearsal: accepted", "--reports", reports)
    assert ack.returncode == 0, ack.stderr
    for report in ("night2", "night3"):  # the nightly's own alarm step on each drill's verdicts, as night 5
        code = alarm_step([str(reports / report / "report"), "--reports", str(reports), "--night", "night5"])
        err = capsys.readouterr().err
        assert code == 0 and f"ACKNOWLEDGED: {CELL}" in err, err
        assert "rehearsal: accepted" in err
        assert "**Acknowledged" in (reports / report / "report" / "summary.md").read_text()
    assert [e.night for e in baselines.read_events(reports) if e.kind == "acknowledged"] == ["night5"]  # once

    refused = nvbench("baseline", "promote", reports / "night3", "--reason", "new normal", "--reports", reports)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1 and "a fire drill" in refused.stderr
    promoted = nvbench("baseline", "promote", reports / "night3", "--reason", "new normal", "--reports", reports,
                       "--allow-fire-drill")
    assert promoted.returncode == 0, promoted.stderr
    # a night still drilled, judged against the promoted one as the nightly judges (night2's run: no run more)
    judged = nvbench("report", reports / "night2", "--baseline", reports / "baselines" / "current", "--out",
                     tmp_path / "night6", "--min-repeats", "3", "--fdr", "0.1", "--no-speed-adjust", "--no-fast-steps")
    assert judged.returncode in (0, 1, 3) and "vs run night3" in judged.stdout, judged.stdout + judged.stderr

    page = tmp_path / "trend"
    code = history_step(reports / "history", page, matrix=Path(matrix), reports=reports, no_ab="test")
    assert code == 0, capsys.readouterr().err
    html = (page / "history.html").read_text()
    assert 'class="mark promotion"' in html and 'class="mark ack"' in html and "baseline promoted: night3" in html
    assert 'class="mark alarm opened"' in html and "alarm night2 opened: " in html
