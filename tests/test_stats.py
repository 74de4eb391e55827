"""harness.stats against textbook datasets with published answers, plus calibration on synthetic data."""

import math

import numpy as np
import pytest
from scipy import signal
from scipy import stats as sps

from harness import stats

# Student (1908) / Cushny & Peebles: extra hours of sleep under two drugs (R's `sleep` data set).
SLEEP_GROUP1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_GROUP2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
SLEEP_DIFF = [b - a for a, b in zip(SLEEP_GROUP1, SLEEP_GROUP2)]
# R: t.test(extra ~ group, data = sleep, paired = TRUE) -> 95% CI of group1 - group2
SLEEP_PAIRED_CI = (0.7001142, 2.4598858)


# --- ratio of sums ----------------------------------------------------------------------------


def test_ratio_of_sums_is_total_work_over_total_time_not_mean_of_rates():
    images, seconds = [100.0, 100.0], [1.0, 3.0]
    mean_of_rates = np.mean(np.divide(images, seconds))  # (100 + 33.3) / 2 = 66.7: overstates
    assert stats.ratio_of_sums_throughput(images, seconds) == pytest.approx(50.0)
    assert mean_of_rates == pytest.approx(66.6667, rel=1e-4)


@pytest.mark.parametrize(
    ("images", "seconds", "match"),
    [
        ([], [], r"images: empty"),
        ([1.0, 2.0], [1.0, math.nan], r"seconds\[1\] is nan; values must be finite"),
        ([1.0, 2.0], [1.0, 0.0], r"seconds\[1\] = 0.0; values must be > 0"),
        ([1.0, 2.0], [1.0, -0.5], r"seconds\[1\] = -0.5; values must be > 0"),
        ([1.0, 2.0], [1.0], r"images \(2 values\) and seconds \(1 values\) must have the same length"),
        ([[1.0]], [[1.0]], r"images: expected a 1-D sequence"),
    ],
)
def test_ratio_of_sums_rejects_bad_input(images, seconds, match):
    with pytest.raises(ValueError, match=match):
        stats.ratio_of_sums_throughput(images, seconds)


# --- fast-step rate ---------------------------------------------------------------------------


def test_fast_step_rate_is_images_over_the_tenth_percentile_step_time():
    # 1..10 s: numpy's linear 10th percentile sits 0.9 of the way from the 1st to the 2nd value, 1.9 s
    assert stats.fast_step_rate(np.arange(1.0, 11.0), 19.0) == pytest.approx(10.0)
    assert stats.FAST_STEP_QUANTILE == 0.1


def test_fast_step_rate_ignores_interference_that_only_slows_some_steps():
    rng = np.random.default_rng(0)
    quiet = np.full(300, 0.1) * rng.uniform(1.0, 1.01, 300)
    disturbed = quiet.copy()
    disturbed[rng.choice(300, 150, replace=False)] *= 1.5  # half the steps shared the core with a neighbour
    assert stats.ratio_of_sums_throughput(np.full(300, 16.0), disturbed) < 0.85 * 160
    assert stats.fast_step_rate(disturbed, 16) == pytest.approx(stats.fast_step_rate(quiet, 16), rel=0.005)
    # a slower step everywhere (the code's own slowdown) moves it as much as it moves the mean
    assert stats.fast_step_rate(disturbed * 1.05, 16) == pytest.approx(stats.fast_step_rate(disturbed, 16) / 1.05)


@pytest.mark.parametrize(
    ("times", "images", "match"),
    [([], 16, r"step_times: empty"), ([0.1, 0.0], 16, r"step_times\[1\] = 0.0"),
     ([0.1], 0, r"images_per_step must be a positive finite number"),
     ([0.1], math.nan, r"images_per_step must be a positive finite number")],
)
def test_fast_step_rate_rejects_bad_input(times, images, match):
    with pytest.raises(ValueError, match=match):
        stats.fast_step_rate(times, images)


# --- t interval and batch means ---------------------------------------------------------------


def test_mean_t_interval_matches_student_sleep_data():
    ci = stats.mean_t_interval(SLEEP_DIFF)
    assert ci.estimate == pytest.approx(1.58)
    assert (ci.low, ci.high) == pytest.approx(SLEEP_PAIRED_CI, abs=1e-6)
    assert (ci.confidence, ci.method) == (0.95, "t")


