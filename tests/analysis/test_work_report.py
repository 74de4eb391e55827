"""The work diff through the real CLI: `nvbench report B --baseline A` on hand-made run folders (real Parquet and
manifests, no cell runs) with a work.parquet each; the same timing, one more host sync per step on B. A gate on
host syncs fails the report (exit 1) naming the counter and the place, whatever the timing says; without the gate
the increase is reported and nothing fails; a folder without work.parquet says `no work counted`. And ci/nightly.sh
over such folders (its `nvbench run` a stub that copies one into place) fails on the gate and passes an A/A."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow.parquet as pq
from conftest import ROOT, TINY
from test_baselines import CELLS, cli, run_folder
from test_work_diff import SYNC, step

from harness.results.work import WORK_FILE

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
        from harness.results import store, work as work_file

        store.write_table(run / WORK_FILE, work_file.work_table([r | {"cell_id": CELL} for r in work]))
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


def night(tmp_path, baseline, tonight):
    """ci/nightly.sh judging `tonight` (a prepared run folder: `nvbench run` copies it into place, through a stub
    first on PATH; every other command is the real one) against `baseline`, no A/B."""
    tmp_path.mkdir()
    stub = tmp_path / "bin" / "nvbench"
    stub.parent.mkdir()
    stub.write_text('#!/usr/bin/env bash\nif [ "$1" = run ]; then\n  prev=""\n  for a in "$@"; do\n'
                    '    if [ "$a" = --dry-run ]; then echo "stub: no estimate"; exit 0; fi\n'
                    '    if [ "$prev" = --out ]; then out=$a; fi; prev=$a\n  done\n'
                    '  mkdir -p "$(dirname "$out")" && cp -r "$NIGHT_SRC" "$out"; exit 0\nfi\n'
                    f'exec {sys.executable} -m harness "$@"\n')
    stub.chmod(0o755)
    env = dict(os.environ, PATH=f"{stub.parent}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
                                f"{os.environ.get('PATH', '')}", NIGHT_SRC=str(tonight),
               NVBENCH_MATRIX=str(tmp_path / "none.toml"), NVBENCH_REPORTS=str(tmp_path / "reports"),
               NVBENCH_BASELINE=str(baseline), NVBENCH_RUN_ID="night1", NVBENCH_CONFIRM="sequential",
               NVBENCH_REPORT_ARGS="--fdr 0.05")
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.pop("GITHUB_OUTPUT", None)
    return subprocess.run(["bash", str(ROOT / "ci" / "nightly.sh")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)


def test_a_nightly_fails_on_a_broken_gate_from_one_counted_process_and_passes_an_a_a(tmp_path):
    a = folder(tmp_path / "a", tmp_path, judge=GATE, work=step(0))
    b = folder(tmp_path / "b", tmp_path, judge=GATE, work=step(0, **{f"optimizer|host_syncs|{SYNC}": 1}))
    proc = night(tmp_path / "n1", a, b)
    assert proc.returncode == 1, proc.stderr
    assert f"WORK GATE BROKEN: {CELL}: {BROKEN}" in proc.stderr and "a work gate is broken" in proc.stderr
    same = folder(tmp_path / "same", tmp_path, judge=GATE, work=step(0))
    proc = night(tmp_path / "n2", a, same)
    assert proc.returncode == 0, proc.stderr
    assert "WORK GATE" not in proc.stderr
