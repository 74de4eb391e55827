"""A run's cells in formats other tools read, each over the repeats a verdict uses. `pytest-benchmark`: its saved
JSON (format version 5), one benchmark per cell named and grouped by cell id, seconds per image of each measured step
as the rounds (so `ops`, 1 / mean, is images per second); `pytest-benchmark compare` reads it as its own files.
`github-action-benchmark`: its `customBiggerIsBetter` JSON, one entry per cell: img/s, its interval as `range`, the
cell's axes and commit as `extra`. `bencher`: Bencher Metric Format, per cell throughput with its interval, top-1,
and the counted work per step (host_syncs, op_calls, allocations) where work.parquet counted the cell."""

from __future__ import annotations

import json
import math
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from harness import __version__
from harness.analysis.judge.repeats import axes_of, by_cell, usable_rows
from harness.analysis.load.runs import RunInputError, load_run, read_work_table
from harness.analysis.judge.run import RunData
from harness.analysis.judge.verdict import Thresholds
from harness.catalogue import col
from harness.catalogue.work import ALLOCATIONS, HOST_SYNCS, OP_CALLS
from harness.catalogue.work_gates import COUNTED_STEP_PHASES
from harness.stats.inference import mean_interval

FORMATS = ("pytest-benchmark", "github-action-benchmark", "bencher")
PYTEST_BENCHMARK_VERSION = "5.1.0"
"""The pytest-benchmark release whose file layout this writes (what its `version` field says)."""


def _seconds_per_image(run: RunData, kept: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, list[float]]:
    """cell_id -> rank 0's measured step times over the kept repeats' steps, each divided by the images of the
    step (all processes'): seconds per image, whose 1 / mean is images per second. Empty for a cell without
    steps/. read_steps leaves out a superseded attempt's steps."""
    from harness.results import store

    try:
        steps = store.read_steps(Path(run.path))
    except store.UnreadableFile as exc:
        raise RunInputError([str(exc)]) from None
    images = {(r[col.cell_id], r["repeat"]): r.get(col.images_per_step) for rows in kept.values() for r in rows}
    out: dict[str, list[float]] = {}
    for row in steps.select([col.cell_id, "repeat", "rank", col.is_warmup, col.step_time_s]).to_pylist():
        per_step = images.get((row[col.cell_id], row["repeat"]))
        if row["rank"] == 0 and not row[col.is_warmup] and per_step and row[col.step_time_s] is not None:
            out.setdefault(row[col.cell_id], []).append(float(row[col.step_time_s]) / per_step)
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


def timing_stats(data: Sequence[float]) -> dict[str, Any]:
    """pytest-benchmark's stats of `data` (seconds) by its definitions (quartiles: _quartiles; outliers beyond
    1.5 IQR and beyond one standard deviation; ops = 1 / mean)."""
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
            "outliers": f"{std_outliers};{iqr_outliers}", "ld15iqr": low, "hd15iqr": high, "ops": 1 / mean,
            "total": math.fsum(x), "data": list(data), "iterations": 1}


STATISTIC = ("seconds per image: each measured step's time (rank 0; the step clock: CUDA events on GPU) divided by "
             "the images of the step, all processes'; a round is one step of a repeat a verdict uses")
OPS = "1 / mean: images per second by the step clock (throughput_img_per_s, over the whole window, is beside it)"


def _benchmark(run: RunData, cell_id: str, rows: Sequence[Mapping[str, Any]], times: Sequence[float]) -> dict[str, Any]:
    """One cell as a benchmark named and grouped by its cell id alone, so `pytest-benchmark compare` of two runs'
    exports puts the cell's runs side by side in one table."""
    tput = [float(r[col.throughput_img_per_s]) for r in rows]
    if not times:  # no steps/: each repeat's mean step time stands in for its steps
        times = [float(r[col.step_time_mean_s]) / r[col.images_per_step] for r in rows
                 if r.get(col.step_time_mean_s) and r.get(col.images_per_step)]
    top1 = [float(r["top1"]) for r in rows if r.get("top1") is not None]
    return {
        "group": cell_id, "name": cell_id, "fullname": f"nvbench::{cell_id}", "params": axes_of(rows),
        "param": cell_id,
        "extra_info": {"unit": "s/img", "statistic": STATISTIC, "ops_is": OPS, "num_repeats": len(rows),
                       "repeats": [r["repeat"] for r in rows],
                       col.throughput_img_per_s: statistics.fmean(tput), "throughput_cv": float(np.std(tput, ddof=1)
                       / np.mean(tput)) if len(tput) > 1 else None, "top1": statistics.fmean(top1) if top1 else None,
                       col.images_per_step: rows[0].get(col.images_per_step), "device": rows[0].get("device"),
                       col.fire_drill_pct: max(float(r.get(col.fire_drill_pct) or 0.0) for r in rows),
                       col.is_smoke: bool(rows[0].get(col.is_smoke)), col.run_id: run.run_id},
        "options": {"disable_gc": False, "timer": "nvbench step clock", "min_rounds": 1, "max_time": None,
                    "min_time": None, "warmup": False},
        "stats": timing_stats(times) if times else {"rounds": 0},
    }


def verdict_rows(run: RunData) -> dict[str, list[Mapping[str, Any]]]:
    """cell_id -> the repeats a verdict on the run uses (analysis.judge.repeats.usable_rows at the report's default
    thresholds: ok, a throughput, steady where unsteady ones are left out); superseded, failed and profiled
    repeats never are."""
    th = Thresholds()
    out = {cid: usable_rows([r for r in rows if not r.get(col.profile_tool)], th)
           for cid, rows in by_cell(run.rows).items()}
    return {cid: rows for cid, rows in sorted(out.items()) if rows}