def test_mean_t_interval_single_value_has_nan_bounds():
    ci = stats.mean_t_interval([3.0])
    assert ci.estimate == 3.0 and math.isnan(ci.low) and math.isnan(ci.high)


def test_batch_means_one_step_per_batch_is_the_inverted_t_interval():
    times = [d + 1.0 for d in SLEEP_DIFF]  # shift to positive "step times" with mean 2.58 s
    ci = stats.batch_means_interval(times, 32, num_batches=10)
    lo_t, hi_t = SLEEP_PAIRED_CI[0] + 1.0, SLEEP_PAIRED_CI[1] + 1.0
    assert ci.estimate == pytest.approx(32 / 2.58)
    assert ci.low == pytest.approx(32 / hi_t, rel=1e-6)  # 1/x is decreasing: bounds swap
    assert ci.high == pytest.approx(32 / lo_t, rel=1e-6)
    assert ci.method == "batch_means_t"


def test_batch_means_is_t_interval_on_the_batch_means():
    rng = np.random.default_rng(1)
    times = rng.gamma(50.0, 0.002, size=120)
    batch_means = times.reshape(6, 20).mean(axis=1)
    ref = stats.mean_t_interval(batch_means, confidence=0.9)
    ci = stats.batch_means_interval(times, 8.0, num_batches=6, confidence=0.9)
    assert (ci.low, ci.estimate, ci.high) == pytest.approx((8 / ref.high, 8 / ref.estimate, 8 / ref.low))


def test_batch_means_estimate_is_ratio_of_sums_with_uneven_batches_and_images():
    rng = np.random.default_rng(2)
    times = rng.uniform(0.09, 0.11, size=53)
    images = rng.integers(60, 65, size=53).astype(float)
    ci = stats.batch_means_interval(times, images, num_batches=10)
    assert ci.estimate == pytest.approx(stats.ratio_of_sums_throughput(images, times))
    assert ci.low < ci.estimate < ci.high


def test_batch_means_fewer_steps_than_batches_uses_one_batch_per_step():
    times = [0.10, 0.12, 0.11]
    assert stats.batch_means_interval(times, 4, num_batches=10) == stats.batch_means_interval(
        times, 4, num_batches=3
    )


def test_batch_means_single_step_has_nan_bounds():
    ci = stats.batch_means_interval([0.5], 16)
    assert ci.estimate == 32.0 and math.isnan(ci.low) and math.isnan(ci.high)


def test_batch_means_unbounded_upper_limit_is_inf():
    ci = stats.batch_means_interval([0.01, 10.0], 1, confidence=0.99)
    assert ci.high == math.inf and 0 < ci.low < ci.estimate


def _coverage(step_times: np.ndarray, true_throughput: float, num_batches: int) -> float:
    hits = 0
    for row in step_times:
        ci = stats.batch_means_interval(row, 64, num_batches=num_batches)
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
        stats.batch_means_interval(**kwargs)


# --- trend, change point, steadiness ----------------------------------------------------------

# "A Mann-Kendall example (by hand)", J. Little, College of the Holy Cross: S = 54, one tied pair,
# V = [14*13*33 - 2*1*9] / 18, Z = 2.9058, one-sided p = .0018.
MK_EXAMPLE = [12.9, 14.8, 13.2, 15.7, 13.8, 15.6, 12.9, 11.0, 17.3, 15.9, 19.0, 18.3, 20.1, 21.7]


def test_mann_kendall_matches_worked_example_with_a_tie():
    mk = stats.mann_kendall(MK_EXAMPLE)
    assert mk.s == 54
    assert mk.var_s == pytest.approx((14 * 13 * 33 - 2 * 1 * 9) / 18)
    assert mk.z == pytest.approx(2.9058, abs=1e-4)
    assert mk.p / 2 == pytest.approx(0.0018, abs=5e-5)  # the example quotes the one-sided p


