"""harness.stats.window against textbook datasets with published answers, plus calibration on synthetic data:
throughput and its within-run interval, the fast-step rate, trend and change-point tests."""

import math

import numpy as np
import pytest
from scipy import signal
from scipy import stats as sps

from harness.stats import window

# Student (1908) / Cushny & Peebles: extra hours of sleep under two drugs (R's `sleep` data set).
SLEEP_GROUP1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_GROUP2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
SLEEP_DIFF = [b - a for a, b in zip(SLEEP_GROUP1, SLEEP_GROUP2)]
# R: t.test(extra ~ group, data = sleep, paired = TRUE) -> 95% CI of group1 - group2
SLEEP_PAIRED_CI = (0.7001142, 2.4598858)


# --- ratio of sums ----------------------------------------------------------------------------


def test_throughput_is_total_work_over_total_time_not_mean_of_rates():
    images, seconds = [100.0, 100.0], [1.0, 3.0]
    mean_of_rates = np.mean(np.divide(images, seconds))  # (100 + 33.3) / 2 = 66.7: overstates
    assert window.batch_means_interval(seconds, images).estimate == pytest.approx(50.0)
    assert mean_of_rates == pytest.approx(66.6667, rel=1e-4)


# --- fast-step rate ---------------------------------------------------------------------------


def test_fast_step_rate_is_images_over_the_tenth_percentile_step_time():
    # 1..10 s: numpy's linear 10th percentile sits 0.9 of the way from the 1st to the 2nd value, 1.9 s
    assert window.fast_step_rate(np.arange(1.0, 11.0), 19.0) == pytest.approx(10.0)
    assert window.FAST_STEP_QUANTILE == 0.1


def test_fast_step_rate_ignores_interference_that_only_slows_some_steps():
    rng = np.random.default_rng(0)
    quiet = np.full(300, 0.1) * rng.uniform(1.0, 1.01, 300)
    disturbed = quiet.copy()
    disturbed[rng.choice(300, 150, replace=False)] *= 1.5  # half the steps shared the core with a neighbour
    assert 16.0 * 300 / disturbed.sum() < 0.85 * 160
    assert window.fast_step_rate(disturbed, 16) == pytest.approx(window.fast_step_rate(quiet, 16), rel=0.005)
    # a slower step everywhere (the code's own slowdown) moves it as much as it moves the mean
    assert window.fast_step_rate(disturbed * 1.05, 16) == pytest.approx(window.fast_step_rate(disturbed, 16) / 1.05)


@pytest.mark.parametrize(
    ("times", "images", "match"),
    [([], 16, r"step_times: empty"), ([0.1, 0.0], 16, r"step_times\[1\] = 0.0"),
     ([0.1], 0, r"images_per_step must be a positive finite number"),
     ([0.1], math.nan, r"images_per_step must be a positive finite number")],
)
def test_fast_step_rate_rejects_bad_input(times, images, match):
    with pytest.raises(ValueError, match=match):
        window.fast_step_rate(times, images)


# --- t interval and batch means ---------------------------------------------------------------


def test_batch_means_one_step_per_batch_is_the_inverted_t_interval():
    times = [d + 1.0 for d in SLEEP_DIFF]  # shift to positive "step times" with mean 2.58 s
    ci = window.batch_means_interval(times, 32, num_batches=10)
    lo_t, hi_t = SLEEP_PAIRED_CI[0] + 1.0, SLEEP_PAIRED_CI[1] + 1.0
    assert ci.estimate == pytest.approx(32 / 2.58)
    assert ci.low == pytest.approx(32 / hi_t, rel=1e-6)  # 1/x is decreasing: bounds swap
    assert ci.high == pytest.approx(32 / lo_t, rel=1e-6)
    assert ci.method == "batch_means_t"


def test_batch_means_is_t_interval_on_the_batch_means():
    rng = np.random.default_rng(1)
    times = rng.gamma(50.0, 0.002, size=120)
    batch_means = times.reshape(6, 20).mean(axis=1)
    low, high = sps.t.interval(0.9, df=5, loc=batch_means.mean(), scale=sps.sem(batch_means))
    ci = window.batch_means_interval(times, 8.0, num_batches=6, confidence=0.9)
    assert (ci.low, ci.estimate, ci.high) == pytest.approx((8 / high, 8 / batch_means.mean(), 8 / low))