def pytest_benchmark_json(run: RunData) -> dict[str, Any]:
    """The run as a pytest-benchmark JSON document; cells without a repeat a verdict uses are left out."""
    env = run.environment
    cells = verdict_rows(run)
    times = _seconds_per_image(run, cells)
    benchmarks = [_benchmark(run, cid, rows, times.get(cid, [])) for cid, rows in cells.items()]
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


# ---------------------------------------------------------------------------------------------
# the formats of CI dashboards: github-action-benchmark, Bencher

THROUGHPUT_UNIT = "img/s"
WORK_MEASURES = (HOST_SYNCS, OP_CALLS, ALLOCATIONS)
"""The counted work a Bencher export carries per cell, each summed over a step's phases."""


def throughput_interval(rows: Sequence[Mapping[str, Any]]) -> tuple[float, float | None, float | None]:
    """(mean img/s, low, high) of a cell's repeats: several, the 95 % t interval of their mean (what a rerun would
    move); one, its window's own interval (batch means over its steps); None where there is none."""
    values = [float(r[col.throughput_img_per_s]) for r in rows]
    if len(values) > 1:
        ci = mean_interval(values)
        return ci.estimate, ci.low, ci.high
    low, high = rows[0].get(col.throughput_ci_low_img_per_s), rows[0].get(col.throughput_ci_high_img_per_s)
    finite = low is not None and high is not None and math.isfinite(low) and math.isfinite(high)
    return values[0], (float(low) if finite else None), (float(high) if finite else None)


def _commit(run: RunData) -> str:
    sha = run.environment.get("nvbench_git_sha")
    return (sha or "none") + (" (dirty)" if sha and run.environment.get("nvbench_git_dirty") else "")


def github_action_benchmark_json(run: RunData) -> list[dict[str, Any]]:
    """github-action-benchmark's `customBiggerIsBetter` input: per cell {name, unit, value, range, extra}, `range`
    the interval's half-width ("± 12.3"; left out where there is none), `extra` the axes and the commit, a line
    each (the tooltip of its chart)."""
    out = []
    for cid, rows in verdict_rows(run).items():
        value, low, high = throughput_interval(rows)
        extra = [f"{axis}={v}" for axis, v in axes_of(rows).items() if v is not None]
        extra += [f"commit={_commit(run)}", f"repeats={len(rows)}", f"{col.run_id}={run.run_id}"]
        entry = {"name": cid, "unit": THROUGHPUT_UNIT, "value": value}
        if low is not None and high is not None:
            entry["range"] = f"± {(high - low) / 2:.6g}"
        out.append({**entry, "extra": "\n".join(extra)})
    return out


def _measure(value: float, low: float | None = None, high: float | None = None) -> dict[str, float]:
    return {"value": value, **({"lower_value": low, "upper_value": high} if low is not None and high is not None
                               else {})}


def step_work(work_rows: Sequence[Mapping[str, Any]], cell_id: str, counter: str) -> list[float]:
    """Per counted process of the cell, rank 0's `counter` per step, summed over a step's phases (COUNTED_STEP_PHASES;
    a phase without a row counted zero); [] where no process of the cell was counted."""
    totals: dict[int, float] = {}
    for r in work_rows:
        if r[col.cell_id] == cell_id and r[col.rank] == 0:
            totals.setdefault(r[col.process], 0.0)
            if r[col.counter] == counter and r[col.phase] in COUNTED_STEP_PHASES:
                totals[r[col.process]] += float(r[col.per_step])
    return [totals[p] for p in sorted(totals)]


def bencher_json(run: RunData, work_rows: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """Bencher Metric Format: {cell id: {measure: {value, lower_value, upper_value}}}. Measures: `throughput` (img/s,
    its interval as bounds), `top1` (the mean over the repeats, where validated), and where the cell's work was
    counted host_syncs, op_calls and allocations per step (one counted process: its count; several: their mean,
    bounded by the least and the most)."""
    out: dict[str, Any] = {}
    for cid, rows in verdict_rows(run).items():
        measures = {"throughput": _measure(*throughput_interval(rows))}
        top1 = [float(r["top1"]) for r in rows if r.get("top1") is not None]
        if top1:
            measures["top1"] = _measure(statistics.fmean(top1))
        for counter in WORK_MEASURES:
            if counted := step_work(work_rows or (), cid, counter):
                measures[counter] = _measure(statistics.fmean(counted), min(counted), max(counted))
        out[cid] = measures
    return out


def export_run(run_dir: Path, fmt: str, out: Path) -> int:
    """Write `run_dir` in `fmt` to `out` (atomically); the number of benchmarks (cells) written."""
    from harness.results import store

    if fmt not in FORMATS:
        raise RunInputError([f"--format {fmt}: unknown (choose from {', '.join(FORMATS)})"])
    run = load_run(run_dir)
    if fmt == "github-action-benchmark":
        doc: Any = github_action_benchmark_json(run)
    elif fmt == "bencher":
        try:
            doc = bencher_json(run, read_work_table(Path(run_dir)))
        except store.UnreadableFile as exc:
            raise RunInputError([str(exc)]) from None
    else:
        doc = pytest_benchmark_json(run)
    count = len(doc["benchmarks"] if fmt == "pytest-benchmark" else doc)
    if not count:
        raise RunInputError([f"{run_dir}: no cell with a repeat a verdict uses (ok, steady): nothing to export"])
    store.write_bytes(out, (json.dumps(doc, indent=2, default=str) + "\n").encode())
    return count
