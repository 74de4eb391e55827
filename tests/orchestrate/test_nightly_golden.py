"""The nightly's words, exactly: two constructed nights (hand-made run folders, real Parquet and manifests, no cell
runs: `nvbench run` is a stub first on PATH that copies the night's folder into place; every other command is the
real one) through ci/nightly.sh and through `nvbench nightly`. Night 1 has no baseline: it describes the run and
joins the history. Night 2 is judged against night 1, promoted: one cell 20 % slower, confirmed sequentially (no
A/B), a new alarm, exit 1. Each night's stdout, its stderr and its summary.md must equal the files under
tests/orchestrate/golden/nightly/ line for line (the temporary folder written as <tmp>); a changed line fails.
NVBENCH_UPDATE_GOLDEN=1 writes them anew, to be read and committed by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from harness.catalogue import col
from harness.results import store
from harness.results.schema import cell_table

GOLDEN = Path(__file__).parent / "golden" / "nightly"
SHA = "0123456789abcdef0123456789abcdef01234567"
CELLS = {"synthetic": "resnet18-synthetic-nchw-fp32-ws1-ga1-eager",
         "pytorch": "resnet18-pytorch-nchw-fp32-ws1-ga1-eager"}
STUB = """#!/usr/bin/env bash
if [ "$1" = run ]; then
  prev=""
  for a in "$@"; do
    if [ "$a" = --dry-run ]; then echo "stub: no estimate"; exit 0; fi
    if [ "$prev" = --out ]; then out=$a; fi; prev=$a
  done
  mkdir -p "$(dirname "$out")" && cp -r "$NIGHT_SRC" "$out"; exit 0
fi
exec {python} -m harness "$@"
"""
VIA = {"script": ["bash", str(ROOT / "ci" / "nightly.sh")], "command": ["nvbench", "nightly"]}


def constructed_run(path: Path, levels: dict[str, float]) -> Path:
    """A finished run of 5 repeats a cell at the given throughputs (a fixed +-0.4 % spread), as nvbench run writes
    it: its rows, its manifest (a clean commit, a fixed date)."""
    rows = [{col.run_id: path.name, col.cell_id: CELLS[b], "model": "resnet18", "backend": b, "memory_format": "nchw",
             "precision": "fp32", "world_size": 1, "grad_accum": 1, "compile": "eager", "repeat": r, "status": "ok",
             "reason": "", "is_smoke": False, "fire_drill_pct": 0.0, col.env_key: "k",
             col.throughput_img_per_s: level * (1 + 0.002 * ((r * 7 + i) % 5 - 2))}
            for i, (b, level) in enumerate(levels.items()) for r in range(5)]
    store.write_table(path / "cells" / "all.parquet", cell_table(rows))
    store.write_json(path / "manifest.json", {
        col.run_id: path.name, "created_at": f"2026-11-2{len(path.name)}T02:00:00+00:00", "matrix_text": "",
        "environment": {"nvbench_git_sha": SHA, "nvbench_git_dirty": False, "hostname": "ci"}})
    return path


def one_night(tmp: Path, via: str, run_id: str, source: Path) -> subprocess.CompletedProcess:
    bin_dir = tmp / "bin"
    if not bin_dir.is_dir():
        bin_dir.mkdir()
        (bin_dir / "nvbench").write_text(STUB.format(python=sys.executable))
        (bin_dir / "nvbench").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVBENCH_", "GITHUB_"))}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "NIGHT_SRC": str(source), "NVBENCH_MATRIX": "none.toml", "NVBENCH_REPORTS": "reports",
            "NVBENCH_RUN_ID": run_id, "NVBENCH_CONFIRM": "sequential", "NVBENCH_BISECT": "off",
            "NVBENCH_REPORT_ARGS": "--fdr 0.05", "COLUMNS": "120"}
    return subprocess.run(VIA[via], capture_output=True, text=True, env=env, cwd=tmp, timeout=300)


def said(tmp: Path, proc: subprocess.CompletedProcess, run_id: str) -> dict[str, str]:
    summary = (tmp / "reports" / run_id / "report" / "summary.md").read_text()
    return {name: text.replace(str(tmp), "<tmp>") for name, text in
            (("stdout", proc.stdout), ("stderr", proc.stderr), ("summary.md", summary))}


def differences(run_id: str, got: dict[str, str]) -> list[str]:
    """Each line that differs from the golden file, as 'file:line: expected | got'."""
    found = []
    for name, text in got.items():
        path = GOLDEN / f"{run_id}.{name}"
        if os.environ.get("NVBENCH_UPDATE_GOLDEN") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        want, have = path.read_text().splitlines(), text.splitlines()
        found += [f"{path.name}:{k + 1}: {w!r} | {h!r}" for k, (w, h) in enumerate(zip(want, have)) if w != h]
        if len(want) != len(have):
            found.append(f"{path.name}: {len(want)} lines expected, {len(have)} written")
    return found


@pytest.mark.parametrize("via", VIA)
def test_two_constructed_nights_say_exactly_the_golden_words(tmp_path, via):
    nights = tmp_path / "nights"
    first = constructed_run(nights / "night1", {"synthetic": 100.0, "pytorch": 50.0})
    second = constructed_run(nights / "night2", {"synthetic": 80.0, "pytorch": 50.0})

    proc = one_night(tmp_path, via, "night1", first)
    assert proc.returncode == 0, proc.stderr
    problems = differences("night1", said(tmp_path, proc, "night1"))

    (tmp_path / "reports" / "baselines").mkdir()
    (tmp_path / "reports" / "baselines" / "current").write_text("# promoted by the test\n../night1\n")
    proc = one_night(tmp_path, via, "night2", second)
    assert proc.returncode == 1, proc.stderr
    problems += differences("night2", said(tmp_path, proc, "night2"))
    assert problems == [], "\n".join(problems)
