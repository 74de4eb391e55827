"""Energy judged: each repeat's img_per_joule comes from NVML's energy counter (a fake NVML, as the telemetry tests
use) through the sampler's own summary, and an A/B whose B side draws 10 % more energy per image is an `energy`
regression with its interval, in the verdict, verdicts.parquet, the report's change text and the console; an A/A
is not."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_telemetry import FakeNvml, run_window

from harness.analysis.judge import compare
from harness.analysis.load import verdicts_file
from harness.analysis.pages import wording
from harness.analysis.pages.ci_formats import verdict_lines
from harness.analysis.judge.run import RunData
from harness.analysis.judge.verdict import INCONCLUSIVE, REGRESSION, UNCHANGED
from harness.catalogue import col
from harness.results import store

CELL = "synthetic_nchw_fp32_ws1_ga1_0123456789"
IMAGES = 2000
JOULES_PER_IMAGE = 0.5


def side(rng: np.random.Generator, *, joules_per_image: float, repeats: int = 8) -> list[dict]:
    """One side's rows: throughput from one distribution on both sides, energy from the counter's two reads
    around each repeat's window (1 % noise between repeats)."""
    rows = []
    for repeat in range(repeats):
        joules = IMAGES * joules_per_image * (1 + 0.01 * rng.standard_normal())
        start_mj = 5_000_000 + 1_000 * repeat
        telemetry = run_window(FakeNvml(energy_mj=(start_mj, start_mj + round(joules * 1000)))).as_row(IMAGES)
        rows.append({"cell_id": CELL, "repeat": repeat, "status": "ok", "backend": "synthetic",
                     "memory_format": "nchw", "precision": "fp32", "world_size": 1, "grad_accum": 1,
                     "compile": "eager", "env_key": "k", "is_smoke": False, "is_steady": True, "fire_drill_pct": 0.0,
                     col.throughput_img_per_s: 1000 * (1 + 0.01 * rng.standard_normal()),
                     col.energy_j: telemetry["energy_j"], col.img_per_joule: telemetry["img_per_joule"]})
    return rows


def ab(b_joules_per_image: float, seed: int):
    rng = np.random.default_rng(seed)
    a = RunData(path="a", run_id="a", created_at="", environment={}, rows=tuple(side(rng, joules_per_image=0.5)))
    b = RunData(path="b", run_id="b", created_at="", environment={},
                rows=tuple(side(rng, joules_per_image=b_joules_per_image)))
    return compare.compare_runs(b, a, mode="ab", require_same_env=False, baseline_label="A", candidate_label="B")


def test_ten_percent_more_energy_per_image_is_an_energy_regression_with_its_interval(tmp_path):
    comparison = ab(JOULES_PER_IMAGE * 1.10, seed=3)
    (v,) = comparison.verdicts
    energy = v.metric("energy")
    assert energy is not None, "img_per_joule was not judged"
    assert v.verdict == REGRESSION and v.decided_by == "energy" and energy.verdict == REGRESSION
    # B makes 1/1.1 of A's images per joule: -9.1 %, the interval around it and below the floor
    assert energy.effect_pct == pytest.approx(-9.1, abs=1.0)
    assert energy.ci_low_pct < energy.effect_pct < energy.ci_high_pct < -v.floor_pct
    assert energy.candidate_value == pytest.approx(1 / (1.1 * JOULES_PER_IMAGE), rel=0.02)
    assert v.throughput.verdict != REGRESSION  # the speed did not change: energy alone made the call
    assert "energy less efficient beyond the 3% floor" in v.reason
    assert f"energy {energy.effect_pct:+.1f}% [" in wording.change_text(v)  # the report's change column
    assert any("energy" in line and "regression" in line for line in verdict_lines(comparison, 200))
    store.write_table(tmp_path / "verdicts.parquet", verdicts_file.verdict_table(comparison))
    table = pq.read_table(tmp_path / "verdicts.parquet")
    (row,) = table.to_pylist()
    assert (row["energy_verdict"], row["energy_effect_pct"]) == (REGRESSION, energy.effect_pct)
    assert row["candidate_img_per_joule"] == energy.candidate_value
    assert b"images/J" == table.schema.field("candidate_img_per_joule").metadata[b"unit"]
    assert verdicts_file.read_verdicts(tmp_path / "verdicts.parquet")[0].metric("energy") == energy


def test_an_energy_a_a_is_not_a_change():
    (v,) = ab(JOULES_PER_IMAGE, seed=4).verdicts
    assert v.metric("energy") is not None
    assert v.verdict in (UNCHANGED, INCONCLUSIVE) and v.metric("energy").verdict in (UNCHANGED, INCONCLUSIVE)