def test_mann_kendall_s_agrees_with_kendall_tau_on_a_long_series():
    x = np.random.default_rng(5).normal(size=700)  # > one 512-row block
    n = x.size
    tau = sps.kendalltau(np.arange(n), x).statistic
    assert stats.mann_kendall(x).s == round(tau * n * (n - 1) / 2)


def test_mann_kendall_all_tied_is_p_one():
    assert stats.mann_kendall([3.0, 3.0, 3.0, 3.0]).p == 1.0


def test_mann_kendall_needs_two_values():
    with pytest.raises(ValueError, match=r"needs at least 2"):
        stats.mann_kendall([1.0])


# Pettitt (1979), Applied Statistics 28(2), Table 1: K = 232, change after t = 17, p = 0.0146.
PETTITT_TABLE1 = [
    -1.05, 0.96, 1.22, 0.58, -0.98, -0.03, -1.54, -0.71, -0.35, 0.66, 0.44, 0.91, -0.02, -1.42,
    1.26, -1.02, -0.81, 1.66, 1.05, 0.97, 2.14, 1.22, -0.24, 1.60, 0.72, -0.12, 0.44, 0.03, 0.66,
    0.56, 1.37, 1.66, 0.10, 0.80, 1.29, 0.49, -0.07, 1.18, 3.29, 1.84,
]


def test_pettitt_matches_the_paper_example():
    result = stats.pettitt(PETTITT_TABLE1)
    assert result.k == 232
    assert result.change_index == 17
    assert result.p == pytest.approx(0.0146, abs=5e-5)


def test_pettitt_constant_series_is_p_one():
    assert stats.pettitt([1.0] * 10).p == 1.0


def test_steadiness_flags_linear_drift():
    rng = np.random.default_rng(6)
    times = 0.1 + np.linspace(0, 0.01, 600) + rng.normal(0, 0.002, 600)
    result = stats.steadiness(times)
    assert not result.is_steady
    assert result.trend_p < 0.01
    assert "values rise over the window" in result.reason


def test_steadiness_flags_step_change_and_locates_it():
    rng = np.random.default_rng(7)
    times = np.r_[np.full(300, 0.105), np.full(300, 0.100)] + rng.normal(0, 0.002, 600)
    result = stats.steadiness(times)
    assert not result.is_steady
    assert result.change_p < 0.01
    assert "level shift near value 300 of 600" in result.reason


def test_steadiness_passes_stationary_noise_at_about_the_nominal_rate():
    rng = np.random.default_rng(8)
    runs = rng.gamma(25.0, 0.004, size=(200, 300))
    results = [stats.steadiness(row) for row in runs]
    assert sum(r.is_steady for r in results) / len(results) >= 0.95  # two tests at alpha = 0.01
    steady = next(r for r in results if r.is_steady)
    assert steady.reason.startswith("steady at alpha=0.01")


def test_steadiness_too_few_values_is_not_steady():
    result = stats.steadiness([0.1, 0.1])
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
        stats.steadiness(**kwargs)


# --- bootstrap --------------------------------------------------------------------------------


def _two_sides(seed: int = 9) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    baseline = 1000.0 * (1 + rng.normal(0, 0.01, 10))
    candidate = 1100.0 * (1 + rng.normal(0, 0.01, 10))
    return candidate, baseline


def test_bootstrap_contains_true_ratio_and_excludes_no_change():
    candidate, baseline = _two_sides()
    ci = stats.bootstrap_log_ratio(candidate, baseline)
    assert ci.low < math.log(1.1) < ci.high
    assert ci.low > 0
    assert ci.estimate == pytest.approx(math.log(candidate.mean() / baseline.mean()))
    assert stats.to_percent(ci.estimate) == pytest.approx(10.0, abs=1.0)
    assert ci.method == "bootstrap_percentile"


def test_bootstrap_is_deterministic_per_seed():
    candidate, baseline = _two_sides()
    first = stats.bootstrap_log_ratio(candidate, baseline, seed=3)
    assert stats.bootstrap_log_ratio(candidate, baseline, seed=3) == first
    assert stats.bootstrap_log_ratio(candidate, baseline, seed=4) != first


