"""harness.stats.changepoint: the E-divisive statistic against its definition, intervals against scipy, and the
detector on hand-made series with known answers: a 5 % step found where it is, A/A series left alone,
a drift of 0.5 % a night seen as a drift and a step not mistaken for one."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from harness.stats import changepoint as cp

NIGHT_SD = 0.016
"""Night-to-night spread of a cell's log throughput on the CPU machine: ~5 % between repeats
(docs/performance.md, "Regression detector") over the nightly's 10 repeats."""
FLOOR = math.log1p(0.03)


def _series(seed: int, n: int = 30, step_at: int | None = None, step: float = math.log(0.95)) -> np.ndarray:
    x = math.log(1000.0) + np.random.default_rng(seed).normal(0.0, NIGHT_SD, n)
    if step_at is not None:
        x[step_at:] += step
    return x


def test_the_divergence_curve_is_the_energy_statistic_of_its_definition():
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0])

    def energy(left, right, a=1.0):  # Szekely & Rizzo's energy distance, pairs taken one by one
        between = np.mean([abs(u - v) ** a for u in left for v in right])
        within_l = np.mean([abs(u - v) ** a for u, v in itertools.permutations(left, 2)])
        within_r = np.mean([abs(u - v) ** a for u, v in itertools.permutations(right, 2)])
        return len(left) * len(right) / len(x) * (2 * between - within_l - within_r)

    for exponent in (1.0, 0.5):
        expected = [energy(x[:t], x[t:], exponent) for t in range(3, 8)]
        assert cp.divergence_curve(x, min_segment=3, exponent=exponent) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="exponent=2"):
        cp.divergence_curve(x, exponent=2)


def test_welch_difference_is_scipys_welch_interval():
    a, b = [10.1, 9.8, 10.4, 10.0, 9.9], [9.1, 9.6, 9.0, 9.4]
    ci = cp.welch_difference(a, b, confidence=0.9)
    ref = sps.ttest_ind(b, a, equal_var=False).confidence_interval(0.9)
    assert ci.estimate == pytest.approx(np.mean(b) - np.mean(a))
    assert (ci.low, ci.high) == pytest.approx((ref.low, ref.high), rel=1e-10)
    assert math.isnan(cp.welch_difference([1.0], b).low)


def test_a_trend_without_breaks_is_ordinary_least_squares():
    y = _series(3, n=14) + 0.004 * np.arange(14)
    fit = cp.trend(y)
    ref = sps.linregress(np.arange(14), y)
    half = sps.t.ppf(0.975, 12) * ref.stderr
    assert fit.slope.estimate == pytest.approx(ref.slope)
    assert (fit.slope.low, fit.slope.high) == pytest.approx((ref.slope - half, ref.slope + half))
    assert fit.total == pytest.approx(13 * ref.slope) and fit.num_levels == 1
    assert cp.trend(y[:3]) is None  # 3 values leave one degree of freedom


def test_a_5pct_step_at_night_12_of_30_is_found_at_night_12():
    misses, extra = [], 0
    for seed in range(20):
        found = [c.index for c in cp.change_points(_series(seed, step_at=11), min_magnitude=FLOOR, seed=seed)]
        hits = [i for i in found if abs(i - 11) <= 1]
        if len(hits) != 1:
            misses.append((seed, found))
        extra += len(found) - len(hits)
    assert misses == [] and extra <= 1  # recall 20 / 20 within a night; at most one false step in 600 nights
    (step,) = cp.change_points(_series(0, step_at=11), min_magnitude=FLOOR)
    assert step.change.estimate == pytest.approx(math.log(0.95), abs=0.01)
    assert step.change.low < math.log(0.95) < step.change.high and step.change.high < 0
    assert step.p_value <= cp.DEFAULT_ALPHA and step.num_before + step.num_after == 30


def test_a_a_series_give_no_change_point():
    found = [c.index for seed in range(40) for c in cp.change_points(_series(100 + seed), min_magnitude=FLOOR, seed=seed)]
    assert found == []  # 1200 A/A nights


def test_the_floor_merges_away_a_real_step_too_small_to_matter():
    x = _series(5, n=40, step_at=20, step=math.log(0.98))
    x = x - (x - x.mean()) * 0.8  # quiet series: the 2 % step is certain
    assert [c.index for c in cp.change_points(x, min_magnitude=0.0)] == [20]
    assert cp.change_points(x, min_magnitude=FLOOR) == ()


def test_two_steps_are_both_found_and_a_segment_never_shorter_than_min_segment():
    x = _series(7, n=36)
    x[10:] += math.log(0.93)
    x[25:] += math.log(1.10)
    found = cp.change_points(x, min_magnitude=FLOOR)
    assert [c.index for c in found] == [10, 25]
    assert found[0].after == pytest.approx(found[1].before)
    assert cp.change_points(x[:5]) == ()  # too short to split at min_segment 3
    with pytest.raises(ValueError, match="min_segment=1"):
        cp.change_points(x, min_segment=1)
    with pytest.raises(ValueError, match="num_permutations=9: at alpha=0.05 at least 19"):
        cp.change_points(x, num_permutations=9)


def test_a_drift_of_half_a_percent_a_night_over_14_nights_is_a_drift():
    x = _series(11, n=30)
    x[16:] += math.log(1.005) * np.arange(1, 15) * -1
    d = cp.drift(x, last=14, min_total=FLOOR)
    assert d is not None and d.start == 16
    assert d.slope.estimate == pytest.approx(-math.log(1.005), abs=0.002) and d.slope.high < 0
    assert d.total < -FLOOR
    assert cp.drift(_series(12, n=30), last=14, min_total=FLOOR) is None  # A/A


def test_a_step_inside_the_window_is_not_a_drift_when_its_break_is_given():
    x = _series(13, n=30, step_at=22, step=math.log(0.9))
    x = x - (x - np.where(np.arange(30) < 22, math.log(1000), math.log(900))) * 0.5
    assert cp.drift(x, last=14, min_total=FLOOR) is not None  # a step seen as a slope
    assert cp.drift(x, last=14, breaks=[22], min_total=FLOOR) is None


def test_a_drift_below_the_floor_is_not_reported():
    x = math.log(1000) + 0.001 * np.arange(14) + np.random.default_rng(1).normal(0, 0.0005, 14)
    assert cp.drift(x, last=14) is not None  # real: the interval excludes 0
    assert cp.drift(x, last=14, min_total=FLOOR) is None  # 1.3 % in total: within the 3 % floor
