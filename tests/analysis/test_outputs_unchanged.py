"""What `nvbench report` writes of a fixed pair of runs stays what it was (issue 60: moving the analysis into rooms
and taking data out of free text changed no output): summary.md, report.html and verdicts.parquet of two
constructed run folders (three cells, eight repeats a side: one slower by a fifth, one unchanged, one that cannot
tell) against the files in tests/analysis/golden/. Exact: the rows are given, the comparison's resampling is
seeded. A deliberate change of an output is written anew with NVBENCH_WRITE_GOLDEN=1 and reviewed as a diff."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.analysis.product.pipeline import make_report
from harness.results import store
from harness.results.schema import cell_table

GOLDEN = Path(__file__).resolve().parent / "golden"
WRITTEN = re.compile(r"Written \d{4}-\d\d-\d\d \d\d:\d\d UTC\.")
"""When the page was written: the one thing of it that the runs do not decide."""
ENV = {"device_kind": "cpu", "cpu_model": "a constructed CPU", "torch_version": "2.13.0", "python_version": "3.11.7",
       "hostname": "golden", "nvbench_version": "0.1.0", "nvbench_git_sha": "0123456789abcdef0123456789abcdef01234567",
       "nvbench_git_dirty": False}
BASE = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.4]
CELLS = {  # cell id -> throughput of the baseline's repeats and the candidate's
    "synthetic_nchw_fp32_ws1_ga1_0123456789": (BASE, [0.8 * x for x in BASE]),
    "synthetic_nhwc_fp32_ws1_ga1_0123456789": (BASE, [x + 0.1 for x in reversed(BASE)]),
    "pytorch_nchw_fp32_ws1_ga1_0123456789": ([100.0, 110.0, 90.0, 105.0, 95.0, 108.0, 92.0, 100.0],
                                             [96.0, 112.0, 85.0, 104.0, 91.0, 107.0, 88.0, 99.0]),
}


def run_folder(root: Path, run_id: str, side: int) -> Path:
    rows = []
    for cell_id, values in CELLS.items():
        backend, memory_format = cell_id.split("_")[:2]
        for repeat, value in enumerate(values[side]):
            rows.append({"run_id": run_id, "cell_id": cell_id, "cell_label": cell_id[:-11], "repeat": repeat,
                         "status": "ok", "reason": "",
                         "backend": backend, "memory_format": memory_format, "precision": "fp32", "world_size": 1,
                         "grad_accum": 1, "compile": "eager", "model": "resnet18", "device": "cpu",
                         "throughput_img_per_s": value, "env_key": "k1", "is_smoke": False, "is_steady": True,
                         "fire_drill_pct": 0.0, "duration_s": 10.0, "window_s": 5.0, "foreign_cpu_frac": 0.0,
                         "steal_frac": 0.0, "foreign_cpu_s": 0.0, "steal_s": 0.0})
    folder = root / run_id
    store.write_table(folder / "cells" / "all.parquet", cell_table(rows))
    store.write_json(folder / "manifest.json", {"run_id": run_id, "created_at": f"2026-11-2{side}T03:00:00+00:00",
                                                "environment": ENV})
    return folder


def outputs(tmp_path: Path) -> dict[str, str]:
    """The report's files, as text with the machine's paths taken out (verdicts.parquet as its rows and version)."""
    a, b = run_folder(tmp_path, "night-a", 0), run_folder(tmp_path, "night-b", 1)
    out = make_report(b, baseline=a, out_dir=tmp_path / "report").out_dir
    table = pq.read_table(out / "verdicts.parquet")
    verdicts = {"version": table.schema.metadata[b"nvbench.verdicts_version"].decode(), "rows": table.to_pylist()}
    texts = {"summary.md": (out / "summary.md").read_text(), "report.html": (out / "report.html").read_text(),
             "verdicts.json": json.dumps(verdicts, indent=1, sort_keys=True, default=str) + "\n"}
    return {name: WRITTEN.sub("Written <when>.", text.replace(str(tmp_path), "<tmp>")) for name, text in texts.items()}


def test_the_reports_outputs_of_a_fixed_pair_of_runs_are_what_they_were(tmp_path):
    got = outputs(tmp_path)
    if os.environ.get("NVBENCH_WRITE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        for name, text in got.items():
            (GOLDEN / name).write_text(text)
        pytest.skip("golden files written: review their diff")
    for name, text in got.items():
        assert text == (GOLDEN / name).read_text(), f"{name} changed (NVBENCH_WRITE_GOLDEN=1 writes it anew)"


def test_the_golden_pair_says_what_it_was_built_to_say(tmp_path):
    """The fixture is not vacuous: one cell regressed, one unchanged, one undecided."""
    rows = json.loads(outputs(tmp_path)["verdicts.json"])["rows"]
    assert sorted(r["verdict"] for r in rows) == ["inconclusive", "regression", "unchanged"]
