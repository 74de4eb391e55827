"""A nightly beside a neighbour that stays (issue 58, its nightly acceptance), end to end (ci/nightly.sh and `nvbench
nightly`, real cells, a busy loop on the cells' own cores for the whole night): night 1 is the baseline, night 2 a
+300 % drill that opens an alarm, acknowledged; night 3, undrilled, would end that alarm on a quiet machine (fixed),
but runs beside the neighbour: every window is taken under interference, so the cell is not judged, the night ends by
itself with exit 3 and says why, and the alarms and acknowledgements are as they were before it. The run itself never
waits for a neighbour (its spoiled windows are kept, flagged), so a night is bounded by its cells; nvbench ab's wait
budget is tests/orchestrate/test_busy_ab.py's."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from test_nightly import NIGHTLY, night
from test_nightly_alarms import KNOBS, drilled, nvbench

from harness.analysis.nights import baselines


@pytest.mark.slow
@pytest.mark.parametrize("via", NIGHTLY)
def test_a_night_beside_a_neighbour_that_stays_ends_undecided_and_moves_no_alarm(tmp_path, tiny_matrix, via,
                                                                                   quiet_machine):
    matrix, reports = tiny_matrix(), tmp_path / "reports"
    # nights 1 and 2 are quiet ones: made so (a constructed /proc/stat), never hoped for on a shared runner
    assert night(matrix, reports, "night1", via=via, **KNOBS | quiet_machine).returncode == 0
    (reports / "baselines").mkdir()
    (reports / "baselines" / "current").write_text("../night1\n")
    second = drilled(matrix, reports, "night2", 300, via=via, **quiet_machine)
    assert second.returncode == 1, second.stderr  # the alarm opens
    ack = nvbench("ack", "backend=synthetic", "--reason", "rehearsal", "--reports", reports)
    assert ack.returncode == 0, ack.stderr
    alarms_before = json.loads(baselines.alarms_path(reports).read_text())
    acks_before = (reports / "baselines" / "acks.json").read_bytes()

    # a busy loop on this test's cores (the night's cells inherit them): every window shares them
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        third = night(matrix, reports, "night3", via=via, **KNOBS)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert third.returncode == 3, third.stdout + third.stderr
    (verdict,) = pq.read_table(reports / "night3" / "report" / "verdicts.parquet").to_pylist()
    assert verdict["verdict"] == "inconclusive" and verdict["busy"] is True, verdict["reason"]
    assert verdict["reason"].startswith("not judged: the machine was busy (3 of 3 windows of the candidate taken")
    assert "still open, the machine was busy tonight: no evidence either way" in third.stderr
    assert "  NOT JUDGED " in third.stderr.strip().splitlines()[-1]
    summary = (reports / "night3" / "report" / "summary.md").read_text()
    assert "**Not judged, the machine was busy: 1 cell(s)**" in summary
    after = json.loads(baselines.alarms_path(reports).read_text())
    assert after["open"] == alarms_before["open"] and after["events"] == alarms_before["events"]
    assert (reports / "baselines" / "acks.json").read_bytes() == acks_before
