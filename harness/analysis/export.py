"""A run's cells in formats other tools read. `pytest-benchmark`: pytest-benchmark's saved JSON (its
`--benchmark-json` layout, format version 5), one benchmark per cell with images per second as `ops` and
the measured step times (rank 0, every ok repeat, warmup left out) as the timing stats, so dashboards that
read that file (github-action-benchmark's `pytest` tool, `pytest-benchmark compare`) take it unchanged.
"""

from __future__ import annotations

import json
import math
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from harness import __version__
from harness.analysis.runs import RunData, RunInputError, load_run
from harness.matrix.sections import AXES
from harness.catalogue import col

FORMATS = ("pytest-benchmark",)
PYTEST_BENCHMARK_VERSION = "5.1.0"
"""The pytest-benchmark release whose file layout this writes (what its `version` field says)."""


def _step_times(run: RunData) -> dict[str, list[float]]:
    """cell_id -> measured step times of rank 0 over the ok repeats, from the run's steps/ (empty if none)."""
    from harness.results import store

    try:
        steps = store.read_steps(Path(run.path))
    except store.UnreadableFile as exc:
        raise RunInputError([str(exc)]) from None
    ok = {(r[col.cell_id], r["repeat"]) for r in run.rows if r["status"] == "ok"}
    out: dict[str, list[float]] = {}
    for row in steps.select([col.cell_id, "repeat", "rank", col.is_warmup, col.step_time_s]).to_pylist():
        if row["rank"] == 0 and not row[col.is_warmup] and (row[col.cell_id], row["repeat"]) in ok \
                and row[col.step_time_s] is not None:
            out.setdefault(row[col.cell_id], []).append(float(row[col.step_time_s]))
    return out


def _quartiles(x: Sequence[float]) -> tuple[float, float]:
    """Q1 and Q3 of sorted `x`: the medians of the halves for an even count, Wikipedia's "method 3"
    (weighted between neighbours) for an odd one, as pytest-benchmark computes them."""
    n = len(x)
    if n == 1:
        return x[0], x[0]
    if n % 2 == 0:
        return statistics.median(x[: n // 2]), statistics.median(x[n // 2:])
    k, r = divmod(n, 4)
    if r == 1:
        return 0.25 * x[k - 1] + 0.75 * x[k], 0.75 * x[3 * k] + 0.25 * x[3 * k + 1]
    return 0.75 * x[k] + 0.25 * x[k + 1], 0.25 * x[3 * k + 1] + 0.75 * x[3 * k + 2]


def timing_stats(data: Sequence[float], ops: float) -> dict[str, Any]:
    """pytest-benchmark's stats of `data` (seconds) by its definitions (quartiles: _quartiles; outliers beyond
    1.5 IQR and beyond one standard deviation), with `ops` given (here: images per second, not 1 / mean)."""
    x = sorted(data)
    n = len(x)
    mean = statistics.fmean(x)
    stddev = statistics.stdev(x) if n > 1 else 0.0
    q1, q3 = _quartiles(x)
    iqr = q3 - q1
    low = next(v for v in x if v >= q1 - 1.5 * iqr)
    high = next(v for v in reversed(x) if v <= q3 + 1.5 * iqr)
    iqr_outliers = sum(v < q1 - 1.5 * iqr or v > q3 + 1.5 * iqr for v in x)
    std_outliers = sum(v < mean - stddev or v > mean + stddev for v in x)
    return {"min": x[0], "max": x[-1], "mean": mean, "stddev": stddev, "rounds": n, "median": statistics.median(x),
            "iqr": iqr, "q1": q1, "q3": q3, "iqr_outliers": iqr_outliers, "stddev_outliers": std_outliers,
            "outliers": f"{std_outliers};{iqr_outliers}", "ld15iqr": low, "hd15iqr": high, "ops": ops,
            "total": math.fsum(x), "data": list(data), "iterations": 1}


def _benchmark(run: RunData, cell_id: str, rows: Sequence[Mapping[str, Any]], times: Sequence[float]) -> dict[str, Any]:
    tput = [float(r[col.throughput_img_per_s]) for r in rows]
    params = {axis: rows[0].get(axis) for axis in AXES}
    if not times:  # no steps/: each repeat's mean step time stands in for its steps
        times = [float(r[col.step_time_mean_s]) for r in rows if r.get(col.step_time_mean_s)]
    top1 = [float(r["top1"]) for r in rows if r.get("top1") is not None]
    return {
        "group": run.run_id, "name": cell_id, "fullname": f"nvbench::{run.run_id}::{cell_id}",
        "params": params, "param": cell_id,
        "extra_info": {"unit": "img/s", "ops_is": "throughput_img_per_s: mean over the ok repeats",
                       "num_repeats": len(rows), "throughput_cv": float(np.std(tput, ddof=1) / np.mean(tput))
                       if len(tput) > 1 else None, "top1": statistics.fmean(top1) if top1 else None,
                       col.images_per_step: rows[0].get(col.images_per_step), "device": rows[0].get("device"),
                       col.fire_drill_pct: max(float(r.get(col.fire_drill_pct) or 0.0) for r in rows),
                       col.is_smoke: bool(rows[0].get(col.is_smoke)), col.run_id: run.run_id},
        "options": {"disable_gc": False, "timer": "nvbench step clock", "min_rounds": 1, "max_time": None,
                    "min_time": None, "warmup": False},
        "stats": timing_stats(times, statistics.fmean(tput)),
    }


def pytest_benchmark_json(run: RunData) -> dict[str, Any]:
    """The run as a pytest-benchmark JSON document; cells without an ok repeat are left out."""
    env = run.environment
    cells: dict[str, list[Mapping[str, Any]]] = {}
    for row in run.rows:
        if row["status"] == "ok" and (row.get(col.throughput_img_per_s) or 0) > 0:
            cells.setdefault(row[col.cell_id], []).append(row)
    times = _step_times(run)
    benchmarks = [_benchmark(run, cid, rows, times.get(cid, [])) for cid, rows in sorted(cells.items())]
    benchmarks = [b for b in benchmarks if b["stats"]["rounds"]]
    return {
        "machine_info": {"node": env.get("hostname"), "processor": env.get("cpu_model"), "machine": env.get("device_kind"),
                         "python_version": env.get("python_version"), "system": env.get("os"),
                         "gpu": env.get("gpu_name"), "torch_version": env.get("torch_version"),
                         "cpu": {"brand_raw": env.get("cpu_model"), "count": env.get("cpu_count")}},
        "commit_info": {"id": env.get("nvbench_git_sha"), "dirty": env.get("nvbench_git_dirty"),
                        "project": "nvbench", "time": run.created_at},
        "benchmarks": benchmarks,
        "datetime": run.created_at or datetime.now(timezone.utc).isoformat(),
        "version": PYTEST_BENCHMARK_VERSION,
        col.nvbench_version: __version__,
    }


def export_run(run_dir: Path, fmt: str, out: Path) -> int:
    """Write `run_dir` in `fmt` to `out` (atomically); the number of benchmarks written."""
    from harness.results import store

    if fmt not in FORMATS:
        raise RunInputError([f"--format {fmt}: unknown (choose from {', '.join(FORMATS)})"])
    doc = pytest_benchmark_json(load_run(run_dir))
    if not doc["benchmarks"]:
        raise RunInputError([f"{run_dir}: no cell with an ok repeat: nothing to export"])
    store.write_bytes(out, (json.dumps(doc, indent=2, default=str) + "\n").encode())
    return len(doc["benchmarks"])