def test_bootstrap_single_repeat_has_nan_bounds():
    ci = stats.bootstrap_log_ratio([2.0], [1.0, 1.1])
    assert ci.estimate == pytest.approx(math.log(2 / 1.05)) and math.isnan(ci.low)


def test_bootstrap_rejects_non_positive_values():
    with pytest.raises(ValueError, match=r"baseline\[0\] = 0.0; values must be > 0"):
        stats.bootstrap_log_ratio([1.0, 2.0], [0.0, 1.0])


def test_to_percent():
    assert stats.to_percent(0.0) == 0.0
    assert stats.to_percent(math.log(1.25)) == pytest.approx(25.0)
    assert stats.to_percent(math.log(0.8)) == pytest.approx(-20.0)


# --- multiple comparisons ---------------------------------------------------------------------

# Benjamini & Hochberg (1995), sec. 3.2: 15 p-values; BH rejects 4 at q = 0.05 (Bonferroni: 3).
BH_P = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240,
        0.4262, 0.5719, 0.6528, 0.7590, 1.0000]
# min_{j>=i} 15 p_(j) / j, worked by hand (equal to R's p.adjust(method = "BH"))
BH_ADJUSTED = [0.0015, 0.003, 0.0095, 0.035625, 0.0603, 0.063857, 0.063857, 0.0645, 0.0765,
               0.486, 0.581182, 0.714875, 0.753231, 0.813214, 1.0]


def test_benjamini_hochberg_paper_example_in_shuffled_order():
    order = np.random.default_rng(10).permutation(15)
    adjusted, rejected = stats.benjamini_hochberg(np.array(BH_P)[order], q=0.05)
    assert adjusted == pytest.approx(np.array(BH_ADJUSTED)[order], abs=1e-6)
    assert rejected.sum() == 4
    assert set(np.array(BH_P)[order][rejected]) == {0.0001, 0.0004, 0.0019, 0.0095}


def test_benjamini_hochberg_adjusted_p_is_monotone():
    p = np.random.default_rng(11).uniform(size=50) ** 3
    adjusted, _ = stats.benjamini_hochberg(p)
    assert np.all(np.diff(adjusted[np.argsort(p)]) >= 0)
    assert np.all(adjusted >= p)


@pytest.mark.parametrize(
    ("p", "q", "match"),
    [([], 0.05, r"p_values: empty"), ([0.1, 1.5], 0.05, r"p_values\[1\] = 1.5; p-values must lie in \[0, 1\]"),
     ([0.1], 1.0, r"q=1.0: must be strictly between 0 and 1")],
)
def test_benjamini_hochberg_rejects_bad_input(p, q, match):
    with pytest.raises(ValueError, match=match):
        stats.benjamini_hochberg(p, q=q)


# --- robust location and scale ----------------------------------------------------------------


def test_median_mad_of_textbook_set():
    # Wikipedia "Median absolute deviation": {1, 1, 2, 2, 4, 6, 9} has median 2 and MAD 1.
    assert stats.median_mad([1, 1, 2, 2, 4, 6, 9]) == pytest.approx((2.0, 1.4826))


def test_scaled_mad_estimates_sigma_for_normal_data():
    _, mad = stats.median_mad(np.random.default_rng(12).normal(10.0, 3.0, 20_000))
    assert mad == pytest.approx(3.0, rel=0.03)


def test_robust_z_ignores_outliers_in_the_reference():
    assert stats.robust_z(5.0, [1, 1, 2, 2, 4, 6, 9]) == pytest.approx(3 / 1.4826)
    assert stats.robust_z(5.0, [1, 1, 2, 2, 4, 6, 9000]) == pytest.approx(3 / 1.4826)


def test_robust_z_with_zero_mad():
    assert stats.robust_z(1.0, [1, 1, 1, 2]) == 0.0
    assert stats.robust_z(0.5, [1, 1, 1, 2]) == -math.inf


def test_robust_z_rejects_nan_x():
    with pytest.raises(ValueError, match=r"x is nan; must be finite"):
        stats.robust_z(math.nan, [1.0, 2.0])


# --- two-sample tests and power ---------------------------------------------------------------


