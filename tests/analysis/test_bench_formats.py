"""`nvbench export --format github-action-benchmark | bencher` (issue 66) of a real run: each file read back as its
consumer documents it (github-action-benchmark's customBiggerIsBetter: a list of {name, unit, value, range?, extra?},
range and extra strings; Bencher Metric Format: {benchmark: {measure: {value, lower_value?, upper_value?}}}), one
entry per ok cell, and its numbers held against cells/ and work.parquet read with pyarrow and scipy alone."""

from __future__ import annotations

import json
import math
import statistics

import pyarrow.parquet as pq
import pytest
from conftest import nvbench
from scipy import stats

NUMBER = (int, float)
STEP_PHASES = {"data", "h2d", "forward", "backward", "optimizer", "other"}  # work.parquet's per-step phases


@pytest.fixture
def counted_run(tiny_matrix, tmp_path, quiet_machine):
    """Two repeats of a validated CPU cell (pytorch: a top-1) with one counted process, and a cell this machine
    skips (dali-gpu): a run with something to leave out."""
    matrix = tiny_matrix('backend = ["pytorch", "dali-gpu"]', repeats=2)
    run = tmp_path / "run"
    proc = nvbench("run", str(matrix), "--out", str(run), "--work-repeats", "1", "--no-progress", env=quiet_machine,
                   timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = pq.read_table(run / "cells").to_pylist()
    ok = {}
    for r in rows:
        if r["status"] == "ok" and r["is_steady"] is not False:
            ok.setdefault(r["cell_id"], []).append(r)
    assert len(ok) == 1 and {r["status"] for r in rows} == {"ok", "skipped"}, rows
    return run, ok, pq.read_table(run / "work.parquet").to_pylist()


def export(run, fmt, tmp_path):
    out = tmp_path / f"{fmt}.json"
    proc = nvbench("export", str(run), "--format", fmt, "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out) and f"{1} benchmark(s) in {fmt} format" in proc.stderr
    return json.loads(out.read_text())


def t_interval(values):
    n, mean = len(values), statistics.fmean(values)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def test_both_dashboards_formats_read_back_field_by_field(counted_run, tmp_path):
    run, ok, work = counted_run
    commit = json.loads((run / "manifest.json").read_text())["environment"]["nvbench_git_sha"]
    (cid, rows), = ok.items()
    mean, low, high = t_interval([r["throughput_img_per_s"] for r in rows])

    gab = export(run, "github-action-benchmark", tmp_path)
    assert isinstance(gab, list) and [e["name"] for e in gab] == [cid]  # one entry per ok cell; none for the skip
    for entry in gab:
        assert set(entry) <= {"name", "unit", "value", "range", "extra"} and {"name", "unit", "value"} <= set(entry)
        assert isinstance(entry["name"], str) and isinstance(entry["unit"], str)
        assert isinstance(entry["value"], NUMBER) and not isinstance(entry["value"], bool)
        assert isinstance(entry.get("range", ""), str) and isinstance(entry.get("extra", ""), str)
    entry = gab[0]
    assert entry["unit"] == "img/s" and entry["value"] == pytest.approx(mean, rel=1e-12)
    sign, half = entry["range"].split()
    assert sign == "±" and float(half) == pytest.approx((high - low) / 2, rel=1e-5)
    extra = dict(line.split("=", 1) for line in entry["extra"].splitlines())
    for axis in ("backend", "memory_format", "precision", "world_size", "grad_accum", "compile"):
        assert extra[axis] == str(rows[0][axis]), (axis, extra)
    assert extra["commit"].split()[0] == str(commit) and extra["repeats"] == str(len(rows))

    bmf = export(run, "bencher", tmp_path)
    assert isinstance(bmf, dict) and list(bmf) == [cid]
    for measures in bmf.values():
        for metric in measures.values():
            assert set(metric) <= {"value", "lower_value", "upper_value"} and "value" in metric
            assert all(isinstance(v, NUMBER) and not isinstance(v, bool) for v in metric.values())
            assert metric.get("lower_value", metric["value"]) <= metric["value"] <= metric.get("upper_value",
                                                                                                 metric["value"])
    measures = bmf[cid]
    assert set(measures) == {"throughput", "top1", "host_syncs", "op_calls", "allocations"}
    assert measures["throughput"]["value"] == pytest.approx(mean, rel=1e-12)
    assert (measures["throughput"]["lower_value"], measures["throughput"]["upper_value"]) == \
        (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))
    assert measures["top1"] == {"value": pytest.approx(statistics.fmean(r["top1"] for r in rows), rel=1e-12)}
    for counter in ("host_syncs", "op_calls", "allocations"):
        per_step = sum(r["per_step"] for r in work if r["cell_id"] == cid and r["counter"] == counter
                       and r["phase"] in STEP_PHASES and r["rank"] == 0)
        assert measures[counter] == {"value": per_step, "lower_value": per_step, "upper_value": per_step}, counter
    assert measures["op_calls"]["value"] > 0 and measures["allocations"]["value"] > 0
