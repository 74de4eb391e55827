"""The work diff through the real CLI: `nvbench report B --baseline A` on hand-made run folders (real Parquet and
manifests, no cell runs) with a work.parquet each; the same timing, one more host sync per step on B. A gate on
host syncs fails the report (exit 1) naming the counter and the place, whatever the timing says; without the gate
the increase is reported and nothing fails; a folder without work.parquet says `no work counted`."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import TINY
from test_baselines import CELLS, cli, run_folder
from test_work_diff import SYNC, step

from harness.analysis.work_report import WORK_FILE

CELL = CELLS["synthetic"]
GATE = '[judge.work_gates]\nhost_syncs = "no-rise"\n'
BROKEN = f'work gate host_syncs = "no-rise" broken: optimizer +1 host sync per step ({SYNC})'
FLAGS = ("--fail-on-regression", "--fdr", "0.05", "--no-fast-steps")
"""As tests/analysis/test_baselines.py judges such folders: two equal sides read `unchanged` at five repeats."""


def folder(path, tmp_path, *, judge="", work=None):
    text = TINY.format(axes='backend = ["synthetic"]', repeats=5, timeout=60, cache=tmp_path, nvtx="false",
                       device="cpu") + judge
    run = run_folder(path, matrix_text=text)
    if work is not None:
        schema = pa.schema([("cell_id", pa.string()), ("process", pa.int64()), ("rank", pa.int64()),
                            ("device", pa.string()), ("phase", pa.string()), ("counter", pa.string()),
                            ("key", pa.string()), ("count", pa.int64()), ("steps", pa.int64()),
                            ("per_step", pa.float64())])
        pq.write_table(pa.Table.from_pylist([r | {"cell_id": CELL} for r in work], schema=schema), run / WORK_FILE)
    return run


def report(base, cand, out):
    proc = cli("report", cand, "--baseline", base, "--out", out, *FLAGS)
    verdict = pq.read_table(out / "verdicts.parquet").to_pylist()[0]
    return proc, verdict


def test_a_broken_host_sync_gate_fails_the_report_whatever_the_timing_and_says_where(tmp_path):
    a = folder(tmp_path / "a", tmp_path, judge=GATE, work=step(0))
    b = folder(tmp_path / "b", tmp_path, judge=GATE, work=step(0, **{f"optimizer|host_syncs|{SYNC}": 1}))
    proc, v = report(a, b, tmp_path / "out")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"WORK GATE BROKEN: {CELL}: {BROKEN}" in proc.stdout
    assert v["verdict"] == "unchanged"  # the timing: the same; the gate fails it all the same
    assert (v["work"], v["work_changed"], v["work_gate"]) == (
        f"work changed: optimizer +1 host sync per step ({SYNC})", True, BROKEN)
    assert v["reason"].endswith(f"; work changed: optimizer +1 host sync per step ({SYNC}); {BROKEN}")
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "**Work gates broken**" in summary and "optimizer +1 host sync per step" in summary
    assert "no confirmed regression, but 1 cell(s) broke a work gate" in summary
    failure = ET.parse(tmp_path / "out" / "junit.xml").getroot().find(".//failure")
    assert failure is not None and failure.get("type") == "work-gate" and failure.get("message") == BROKEN
    page = (tmp_path / "out" / "report.html").read_text()
    assert f'id="work-{CELL}"' in page and page.index(f'id="work-{CELL}"') < page.index('id="cells"')


def test_an_a_a_is_work_same_and_passes_with_the_gate(tmp_path):
    a = folder(tmp_path / "a", tmp_path, judge=GATE, work=step(0) + step(1))
    b = folder(tmp_path / "b", tmp_path, judge=GATE, work=step(0) + step(1))
    proc, v = report(a, b, tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (v["verdict"], v["work"], v["work_changed"], v["work_gate"]) == ("unchanged", "work: same", False, None)
    assert "WORK GATE" not in proc.stdout


def test_an_increase_not_gated_is_reported_never_failed(tmp_path):
    a = folder(tmp_path / "a", tmp_path, work=step(0))
    b = folder(tmp_path / "b", tmp_path, work=step(0, **{f"optimizer|host_syncs|{SYNC}": 1}))
    proc, v = report(a, b, tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (v["work_changed"], v["work_gate"]) == (True, None)


def test_a_baseline_without_work_is_no_work_counted_and_without_any_nothing_is_said(tmp_path):
    a = folder(tmp_path / "a", tmp_path, judge=GATE)
    b = folder(tmp_path / "b", tmp_path, judge=GATE, work=step(0))
    proc, v = report(a, b, tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (v["work"], v["work_changed"], v["work_gate"]) == (
        "work: no work counted (no counted process on A)", None, None)
    assert v["reason"].endswith('; work gate host_syncs = "no-rise": cannot tell (no work counted)')
    plain = folder(tmp_path / "plain", tmp_path)
    proc, v = report(a, plain, tmp_path / "out2")
    assert proc.returncode == 0 and (v["work"], v["work_changed"], v["work_gate"]) == (None, None, None)
    assert "work" not in v["reason"]
