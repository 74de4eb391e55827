"""harness.stats.inference against textbook datasets with published answers, plus calibration on synthetic
data: effect intervals, multiplicity, robust screening, power, permutation and covariate-adjusted tests."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from harness.stats import inference

# Student (1908) / Cushny & Peebles: extra hours of sleep under two drugs (R's `sleep` data set).
SLEEP_GROUP1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_GROUP2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
SLEEP_DIFF = [b - a for a, b in zip(SLEEP_GROUP1, SLEEP_GROUP2)]
# R: t.test(extra ~ group, data = sleep, paired = TRUE) -> 95% CI of group1 - group2
SLEEP_PAIRED_CI = (0.7001142, 2.4598858)


# --- the mean of repeats -------------------------------------------------------------------------


def test_mean_interval_is_students_t_interval():
    ci = inference.mean_interval(SLEEP_DIFF)  # the paired t interval is the one-sample t interval of the differences
    assert ci.estimate == pytest.approx(1.58) and (ci.low, ci.high) == pytest.approx(SLEEP_PAIRED_CI, abs=1e-6)
    x = [101.0, 98.5, 100.2]
    assert (inference.mean_interval(x, confidence=0.9).low, inference.mean_interval(x, confidence=0.9).high) == \
        pytest.approx(sps.t.interval(0.9, 2, loc=np.mean(x), scale=sps.sem(x)))  # scipy as the oracle
    one = inference.mean_interval([5.0])
    assert one.estimate == 5.0 and math.isnan(one.low) and math.isnan(one.high)
    with pytest.raises(ValueError, match="values: empty"):
        inference.mean_interval([])


# --- bootstrap --------------------------------------------------------------------------------


def _two_sides(seed: int = 9) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    baseline = 1000.0 * (1 + rng.normal(0, 0.01, 10))
    candidate = 1100.0 * (1 + rng.normal(0, 0.01, 10))
    return candidate, baseline


def test_bootstrap_contains_true_ratio_and_excludes_no_change():
    candidate, baseline = _two_sides()
    ci = inference.bootstrap_log_ratio(candidate, baseline)
    assert ci.low < math.log(1.1) < ci.high
    assert ci.low > 0
    assert ci.estimate == pytest.approx(math.log(candidate.mean() / baseline.mean()))
    assert inference.to_percent(ci.estimate) == pytest.approx(10.0, abs=1.0)
    assert ci.method == "bootstrap_percentile"


def test_bootstrap_is_deterministic_per_seed():
    candidate, baseline = _two_sides()
    first = inference.bootstrap_log_ratio(candidate, baseline, seed=3)
    assert inference.bootstrap_log_ratio(candidate, baseline, seed=3) == first
    assert inference.bootstrap_log_ratio(candidate, baseline, seed=4) != first


def test_bootstrap_single_repeat_has_nan_bounds():
    ci = inference.bootstrap_log_ratio([2.0], [1.0, 1.1])
    assert ci.estimate == pytest.approx(math.log(2 / 1.05)) and math.isnan(ci.low)


def test_bootstrap_rejects_non_positive_values():
    with pytest.raises(ValueError, match=r"baseline\[0\] = 0.0; values must be > 0"):
        inference.bootstrap_log_ratio([1.0, 2.0], [0.0, 1.0])


def test_to_percent():
    assert inference.to_percent(0.0) == 0.0
    assert inference.to_percent(math.log(1.25)) == pytest.approx(25.0)
    assert inference.to_percent(math.log(0.8)) == pytest.approx(-20.0)


# --- multiple comparisons ---------------------------------------------------------------------

# Benjamini & Hochberg (1995), sec. 3.2: 15 p-values; BH rejects 4 at q = 0.05 (Bonferroni: 3).
BH_P = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240,
        0.4262, 0.5719, 0.6528, 0.7590, 1.0000]
# min_{j>=i} 15 p_(j) / j, worked by hand (equal to R's p.adjust(method = "BH"))
BH_ADJUSTED = [0.0015, 0.003, 0.0095, 0.035625, 0.0603, 0.063857, 0.063857, 0.0645, 0.0765,
               0.486, 0.581182, 0.714875, 0.753231, 0.813214, 1.0]


def test_benjamini_hochberg_paper_example_in_shuffled_order():
    order = np.random.default_rng(10).permutation(15)
    adjusted, rejected = inference.benjamini_hochberg(np.array(BH_P)[order], q=0.05)
    assert adjusted == pytest.approx(np.array(BH_ADJUSTED)[order], abs=1e-6)
    assert rejected.sum() == 4
    assert set(np.array(BH_P)[order][rejected]) == {0.0001, 0.0004, 0.0019, 0.0095}


def test_benjamini_hochberg_adjusted_p_is_monotone():
    p = np.random.default_rng(11).uniform(size=50) ** 3
    adjusted, _ = inference.benjamini_hochberg(p)
    assert np.all(np.diff(adjusted[np.argsort(p)]) >= 0)
    assert np.all(adjusted >= p)


@pytest.mark.parametrize(
    ("p", "q", "match"),
    [([], 0.05, r"p_values: empty"), ([0.1, 1.5], 0.05, r"p_values\[1\] = 1.5; p-values must lie in \[0, 1\]"),
     ([0.1], 1.0, r"q=1.0: must be strictly between 0 and 1")],
)
def test_benjamini_hochberg_rejects_bad_input(p, q, match):
    with pytest.raises(ValueError, match=match):
        inference.benjamini_hochberg(p, q=q)


# --- robust location and scale ----------------------------------------------------------------


def test_median_mad_of_textbook_set():
    # Wikipedia "Median absolute deviation": {1, 1, 2, 2, 4, 6, 9} has median 2 and MAD 1.
    assert inference.median_mad([1, 1, 2, 2, 4, 6, 9]) == pytest.approx((2.0, 1.4826))


def test_scaled_mad_estimates_sigma_for_normal_data():
    _, mad = inference.median_mad(np.random.default_rng(12).normal(10.0, 3.0, 20_000))
    assert mad == pytest.approx(3.0, rel=0.03)


def test_robust_z_ignores_outliers_in_the_reference():
    assert inference.robust_z(5.0, [1, 1, 2, 2, 4, 6, 9]) == pytest.approx(3 / 1.4826)
    assert inference.robust_z(5.0, [1, 1, 2, 2, 4, 6, 9000]) == pytest.approx(3 / 1.4826)


def test_robust_z_with_zero_mad():
    assert inference.robust_z(1.0, [1, 1, 1, 2]) == 0.0
    assert inference.robust_z(0.5, [1, 1, 1, 2]) == -math.inf


def test_robust_z_rejects_nan_x():
    with pytest.raises(ValueError, match=r"x is nan; must be finite"):
        inference.robust_z(math.nan, [1.0, 2.0])


# --- power ---------------------------------------------------------------


def test_min_detectable_change_large_n_is_the_z_formula():
    n = 1_000_000
    z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)
    assert inference.min_detectable_change(0.02, n, n) == pytest.approx(z * 0.02 * math.sqrt(2 / n), rel=1e-4)


def test_min_detectable_change_near_lehrs_rule():
    # Lehr: n = 16 per group detects a one-sigma change at alpha 0.05, power 0.8 (z approximation).
    assert inference.min_detectable_change(1.0, 16, 16) == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(("n_a", "n_b"), [(5, 5), (10, 10), (4, 12)])
def test_min_detectable_change_has_the_requested_power(n_a, n_b):
    delta = inference.min_detectable_change(0.03, n_a, n_b)
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
        inference.min_detectable_change(*args, **kwargs)


# --- permutation p-value, FCR-adjusted level, two proportions (harness.analysis.judge.compare) ----------------

# Efron & Tibshirani (1993), Table 2.1: survival days of mice, treatment vs control.
MOUSE_TREATMENT = [94, 197, 16, 38, 99, 141, 23]
MOUSE_CONTROL = [52, 104, 146, 10, 51, 30, 40, 27, 46]


def test_fcr_adjusted_confidence_follows_benjamini_yekutieli():
    # The BH (1995) example rejects 4 of 15 at q = 0.05: selected intervals at 1 - 4 (0.05) / 15.
    p = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262,
         0.5719, 0.6528, 0.7590, 1.0]
    _, rejected = inference.benjamini_hochberg(p, q=0.05)
    level = inference.fcr_adjusted_confidence(int(rejected.sum()), len(p), q=0.05)
    assert level == pytest.approx(1 - 4 * 0.05 / 15)
    assert inference.fcr_adjusted_confidence(0, 15) == pytest.approx(1 - 0.05 / 15)
    assert inference.fcr_adjusted_confidence(1, 1, q=0.05) == pytest.approx(0.95)
    with pytest.raises(ValueError, match=r"num_selected=3: must lie in \[0, num_tests=2\]"):
        inference.fcr_adjusted_confidence(3, 2)


def test_two_proportion_interval_matches_agresti_aspirin_example():
    ci = inference.two_proportion_interval(189 / 11034, 11034, 104 / 11037, 11037)
    assert ci.estimate == pytest.approx(0.0077, abs=5e-5)
    assert (ci.low, ci.high) == pytest.approx((0.005, 0.011), abs=5e-4)
    assert ci.method == "wald"
    with pytest.raises(ValueError, match=r"p1=1.5: a proportion must lie in \[0, 1\]"):
        inference.two_proportion_interval(1.5, 10, 0.5, 10)


def test_permutation_p_value_exact_on_a_complete_separation():
    # 3 + 3 values, fully separated: 2 of the C(6, 3) = 20 splits are as extreme (one per direction).
    assert inference.permutation_p_value([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(2 / 20)
    assert inference.permutation_p_value([1.0] * 5, [2.0] * 5) == pytest.approx(2 / 252)
    assert inference.permutation_p_value([3.0, 1.0, 2.0], [2.0, 3.0, 1.0]) == 1.0


def test_permutation_p_value_matches_scipy_on_the_mouse_data():
    def stat(x, y, axis=-1):
        return np.abs(np.log(np.mean(x, axis=axis) / np.mean(y, axis=axis)))

    ref = sps.permutation_test((MOUSE_TREATMENT, MOUSE_CONTROL), stat, permutation_type="independent",
                               alternative="greater", n_resamples=np.inf).pvalue  # all C(16, 7) = 11440
    p = inference.permutation_p_value(MOUSE_TREATMENT, MOUSE_CONTROL)
    assert p == pytest.approx(ref, rel=1e-9)
    assert 0.1 < p < 0.4  # E&T ch. 15: the treatment effect is not significant
    mc = inference.permutation_p_value(MOUSE_TREATMENT, MOUSE_CONTROL, max_exact=10, num_permutations=20_000)
    assert mc == pytest.approx(ref, abs=0.01)


def test_permutation_test_holds_its_level_on_skewed_noise():
    rng = np.random.default_rng(5)
    p = [inference.permutation_p_value(rng.lognormal(0, 0.4, 5), rng.lognormal(0, 0.4, 5)) for _ in range(2000)]
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
    fit = inference.ancova_fit(y_c, y_b, x_c, x_b)
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
    assert inference.permutation_p_value(y_c, y_b) < 0.01  # the plain test sees the machine
    fit = inference.ancova_fit(y_c, y_b, x_c, x_b)
    assert abs(inference.to_percent(fit.effect)) < 2 and fit.interval(0.99).low < 0 < fit.interval(0.99).high
    assert inference.ancova_permutation_p(y_c, y_b, x_c, x_b) > 0.05
    y_c5 = y_c * 0.95  # a real 5 % slowdown on top is seen, and sized right
    fit5 = inference.ancova_fit(y_c5, y_b, x_c, x_b)
    assert inference.ancova_permutation_p(y_c5, y_b, x_c, x_b) < 0.001
    assert inference.to_percent(fit5.effect) == pytest.approx(inference.to_percent(fit.effect + math.log(0.95)), abs=1e-9)


def test_ancova_permutation_test_holds_its_level_when_the_covariate_differs_between_groups():
    rng = np.random.default_rng(6)
    p = [inference.ancova_permutation_p(*_speed_data(rng, 5, base_shift=0.05, noise=0.02), num_permutations=400)
         for _ in range(500)]
    assert np.mean(np.array(p) <= 0.05) <= 0.05 + 0.025  # 500 tests: +2.5 points is ~2.5 standard errors


def test_ancova_refuses_a_covariate_without_spread_and_too_few_values():
    with pytest.raises(ValueError, match="does not vary within either group"):
        inference.ancova_fit([1.0, 2.0], [1.0, 2.0], [1.0, 1.0], [2.0, 2.0])
    with pytest.raises(ValueError, match="at least 2 per side"):
        inference.ancova_fit([1.0], [1.0, 2.0], [1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="same length"):
        inference.ancova_fit([1.0, 2.0], [1.0, 2.0], [1.0], [1.0, 2.0])