def test_welch_t_test_matches_r_sleep_example():
    # R: t.test(extra ~ group, data = sleep) -> t = -1.8608, df = 17.776, p-value = 0.07939
    assert stats.welch_t_test(SLEEP_GROUP1, SLEEP_GROUP2) == pytest.approx(0.07939, abs=5e-6)


def test_welch_t_test_needs_two_per_side():
    with pytest.raises(ValueError, match=r"b: 1 value\(s\); Welch's t test needs at least 2"):
        stats.welch_t_test([1.0, 2.0], [1.0])


def test_mann_whitney_exact_small_case():
    # U = 0 is 1 of C(6, 3) = 20 equally likely arrangements: two-sided p = 2 / 20
    assert stats.mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)


def test_mann_whitney_matches_r_sleep_example_with_ties():
    # R: wilcox.test(extra ~ group, data = sleep) -> W = 25.5, p-value = 0.06933
    assert stats.mann_whitney_p(SLEEP_GROUP1, SLEEP_GROUP2) == pytest.approx(0.06933, abs=5e-6)


def test_min_detectable_change_large_n_is_the_z_formula():
    n = 1_000_000
    z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)
    assert stats.min_detectable_change(0.02, n, n) == pytest.approx(z * 0.02 * math.sqrt(2 / n), rel=1e-4)


def test_min_detectable_change_near_lehrs_rule():
    # Lehr: n = 16 per group detects a one-sigma change at alpha 0.05, power 0.8 (z approximation).
    assert stats.min_detectable_change(1.0, 16, 16) == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(("n_a", "n_b"), [(5, 5), (10, 10), (4, 12)])
def test_min_detectable_change_has_the_requested_power(n_a, n_b):
    delta = stats.min_detectable_change(0.03, n_a, n_b)
    nu, ncp = n_a + n_b - 2, delta / (0.03 * math.sqrt(1 / n_a + 1 / n_b))
    crit = sps.t.ppf(0.975, nu)
    power = sps.nct.sf(crit, nu, ncp) + sps.nct.cdf(-crit, nu, ncp)  # exact, noncentral t
    assert power == pytest.approx(0.8, abs=0.01)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [((0.0, 5, 5), {}, r"baseline_cv=0.0: must be finite and > 0"),
     ((0.02, 1, 5), {}, r"n_a=1, n_b=5: need at least 2"),
     ((0.02, 5, 5), dict(power=1.0), r"power=1.0: must be strictly between 0 and 1")],
)
def test_min_detectable_change_rejects_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        stats.min_detectable_change(*args, **kwargs)


def test_steadiness_on_raw_values_catches_a_short_slow_head_that_batch_means_miss():
    times = np.random.default_rng(13).gamma(400.0, 0.00025, 300)  # 0.1 s, cv 5 %
    times[:30] *= 1.2  # first 10 % is 4 sigma slower: a too-short warm-up
    assert stats.steadiness(times, num_batches=len(times)).change_p < 0.01
    assert stats.steadiness(times).is_steady  # documented limitation of the batch-means default


# --- permutation p-value, FCR-adjusted level, two proportions (harness.compare) ----------------

# Efron & Tibshirani (1993), Table 2.1: survival days of mice, treatment vs control.
MOUSE_TREATMENT = [94, 197, 16, 38, 99, 141, 23]
MOUSE_CONTROL = [52, 104, 146, 10, 51, 30, 40, 27, 46]


def test_fcr_adjusted_confidence_follows_benjamini_yekutieli():
    # The BH (1995) example rejects 4 of 15 at q = 0.05: selected intervals at 1 - 4 (0.05) / 15.
    p = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262,
         0.5719, 0.6528, 0.7590, 1.0]
    _, rejected = stats.benjamini_hochberg(p, q=0.05)
    level = stats.fcr_adjusted_confidence(int(rejected.sum()), len(p), q=0.05)
    assert level == pytest.approx(1 - 4 * 0.05 / 15)
    assert stats.fcr_adjusted_confidence(0, 15) == pytest.approx(1 - 0.05 / 15)
    assert stats.fcr_adjusted_confidence(1, 1, q=0.05) == pytest.approx(0.95)
    with pytest.raises(ValueError, match=r"num_selected=3: must lie in \[0, num_tests=2\]"):
        stats.fcr_adjusted_confidence(3, 2)


