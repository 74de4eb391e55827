"""benchmarks/detector.py's bookkeeping: how one set of trials becomes the alarm and detection rates of
every floor, with one metric or two, and for the nightly pipeline (screen, then A/B)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from conftest import ROOT

_spec = importlib.util.spec_from_file_location("detector", ROOT / "benchmarks" / "detector.py")
detector = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(detector)

NAN = np.nan


def trials(*rows):
    """TRIAL rows: throughput change, significant, fast-step change, significant, cell p, decided change."""
    return np.array(rows, dtype=float)


def test_a_regression_of_either_metric_counts_at_every_floor_it_clears():
    draws = trials([-4.0, 1, -1.0, 0, 0.001, -4.0],  # throughput: significant, -4 %
                   [-1.0, 0, -4.5, 1, 0.001, -4.5],  # fast steps: significant, -4.5 %
                   [-6.0, 0, -6.0, 0, 0.300, -6.0],  # large but significant for neither: no call
                   [2.5, 1, NAN, 0, 0.001, 2.5])  # throughput alone tested: an improvement
    assert detector.rates(draws, 0.0) == {"alarm": 0.75, "regression": 0.5}
    assert detector.rates(draws, 3.0) == {"alarm": 0.5, "regression": 0.5}
    assert detector.rates(draws, 4.25) == {"alarm": 0.25, "regression": 0.25}
    assert detector.rates(draws, 5.0) == {"alarm": 0.0, "regression": 0.0}


def test_the_nightly_pipeline_fails_on_a_screened_cell_the_ab_confirms():
    screen_hit = [-4.0, 1, -4.0, 1, 0.001, -4.0]  # a regression: passes either screen
    screen_loose = [-1.0, 0, -2.0, 0, 0.150, -2.0]  # a slowdown with p <= 0.2: the loose screen only
    screen_miss = [-1.0, 0, -2.0, 0, 0.300, -2.0]
    confirmed = [-1.0, 0, -5.0, 1, 0.001, -5.0]
    refuted = [-1.0, 0, -1.0, 0, 0.500, -1.0]
    draws = trials(screen_hit + confirmed, screen_loose + confirmed, screen_miss + confirmed, screen_loose + refuted)
    r = detector.rates(draws, 3.0)
    assert (r["screen_strict"], r["screen_loose"]) == (0.25, 0.75)
    assert (r["fail_strict"], r["fail_loose"]) == (0.25, 0.5)
    assert detector.rates(draws, 6.0)["fail_loose"] == 0.0  # the A/B's -5 % is within a 6 % floor


def test_trial_columns_match_what_compare_decides():
    rng, n = np.random.default_rng(0), 10

    def rows(slow):
        return [{"cell_id": "c", "repeat": i, "status": "ok", "throughput_img_per_s": t, "fast_step_img_per_s": f,
                 "env_key": "k", "is_smoke": False, "is_steady": True, "fire_drill_pct": 0.0, "backend": "synthetic",
                 "memory_format": "nchw", "precision": "fp32", "world_size": 1, "grad_accum": 1}
                for i, (t, f) in enumerate(zip(100 * np.exp(rng.normal(-slow, 0.08, n)),
                                               120 * np.exp(rng.normal(-slow, 0.01, n))))]
    th = detector.Thresholds()
    t = detector._trial(rows(0.0), rows(0.05), {}, th)
    assert len(t) == len(detector.TRIAL)
    assert t[3] == 1 and t[2] == pytest.approx(-5.0, abs=1.5) and t[5] == t[2]  # fast steps decided
    assert detector.rates(np.array([t]), 3.0)["regression"] == 1.0
    alone = detector._trial(rows(0.0), rows(0.05), {}, detector.Thresholds(fast_steps=False))
    assert np.isnan(alone[2]) and alone[3] == 0 and alone[5] == alone[0]