def test_batch_means_estimate_is_ratio_of_sums_with_uneven_batches_and_images():
    rng = np.random.default_rng(2)
    times = rng.uniform(0.09, 0.11, size=53)
    images = rng.integers(60, 65, size=53).astype(float)
    ci = window.batch_means_interval(times, images, num_batches=10)
    assert ci.estimate == pytest.approx(images.sum() / times.sum())
    assert ci.low < ci.estimate < ci.high


def test_batch_means_fewer_steps_than_batches_uses_one_batch_per_step():
    times = [0.10, 0.12, 0.11]
    assert window.batch_means_interval(times, 4, num_batches=10) == window.batch_means_interval(
        times, 4, num_batches=3
    )


def test_batch_means_single_step_has_nan_bounds():
    ci = window.batch_means_interval([0.5], 16)
    assert ci.estimate == 32.0 and math.isnan(ci.low) and math.isnan(ci.high)


def test_batch_means_unbounded_upper_limit_is_inf():
    ci = window.batch_means_interval([0.01, 10.0], 1, confidence=0.99)
    assert ci.high == math.inf and 0 < ci.low < ci.estimate


def _coverage(step_times: np.ndarray, true_throughput: float, num_batches: int) -> float:
    hits = 0
    for row in step_times:
        ci = window.batch_means_interval(row, 64, num_batches=num_batches)
        hits += ci.low <= true_throughput <= ci.high
    return hits / len(step_times)


def test_batch_means_covers_95_percent_on_iid_steps():
    rng = np.random.default_rng(3)
    times = rng.gamma(25.0, 0.004, size=(400, 200))  # mean 0.1 s, cv 20 %, skewed
    # binomial sd of the coverage at 400 runs is 0.011; +/- 3 sd
    assert 0.917 <= _coverage(times, 64 / 0.1, 10) <= 0.983


def test_batch_means_stays_calibrated_on_autocorrelated_steps_where_naive_t_does_not():
    rng = np.random.default_rng(4)
    phi = 0.5  # AR(1): naive variance is too small by (1 + phi) / (1 - phi) = 3
    noise = signal.lfilter([1.0], [1.0, -phi], rng.normal(0, 0.003, size=(300, 1000)), axis=1)
    times = 0.1 + noise
    assert 0.90 <= _coverage(times, 640.0, 10) <= 0.99
    assert _coverage(times, 640.0, 1000) < 0.85  # one step per batch = i.i.d. t interval


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(step_times_s=[], images_per_step=1), r"step_times_s: empty"),
        (dict(step_times_s=[0.1, -0.1], images_per_step=1), r"step_times_s\[1\] = -0.1; values must be > 0"),
        (dict(step_times_s=[0.1, math.nan], images_per_step=1), r"step_times_s\[1\] is nan"),
        (dict(step_times_s=[0.1, 0.1], images_per_step=0), r"images_per_step\[0\] = 0.0; values must be > 0"),
        (dict(step_times_s=[0.1, 0.1], images_per_step=[1, 2, 3]), r"must have the same length"),
        (dict(step_times_s=[0.1, 0.1], images_per_step=1, num_batches=1), r"num_batches=1: need at least 2"),
        (dict(step_times_s=[0.1, 0.1], images_per_step=1, confidence=1.0), r"confidence=1.0: must be strictly"),
    ],
)
def test_batch_means_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        window.batch_means_interval(**kwargs)


# --- trend, change point, steadiness ----------------------------------------------------------

# "A Mann-Kendall example (by hand)", J. Little, College of the Holy Cross: S = 54, one tied pair,
# V = [14*13*33 - 2*1*9] / 18, Z = 2.9058, one-sided p = .0018.
MK_EXAMPLE = [12.9, 14.8, 13.2, 15.7, 13.8, 15.6, 12.9, 11.0, 17.3, 15.9, 19.0, 18.3, 20.1, 21.7]


def test_mann_kendall_matches_worked_example_with_a_tie():
    mk = window.mann_kendall(MK_EXAMPLE)
    assert mk.s == 54
    assert mk.var_s == pytest.approx((14 * 13 * 33 - 2 * 1 * 9) / 18)
    assert mk.z == pytest.approx(2.9058, abs=1e-4)
    assert mk.p / 2 == pytest.approx(0.0018, abs=5e-5)  # the example quotes the one-sided p


def test_mann_kendall_s_agrees_with_kendall_tau_on_a_long_series():
    x = np.random.default_rng(5).normal(size=700)  # > one 512-row block
    n = x.size
    tau = sps.kendalltau(np.arange(n), x).statistic
    assert window.mann_kendall(x).s == round(tau * n * (n - 1) / 2)