def test_two_proportion_interval_matches_agresti_aspirin_example():
    ci = stats.two_proportion_interval(189 / 11034, 11034, 104 / 11037, 11037)
    assert ci.estimate == pytest.approx(0.0077, abs=5e-5)
    assert (ci.low, ci.high) == pytest.approx((0.005, 0.011), abs=5e-4)
    assert ci.method == "wald"
    with pytest.raises(ValueError, match=r"p1=1.5: a proportion must lie in \[0, 1\]"):
        stats.two_proportion_interval(1.5, 10, 0.5, 10)


def test_permutation_p_value_exact_on_a_complete_separation():
    # 3 + 3 values, fully separated: 2 of the C(6, 3) = 20 splits are as extreme (one per direction).
    assert stats.permutation_p_value([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(2 / 20)
    assert stats.permutation_p_value([1.0] * 5, [2.0] * 5) == pytest.approx(2 / 252)
    assert stats.permutation_p_value([3.0, 1.0, 2.0], [2.0, 3.0, 1.0]) == 1.0


def test_permutation_p_value_matches_scipy_on_the_mouse_data():
    def stat(x, y, axis=-1):
        return np.abs(np.log(np.mean(x, axis=axis) / np.mean(y, axis=axis)))

    ref = sps.permutation_test((MOUSE_TREATMENT, MOUSE_CONTROL), stat, permutation_type="independent",
                               alternative="greater", n_resamples=np.inf).pvalue  # all C(16, 7) = 11440
    p = stats.permutation_p_value(MOUSE_TREATMENT, MOUSE_CONTROL)
    assert p == pytest.approx(ref, rel=1e-9)
    assert 0.1 < p < 0.4  # E&T ch. 15: the treatment effect is not significant
    mc = stats.permutation_p_value(MOUSE_TREATMENT, MOUSE_CONTROL, max_exact=10, num_permutations=20_000)
    assert mc == pytest.approx(ref, abs=0.01)


def test_permutation_test_holds_its_level_on_skewed_noise():
    rng = np.random.default_rng(5)
    p = [stats.permutation_p_value(rng.lognormal(0, 0.4, 5), rng.lognormal(0, 0.4, 5)) for _ in range(2000)]
    assert np.mean(np.array(p) <= 0.05) <= 0.05 + 0.01  # exact: at most the level, up to sampling



# --- covariate adjustment (the machine-speed probe) ---------------------------------------------


def _speed_data(rng, n, *, effect=0.0, base_shift=0.0, noise=0.01, slope=-1.0):
    """Throughputs whose log follows a probe time's log with `slope`, plus noise; the baseline's machine
    is `base_shift` slower (log probe) on average."""
    x_c, x_b = rng.normal(0, 0.05, n), rng.normal(base_shift, 0.05, n)
    y_c = 100 * np.exp(effect + slope * x_c + rng.normal(0, noise, n))
    y_b = 100 * np.exp(slope * x_b + rng.normal(0, noise, n))
    return y_c, y_b, np.exp(x_c) * 1e-3, np.exp(x_b) * 1e-3


def test_ancova_fit_is_the_adjusted_difference_of_means_with_the_pooled_within_slope():
    rng = np.random.default_rng(3)
    y_c, y_b, x_c, x_b = _speed_data(rng, 7, effect=-0.04, base_shift=0.05)
    fit = stats.ancova_fit(y_c, y_b, x_c, x_b)
    ly_c, ly_b, lx_c, lx_b = map(np.log, (y_c, y_b, x_c, x_b))
    sxy = ((lx_c - lx_c.mean()) * (ly_c - ly_c.mean())).sum() + ((lx_b - lx_b.mean()) * (ly_b - ly_b.mean())).sum()
    sxx = ((lx_c - lx_c.mean()) ** 2).sum() + ((lx_b - lx_b.mean()) ** 2).sum()
    slope = sxy / sxx
    assert fit.slope == pytest.approx(slope, rel=1e-9)
    adjusted = (ly_c.mean() - ly_b.mean()) - slope * (lx_c.mean() - lx_b.mean())  # Snedecor & Cochran 18.3
    assert fit.effect == pytest.approx(adjusted, rel=1e-9)
    assert fit.unadjusted == pytest.approx(ly_c.mean() - ly_b.mean(), rel=1e-12)
    assert fit.covariate_shift == pytest.approx(lx_c.mean() - lx_b.mean(), rel=1e-12)
    # standard error of an adjusted difference: s^2 (1/n_c + 1/n_b + shift^2 / Sxx)
    resid = np.concatenate([ly_c - ly_c.mean() - slope * (lx_c - lx_c.mean()),
                            ly_b - ly_b.mean() - slope * (lx_b - lx_b.mean())])
    s2 = (resid ** 2).sum() / (14 - 3)
    assert fit.df == 11 and fit.residual_sd == pytest.approx(math.sqrt(s2), rel=1e-9)
    assert fit.se == pytest.approx(math.sqrt(s2 * (2 / 7 + fit.covariate_shift ** 2 / sxx)), rel=1e-9)
    ci = fit.interval(0.95)
    half = sps.t.ppf(0.975, 11) * fit.se
    assert (ci.low, ci.high, ci.method) == (pytest.approx(fit.effect - half), pytest.approx(fit.effect + half), "ancova_t")


def test_ancova_removes_a_machine_that_was_slower_on_one_side():
    rng = np.random.default_rng(4)
    y_c, y_b, x_c, x_b = _speed_data(rng, 10, base_shift=0.1)  # no code change; baseline machine 10 % slower
    assert stats.permutation_p_value(y_c, y_b) < 0.01  # the plain test sees the machine
    fit = stats.ancova_fit(y_c, y_b, x_c, x_b)
    assert abs(stats.to_percent(fit.effect)) < 2 and fit.interval(0.99).low < 0 < fit.interval(0.99).high
    assert stats.ancova_permutation_p(y_c, y_b, x_c, x_b) > 0.05
    y_c5 = y_c * 0.95  # a real 5 % slowdown on top is seen, and sized right
    fit5 = stats.ancova_fit(y_c5, y_b, x_c, x_b)
    assert stats.ancova_permutation_p(y_c5, y_b, x_c, x_b) < 0.001
    assert stats.to_percent(fit5.effect) == pytest.approx(stats.to_percent(fit.effect + math.log(0.95)), abs=1e-9)


def test_ancova_permutation_test_holds_its_level_when_the_covariate_differs_between_groups():
    rng = np.random.default_rng(6)
    p = [stats.ancova_permutation_p(*_speed_data(rng, 5, base_shift=0.05, noise=0.02), num_permutations=400)
         for _ in range(500)]
    assert np.mean(np.array(p) <= 0.05) <= 0.05 + 0.025  # 500 tests: +2.5 points is ~2.5 standard errors


def test_ancova_refuses_a_covariate_without_spread_and_too_few_values():
    with pytest.raises(ValueError, match="does not vary within either group"):
        stats.ancova_fit([1.0, 2.0], [1.0, 2.0], [1.0, 1.0], [2.0, 2.0])
    with pytest.raises(ValueError, match="at least 2 per side"):
        stats.ancova_fit([1.0], [1.0, 2.0], [1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="same length"):
        stats.ancova_fit([1.0, 2.0], [1.0, 2.0], [1.0], [1.0, 2.0])


def test_window_interval_is_on_the_windows_clock_at_the_step_intervals_relative_width():
    rng = np.random.default_rng(3)
    times = 0.1 + 0.01 * rng.standard_normal(100)
    steps = stats.batch_means_interval(times, 256)
    # the window's wall clock holds the fences too: here 5 % more time than the steps
    window = stats.window_throughput_interval(times, 256, 256 * 100, times.sum() * 1.05)
    assert window.estimate == pytest.approx(256 * 100 / (times.sum() * 1.05))
    assert window.low < window.estimate < window.high
    assert window.low / window.estimate == pytest.approx(steps.low / steps.estimate)
    assert window.high / window.estimate == pytest.approx(steps.high / steps.estimate)
    # the step-time interval alone would not even contain the window's figure
    assert not steps.low <= window.estimate <= steps.high
