"""History is not fooled by a busy machine (issue 58): windows taken under interference are left out of a night's
points, and a night whose cell has fewer than half of its windows clean is busy for that cell: no point of its series
(neither a change point nor evidence against one), named busy on the page and in changes.md."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from test_history import CELL, MATRIX, run_cli, sha

from harness.analysis.nights import history
from harness.results import store
from harness.results.schema import cell_table

LEVELS = [1000.0] * 5 + [1300.0] * 3
"""A +30 % step at night 6 of 8."""


def write_busy_night(folder: Path, night: int, level: float, *, spoiled: int = 0, repeats: int = 5) -> Path:
    """A run folder of one cell: `repeats` windows around `level` (2 % noise), the first `spoiled` of them taken
    under interference at a quarter of the speed (other processes on 60-70 % of the cell's cores, seconds of it)."""
    rng = np.random.default_rng(night)
    run = folder / f"night{night:02d}"
    rows = []
    for r in range(repeats):
        busy = r < spoiled
        tput = level * math.exp(rng.normal(0, 0.02)) * (0.25 if busy else 1.0)
        rows.append({"run_id": run.name, "cell_id": CELL, "repeat": r, "status": "ok", "reason": "",
                     "backend": "synthetic", "memory_format": "nchw", "precision": "fp32", "world_size": 1,
                     "grad_accum": 1, "compile": "eager", "throughput_img_per_s": tput,
                     "fast_step_img_per_s": tput * 1.2, "exposed_data_wait_frac": 0.01, "top1": None,
                     "fire_drill_pct": 0.0, "foreign_cpu_frac": (0.6 + 0.05 * r) if busy else 0.01,
                     "foreign_cpu_s": 3.0 if busy else 0.01, "steal_frac": 0.0, "steal_s": 0.0})
    store.write_table(run / "cells" / "all.parquet", cell_table(rows))
    store.write_json(run / "manifest.json", {
        "run_id": run.name, "created_at": f"2026-01-{night:02d}T02:00:00+00:00", "matrix_text": MATRIX,
        "environment": {"nvbench_git_sha": sha(night), "nvbench_git_dirty": False, "hostname": "ci"}})
    return run


def test_the_step_at_night_6_is_the_only_change_and_nights_3_and_7_are_busy(tmp_path, capsys):
    folder = tmp_path / "history"
    for night, level in enumerate(LEVELS, start=1):
        write_busy_night(folder, night, level, spoiled=3 if night in (3, 7) else 1 if night == 4 else 0)
    code, _, err = run_cli(str(folder), "--out", str(tmp_path / "out"), capsys=capsys)
    assert code == 0, err
    changes = pq.read_table(tmp_path / "out" / "changes.parquet").to_pylist()
    assert [(c["metric"], c["kind"], c["night"]) for c in changes if c["metric"] == "throughput"] == [
        ("throughput", "step", 6)], changes
    assert all(c["night"] == 6 for c in changes), changes  # the fast-step rate steps there too, nothing else

    nights, _ = history.load_nights(folder)
    assert [i for i, n in enumerate(nights, start=1) if n.busy] == [3, 7]
    assert nights[2].busy[CELL] == {"windows": 5, "spoiled": 3, "share": [0.6, 0.7]}
    assert nights[2].cells[CELL]["points"] == {}  # no point that night
    # night 4: one window of five spoiled, left out of its point; the night stands on its four clean windows
    assert not nights[3].busy and nights[3].cells[CELL]["points"]["throughput_img_per_s"][3] == 4

    said = f"{CELL} (3 of 5 windows under interference, others 60%-70% of its cores)"
    md = (tmp_path / "out" / "changes.md").read_text()
    assert "**Busy nights**" in md and f"- night 3 (night03): busy: {said}" in md.replace("\\_", "_")
    assert f"- night 7 (night07): busy: {said}" in md.replace("\\_", "_")
    page = (tmp_path / "out" / "history.html").read_text()
    assert page.count('<tr class="busy">') == 2 and f"busy: {said}" in page