def test_mann_kendall_all_tied_is_p_one():
    assert window.mann_kendall([3.0, 3.0, 3.0, 3.0]).p == 1.0


def test_mann_kendall_needs_two_values():
    with pytest.raises(ValueError, match=r"needs at least 2"):
        window.mann_kendall([1.0])


# Pettitt (1979), Applied Statistics 28(2), Table 1: K = 232, change after t = 17, p = 0.0146.
PETTITT_TABLE1 = [
    -1.05, 0.96, 1.22, 0.58, -0.98, -0.03, -1.54, -0.71, -0.35, 0.66, 0.44, 0.91, -0.02, -1.42,
    1.26, -1.02, -0.81, 1.66, 1.05, 0.97, 2.14, 1.22, -0.24, 1.60, 0.72, -0.12, 0.44, 0.03, 0.66,
    0.56, 1.37, 1.66, 0.10, 0.80, 1.29, 0.49, -0.07, 1.18, 3.29, 1.84,
]


def test_pettitt_matches_the_paper_example():
    result = window.pettitt(PETTITT_TABLE1)
    assert result.k == 232
    assert result.change_index == 17
    assert result.p == pytest.approx(0.0146, abs=5e-5)


def test_pettitt_constant_series_is_p_one():
    assert window.pettitt([1.0] * 10).p == 1.0


def test_steadiness_flags_linear_drift():
    rng = np.random.default_rng(6)
    times = 0.1 + np.linspace(0, 0.01, 600) + rng.normal(0, 0.002, 600)
    result = window.steadiness(times)
    assert not result.is_steady
    assert result.trend_p < 0.01
    assert "values rise over the window" in result.reason


def test_steadiness_flags_step_change_and_locates_it():
    rng = np.random.default_rng(7)
    times = np.r_[np.full(300, 0.105), np.full(300, 0.100)] + rng.normal(0, 0.002, 600)
    result = window.steadiness(times)
    assert not result.is_steady
    assert result.change_p < 0.01
    assert "level shift near value 300 of 600" in result.reason


def test_steadiness_passes_stationary_noise_at_about_the_nominal_rate():
    rng = np.random.default_rng(8)
    runs = rng.gamma(25.0, 0.004, size=(200, 300))
    results = [window.steadiness(row) for row in runs]
    assert sum(r.is_steady for r in results) / len(results) >= 0.95  # two tests at alpha = 0.01
    steady = next(r for r in results if r.is_steady)
    assert steady.reason.startswith("steady at alpha=0.01")


def test_steadiness_too_few_values_is_not_steady():
    result = window.steadiness([0.1, 0.1])
    assert not result.is_steady and math.isnan(result.trend_p)
    assert "need at least 3" in result.reason


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(values=[]), r"values: empty"),
        (dict(values=[0.1, math.inf, 0.1]), r"values\[1\] is inf"),
        (dict(values=[0.1] * 5, alpha=0.0), r"alpha=0.0: must be strictly between 0 and 1"),
        (dict(values=[0.1] * 5, num_batches=2), r"num_batches=2: need at least 3"),
    ],
)
def test_steadiness_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        window.steadiness(**kwargs)


def test_steadiness_on_raw_values_catches_a_short_slow_head_that_batch_means_miss():
    times = np.random.default_rng(13).gamma(400.0, 0.00025, 300)  # 0.1 s, cv 5 %
    times[:30] *= 1.2  # first 10 % is 4 sigma slower: a too-short warm-up
    assert window.steadiness(times, num_batches=len(times)).change_p < 0.01
    assert window.steadiness(times).is_steady  # documented limitation of the batch-means default


def test_window_interval_is_on_the_windows_clock_at_the_step_intervals_relative_width():
    rng = np.random.default_rng(3)
    times = 0.1 + 0.01 * rng.standard_normal(100)
    steps = window.batch_means_interval(times, 256)
    # the window's wall clock holds the fences too: here 5 % more time than the steps
    wall = window.window_throughput_interval(times, 256, 256 * 100, times.sum() * 1.05)
    assert wall.estimate == pytest.approx(256 * 100 / (times.sum() * 1.05))
    assert wall.low < wall.estimate < wall.high
    assert wall.low / wall.estimate == pytest.approx(steps.low / steps.estimate)
    assert wall.high / wall.estimate == pytest.approx(steps.high / steps.estimate)
    # the step-time interval alone would not even contain the window's figure
    assert not steps.low <= wall.estimate <= steps.high
