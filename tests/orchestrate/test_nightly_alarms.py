"""Living with a nightly, end to end (ci/nightly.sh, real cells, one tiny CPU cell of 5 repeats a night): against
one baseline, a fire drill of +25 % from night 2 on alarms once (night 2 exits 1 naming it; nights 3 and 4 exit 0
listing it open since night 2), a +50 % night is worse and fails again; after `nvbench ack` the drilled nights
exit 0 listing it acknowledged; `nvbench baseline promote` refuses the drill unless told it is a rehearsal, and
the night after judges against the promoted run (unchanged or inconclusive); the trend marks both."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from test_nightly import night

KNOBS = {"NVBENCH_REPEATS": "5", "NVBENCH_CONFIRM": "sequential", "NVBENCH_REPORT_ARGS": ""}


def nvbench(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def drilled(matrix, reports, run_id, pct):
    return night(matrix, reports, run_id, NVBENCH_RUN_ARGS=f"--fire-drill {pct}", **KNOBS)


def junit_counts(reports, run_id):
    root = ET.parse(reports / run_id / "report" / "junit.xml").getroot()
    return root.get("failures"), root.get("skipped"), root


@pytest.mark.slow
def test_a_regression_alarms_once_is_acknowledged_and_a_promoted_baseline_ends_it(tmp_path, tiny_matrix):
    matrix, reports = tiny_matrix(), tmp_path / "reports"
    first = night(matrix, reports, "night1", **KNOBS)
    assert first.returncode == 0, first.stderr
    (reports / "baselines").mkdir()
    (reports / "baselines" / "current").write_text("../night1\n")

    second = drilled(matrix, reports, "night2", 25)
    assert second.returncode == 1, second.stderr
    assert "NEW: resnet18-synthetic" in second.stderr and "new regression" in second.stderr
    assert junit_counts(reports, "night2")[:2] == ("1", "0")
    for run_id in ("night3", "night4"):
        later = drilled(matrix, reports, run_id, 25)
        assert later.returncode == 0, later.stderr
        assert "OPEN: resnet18-synthetic" in later.stderr and "open since night2" in later.stderr
        failures, skipped, root = junit_counts(reports, run_id)
        assert (failures, skipped) == ("0", "1") and "open since night2" in root.find(".//skipped").get("message")
        assert "**Still open (alarmed before; not failing again): 1**" in \
            (reports / run_id / "report" / "summary.md").read_text()
    worse = drilled(matrix, reports, "night4-50", 50)
    assert worse.returncode == 1 and "WORSE: resnet18-synthetic" in worse.stderr, worse.stderr

    ack = nvbench("ack", "backend=synthetic", "--reason", "rehearsal: accepted", "--reports", reports)
    assert ack.returncode == 0, ack.stderr
    for run_id, pct in (("night5", 25), ("night5-50", 50)):
        quiet = drilled(matrix, reports, run_id, pct)
        assert quiet.returncode == 0, quiet.stderr
        assert "ACKNOWLEDGED: resnet18-synthetic" in quiet.stderr and "rehearsal: accepted" in quiet.stderr
        assert "**Acknowledged" in (reports / run_id / "report" / "summary.md").read_text()

    refused = nvbench("baseline", "promote", reports / "night4", "--reason", "new normal", "--reports", reports)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1 and "a fire drill" in refused.stderr
    promoted = nvbench("baseline", "promote", reports / "night4", "--reason", "new normal", "--reports", reports,
                       "--allow-fire-drill")
    assert promoted.returncode == 0, promoted.stderr
    after = drilled(matrix, reports, "night6", 25)
    assert after.returncode in (0, 3), after.stderr
    verdicts = subprocess.run([sys.executable, "-c", "import pyarrow.parquet as pq, sys; print(pq.read_table("
                               "sys.argv[1]).column('verdict').to_pylist())", reports / "night6" / "report" /
                               "verdicts.parquet"], capture_output=True, text=True).stdout
    assert verdicts.strip() in ("['unchanged']", "['inconclusive']"), verdicts

    page = tmp_path / "trend"
    step = subprocess.run([sys.executable, "-m", "harness.orchestrate.nightly", "history", reports / "history", page,
                           "--matrix", matrix, "--reports", reports, "--no-ab", "test"], capture_output=True, text=True)
    assert step.returncode == 0, step.stderr
    html = (page / "history.html").read_text()
    assert 'class="mark promotion"' in html and 'class="mark ack"' in html and "baseline promoted: night4" in html
